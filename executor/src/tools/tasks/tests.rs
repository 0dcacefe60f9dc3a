use super::*;
use crate::provider::TOOL_ERROR_PREFIX;
use agent_runtime::protocol::content::{FunctionCall, FunctionType, ToolCall};

/// A conversation the task tools run in, kept the way the session keeps it: each call is an
/// assistant message with the tool call, then the tool message with its result.
#[derive(Default)]
struct Conversation {
    messages: Vec<Arc<ModelMessage>>,
}

impl Conversation {
    async fn call(&mut self, operation: TaskOperation, input: Value) -> ToolOutcome {
        let tool = TaskTool(operation);
        let context = ToolContext {
            conversation: self.messages.clone(),
            ..ToolContext::detached()
        };
        let outcome = tool.run(input.clone(), context).await;
        let id = format!("call-{}", self.messages.len());
        self.messages.push(Arc::new(ModelMessage {
            tool_calls: Some(vec![ToolCall {
                id: id.clone(),
                call_type: FunctionType::Function,
                function: FunctionCall {
                    name: tool.name().to_owned(),
                    arguments: input.to_string(),
                },
            }]),
            ..ModelMessage::new(Role::Assistant, "")
        }));
        let output = outcome.output.to_string();
        let content = match outcome.is_error {
            true => format!("{TOOL_ERROR_PREFIX}{output}"),
            false => output,
        };
        self.messages.push(Arc::new(ModelMessage {
            tool_call_id: Some(id),
            name: Some(tool.name().to_owned()),
            ..ModelMessage::new(Role::Tool, content)
        }));
        outcome
    }

    async fn create(&mut self, subject: &str) -> String {
        let created = self
            .call(
                TaskOperation::Create,
                json!({ "subject": subject, "description": format!("{subject} in detail") }),
            )
            .await;
        assert!(!created.is_error, "{:?}", created.output);
        created.output["taskId"].as_str().unwrap().to_owned()
    }
}

#[tokio::test]
async fn created_tasks_are_pending_and_read_back_from_the_conversation() {
    let mut conversation = Conversation::default();
    let first = conversation.create("Write the parser").await;
    let second = conversation.create("Test the parser").await;
    assert_eq!(first.len(), 8);
    assert_ne!(first, second);

    let got = conversation
        .call(TaskOperation::Get, json!({ "taskId": first }))
        .await;
    assert_eq!(got.output["subject"], "Write the parser");
    assert_eq!(got.output["description"], "Write the parser in detail");
    assert_eq!(got.output["status"], "pending");
    let listed = conversation.call(TaskOperation::List, json!({})).await;
    assert_eq!(
        listed.output,
        json!([
            {"id": first, "subject": "Write the parser", "status": "pending", "blockedBy": []},
            {"id": second, "subject": "Test the parser", "status": "pending", "blockedBy": []},
        ])
    );
}

#[tokio::test]
async fn updates_change_fields_merge_metadata_and_link_both_sides_of_a_dependency() {
    let mut conversation = Conversation::default();
    let parser = conversation.create("Parser").await;
    let tests = conversation.create("Tests").await;
    let updated = conversation
        .call(
            TaskOperation::Update,
            json!({ "taskId": tests, "status": "in_progress", "owner": "agent-1",
                    "metadata": {"area": "qa"}, "addBlockedBy": [parser, parser, "missing"] }),
        )
        .await;
    assert_eq!(updated.output["status"], "in_progress");
    assert_eq!(updated.output["blockedBy"], json!([parser, "missing"]));
    conversation
        .call(
            TaskOperation::Update,
            json!({ "taskId": tests, "metadata": {"size": 3} }),
        )
        .await;

    // Every read rebuilds the list from the conversation: both sides of the dependency hold.
    let parser_now = conversation
        .call(TaskOperation::Get, json!({ "taskId": parser }))
        .await;
    assert_eq!(parser_now.output["blocks"], json!([tests]));
    let tests_now = conversation
        .call(TaskOperation::Get, json!({ "taskId": tests }))
        .await;
    assert_eq!(
        tests_now.output["metadata"],
        json!({"area": "qa", "size": 3})
    );
    assert_eq!(tests_now.output["owner"], "agent-1");
    let listed = conversation.call(TaskOperation::List, json!({})).await;
    assert_eq!(listed.output[1]["owner"], "agent-1");
    assert_eq!(listed.output[1].get("description"), None);
}

#[tokio::test]
async fn deleted_and_unknown_tasks_are_not_found_and_failed_calls_change_nothing() {
    let mut conversation = Conversation::default();
    let task = conversation.create("Temporary").await;
    let deleted = conversation
        .call(
            TaskOperation::Update,
            json!({ "taskId": task, "status": "deleted" }),
        )
        .await;
    assert_eq!(deleted.output, json!({ "taskId": task, "deleted": true }));
    for (operation, input) in [
        (TaskOperation::Get, json!({ "taskId": task })),
        (
            TaskOperation::Update,
            json!({ "taskId": task, "status": "completed" }),
        ),
        (TaskOperation::Get, json!({ "taskId": "nope" })),
    ] {
        let outcome = conversation.call(operation, input.clone()).await;
        assert!(outcome.is_error, "{input}");
        let id = input["taskId"].as_str().unwrap();
        assert_eq!(outcome.output["error"], format!("Task #{id} not found"));
    }
    let listed = conversation.call(TaskOperation::List, json!({})).await;
    assert_eq!(listed.output, json!([]));
}

#[tokio::test]
async fn a_full_list_refuses_new_tasks_until_one_is_deleted() {
    let mut conversation = Conversation::default();
    let mut first = String::new();
    for index in 0..MAX_TASKS {
        let id = conversation.create(&format!("task {index}")).await;
        if index == 0 {
            first = id;
        }
    }
    let refused = conversation
        .call(
            TaskOperation::Create,
            json!({ "subject": "one more", "description": "" }),
        )
        .await;
    assert!(refused.is_error);
    assert!(
        refused.output["error"]
            .as_str()
            .unwrap()
            .contains("The task list is full")
    );
    conversation
        .call(
            TaskOperation::Update,
            json!({ "taskId": first, "status": "deleted" }),
        )
        .await;
    conversation.create("one more").await;
}
