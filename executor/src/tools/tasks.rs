//! `TaskCreate`, `TaskGet`, `TaskUpdate`, `TaskList`: the session's structured task list, a
//! dependency graph of tasks separate from `TodoWrite` (docs/agent.md §6.7).
//!
//! The list is session state that must survive a restart and a handoff to another executor, so
//! it lives where the rest of the conversation does: every change is a tool call and its result
//! in the transcript, and each call rebuilds the list from the conversation it is given (the
//! created or updated task is in the result; the other side of a dependency is derived from the
//! call's input the same way it was when it ran). A fork takes the list as of its fork point; a
//! compaction that drops the calls drops the list with them.

use std::sync::Arc;

use agent_runtime::protocol::content::{ModelMessage, Role};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::output::{failure, now_ms, success};
use super::{Tool, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::{ToolSpec, is_tool_error, text_of};

/// The four tools, by name.
pub const TASK_TOOLS: [&str; 4] = ["TaskCreate", "TaskGet", "TaskUpdate", "TaskList"];
/// Most tasks one session's list holds: the list lives in the transcript, so it stays bounded.
pub const MAX_TASKS: usize = 500;
/// Longest subject and description, in characters.
const MAX_SUBJECT_CHARS: u64 = 1_000;
const MAX_DESCRIPTION_CHARS: u64 = 16_000;

/// One task of the list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub subject: String,
    pub description: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_form: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub blocks: Vec<String>,
    #[serde(default)]
    pub blocked_by: Vec<String>,
    /// Epoch milliseconds.
    pub created_at: u64,
    pub updated_at: u64,
}

/// The list, in creation order.
#[derive(Debug, Default)]
struct TaskBoard {
    tasks: Vec<Task>,
}

impl TaskBoard {
    /// The list as the conversation's successful `TaskCreate` and `TaskUpdate` calls left it.
    fn from_conversation(messages: &[Arc<ModelMessage>]) -> TaskBoard {
        let mut calls: std::collections::HashMap<&str, (&str, &str)> = Default::default();
        let mut board = TaskBoard::default();
        for message in messages {
            for call in message.tool_calls.iter().flatten() {
                let name = call.function.name.as_str();
                if name == "TaskCreate" || name == "TaskUpdate" {
                    calls.insert(&call.id, (name, &call.function.arguments));
                }
            }
            if message.role != Role::Tool {
                continue;
            }
            let Some(&(name, arguments)) =
                message.tool_call_id.as_deref().and_then(|id| calls.get(id))
            else {
                continue;
            };
            let text = text_of(&message.content);
            if is_tool_error(&text) {
                continue;
            }
            let (Ok(output), Ok(input)) = (
                serde_json::from_str::<Value>(&text),
                serde_json::from_str::<Value>(arguments),
            ) else {
                continue;
            };
            board.replay(name, &input, output);
        }
        board
    }

    fn replay(&mut self, name: &str, input: &Value, output: Value) {
        if name == "TaskCreate" {
            if let Ok(task) = serde_json::from_value::<Task>(output["task"].clone()) {
                self.tasks.push(task);
            }
            return;
        }
        let Some(id) = output["taskId"].as_str().or(output["id"].as_str()) else {
            return;
        };
        let id = id.to_owned();
        if output["deleted"] == true {
            self.tasks.retain(|task| task.id != id);
            return;
        }
        if let (Ok(task), Some(index)) =
            (serde_json::from_value::<Task>(output), self.position(&id))
        {
            self.tasks[index] = task;
            self.link_other_sides(&id, input);
        }
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.tasks.iter().position(|task| task.id == id)
    }

    fn get(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|task| task.id == id)
    }

    /// `addBlocks` / `addBlockedBy` of `id`'s update, recorded on the other tasks (those that
    /// exist), without duplicates.
    fn link_other_sides(&mut self, id: &str, input: &Value) {
        for other in strings(input, "addBlocks") {
            if let Some(task) = self.tasks.iter_mut().find(|t| t.id == other) {
                push_unique(&mut task.blocked_by, id);
            }
        }
        for other in strings(input, "addBlockedBy") {
            if let Some(task) = self.tasks.iter_mut().find(|t| t.id == other) {
                push_unique(&mut task.blocks, id);
            }
        }
    }

    /// An id of 8 characters no task of the list has.
    fn new_id(&self) -> String {
        loop {
            let id: String = agent_runtime::ids::nanoid().chars().take(8).collect();
            if self.get(&id).is_none() {
                return id;
            }
        }
    }
}

fn strings<'a>(input: &'a Value, key: &str) -> impl Iterator<Item = &'a str> {
    input[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn push_unique(list: &mut Vec<String>, id: &str) {
    if !list.iter().any(|existing| existing == id) {
        list.push(id.to_owned());
    }
}

fn text(input: &Value, key: &str) -> Option<String> {
    input[key].as_str().map(str::to_owned)
}

fn not_found(id: &str) -> ToolOutcome {
    failure(format!("Task #{id} not found"))
}

fn task_value(task: &Task) -> Value {
    serde_json::to_value(task).unwrap_or_default()
}

/// Which of the four tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskOperation {
    Create,
    Get,
    Update,
    List,
}

#[derive(Debug)]
pub struct TaskTool(pub TaskOperation);

impl TaskTool {
    fn name(&self) -> &'static str {
        match self.0 {
            TaskOperation::Create => TASK_TOOLS[0],
            TaskOperation::Get => TASK_TOOLS[1],
            TaskOperation::Update => TASK_TOOLS[2],
            TaskOperation::List => TASK_TOOLS[3],
        }
    }
}

#[async_trait]
impl Tool for TaskTool {
    fn spec(&self) -> ToolSpec {
        let id = json!({ "type": "string", "minLength": 1 });
        let ids = json!({ "type": "array", "items": { "type": "string" } });
        let (description, properties, required) = match self.0 {
            TaskOperation::Create => (
                "Adds a task to the session's task list; new tasks are pending.",
                json!({
                    "subject": { "type": "string", "minLength": 1, "maxLength": MAX_SUBJECT_CHARS },
                    "description": { "type": "string", "maxLength": MAX_DESCRIPTION_CHARS },
                    "activeForm": { "type": "string", "maxLength": MAX_SUBJECT_CHARS },
                    "metadata": { "type": "object" },
                }),
                json!(["subject", "description"]),
            ),
            TaskOperation::Get => (
                "Reads one task of the session's task list.",
                json!({ "taskId": id }),
                json!(["taskId"]),
            ),
            TaskOperation::Update => (
                "Changes a task: its status (`deleted` removes it), text, owner, metadata (merged) \
                 and dependencies (`addBlocks`, `addBlockedBy`, recorded on both tasks).",
                json!({
                    "taskId": id,
                    "status": { "type": "string", "enum": ["pending", "in_progress", "completed", "deleted"] },
                    "subject": { "type": "string", "minLength": 1, "maxLength": MAX_SUBJECT_CHARS },
                    "description": { "type": "string", "maxLength": MAX_DESCRIPTION_CHARS },
                    "activeForm": { "type": "string", "maxLength": MAX_SUBJECT_CHARS },
                    "owner": { "type": "string", "maxLength": MAX_SUBJECT_CHARS },
                    "metadata": { "type": "object" },
                    "addBlocks": ids,
                    "addBlockedBy": ids,
                }),
                json!(["taskId"]),
            ),
            TaskOperation::List => (
                "Lists the session's tasks (without their descriptions).",
                json!({}),
                json!([]),
            ),
        };
        ToolSpec {
            name: self.name().to_owned(),
            description: description.to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            }),
        }
    }

    /// Changes nothing outside the conversation.
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn approval_title(&self, _input: &Value) -> String {
        format!("{} on the task list", self.name())
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let mut board = TaskBoard::from_conversation(&context.conversation);
        match self.0 {
            TaskOperation::Create => create(&board, &input),
            TaskOperation::Get => {
                let id = input["taskId"].as_str().unwrap_or_default();
                match board.get(id) {
                    Some(task) => success(task_value(task), format!("Task #{id}")),
                    None => not_found(id),
                }
            }
            TaskOperation::Update => update(&mut board, &input),
            TaskOperation::List => {
                let summary: Vec<Value> = board
                    .tasks
                    .iter()
                    .map(|task| {
                        let mut row = json!({
                            "id": task.id, "subject": task.subject,
                            "status": task.status, "blockedBy": task.blocked_by,
                        });
                        if let Some(owner) = &task.owner {
                            row["owner"] = Value::from(owner.as_str());
                        }
                        row
                    })
                    .collect();
                let count = summary.len();
                success(Value::Array(summary), format!("{count} task(s)"))
            }
        }
    }
}

fn create(board: &TaskBoard, input: &Value) -> ToolOutcome {
    if board.tasks.len() >= MAX_TASKS {
        return failure(format!(
            "The task list is full ({MAX_TASKS} tasks); complete or delete tasks first"
        ));
    }
    let now = now_ms();
    let task = Task {
        id: board.new_id(),
        subject: text(input, "subject").unwrap_or_default(),
        description: text(input, "description").unwrap_or_default(),
        status: "pending".to_owned(),
        owner: None,
        active_form: text(input, "activeForm"),
        metadata: input["metadata"].as_object().cloned(),
        blocks: Vec::new(),
        blocked_by: Vec::new(),
        created_at: now,
        updated_at: now,
    };
    let summary = format!("Created task #{}: {}", task.id, task.subject);
    success(
        json!({ "taskId": task.id, "task": task_value(&task) }),
        summary,
    )
}

fn update(board: &mut TaskBoard, input: &Value) -> ToolOutcome {
    let id = input["taskId"].as_str().unwrap_or_default().to_owned();
    let Some(index) = board.position(&id) else {
        return not_found(&id);
    };
    if input["status"] == "deleted" {
        board.tasks.remove(index);
        return success(
            json!({ "taskId": id, "deleted": true }),
            format!("Deleted task #{id}"),
        );
    }
    let task = &mut board.tasks[index];
    let set = |slot: &mut String, key: &str| {
        if let Some(value) = text(input, key) {
            *slot = value;
        }
    };
    set(&mut task.status, "status");
    set(&mut task.subject, "subject");
    set(&mut task.description, "description");
    if let Some(active_form) = text(input, "activeForm") {
        task.active_form = Some(active_form);
    }
    if let Some(owner) = text(input, "owner") {
        task.owner = Some(owner);
    }
    if let Some(changes) = input["metadata"].as_object() {
        let metadata = task.metadata.get_or_insert_with(Map::new);
        metadata.extend(changes.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    for other in strings(input, "addBlocks") {
        push_unique(&mut task.blocks, other);
    }
    for other in strings(input, "addBlockedBy") {
        push_unique(&mut task.blocked_by, other);
    }
    task.updated_at = now_ms();
    let updated = task_value(task);
    board.link_other_sides(&id, input);
    success(updated, format!("Updated task #{id}"))
}

#[cfg(test)]
mod tests;
