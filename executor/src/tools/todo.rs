//! `TodoWrite`: the model's todo list. The tool keeps no state: each call carries the whole
//! list, which the transcript then holds (as the tool call and its result), so the list survives
//! a restart and a fork exactly like the rest of the conversation. Items get ids (kept when the
//! model sends them back) and timestamps (a kept item keeps its `createdAt`, read from the
//! previous list in the conversation), and come back sorted: completed, in progress, pending.

use std::sync::Arc;

use agent_runtime::protocol::content::{ModelMessage, Role};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::output::{now_ms, success};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::{ToolSpec, is_tool_error, text_of};

/// Most items one list holds, and the longest text of one: the list lives in the transcript
/// (every call carries it whole), so it stays bounded.
const MAX_ITEMS: usize = 200;
const MAX_ITEM_CHARS: usize = 2_000;

#[derive(Debug, Default)]
pub struct TodoWriteTool;

fn todos(input: &Value) -> &[Value] {
    input["todos"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn count(items: &[Value], status: &str) -> usize {
    items.iter().filter(|t| t["status"] == status).count()
}

#[async_trait]
impl Tool for TodoWriteTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "TodoWrite".to_owned(),
            description: format!(
                "Replaces the task list (at most {MAX_ITEMS} items). At most one task is in_progress."
            ),
            input_schema: json!({
                "type": "object",
                "properties": { "todos": { "type": "array", "maxItems": MAX_ITEMS, "items": {
                    "type": "object",
                    "properties": {
                        "content": { "type": "string", "minLength": 1, "maxLength": MAX_ITEM_CHARS },
                        "status": { "enum": ["pending", "in_progress", "completed"] },
                        "activeForm": { "type": "string", "maxLength": MAX_ITEM_CHARS },
                        "priority": { "enum": ["high", "medium", "low"] },
                        "id": { "type": "string", "minLength": 1, "maxLength": 64 },
                    },
                    "required": ["content", "status"],
                    "additionalProperties": false,
                }}},
                "required": ["todos"],
                "additionalProperties": false,
            }),
        }
    }

    /// Changes nothing outside the conversation.
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        if count(todos(input), "in_progress") > 1 {
            return Err("at most one task may be in_progress".to_owned());
        }
        Ok(ToolCheck::default())
    }

    fn approval_title(&self, _input: &Value) -> String {
        "Update the task list".to_owned()
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let previous = previous_items(&context.conversation);
        let now = now_ms();
        let mut items: Vec<Value> = todos(&input)
            .iter()
            .map(|item| {
                let id = item["id"].as_str().map_or_else(
                    || agent_runtime::ids::nanoid()[..8].to_owned(),
                    str::to_owned,
                );
                let before = previous.iter().find(|p| p["id"] == id.as_str());
                let unchanged = before.is_some_and(|p| {
                    ["content", "status", "activeForm", "priority"]
                        .iter()
                        .all(|key| {
                            p[*key] == item[*key]
                                || (*key == "priority"
                                    && item[*key].is_null()
                                    && p[*key] == "medium")
                        })
                });
                let created = before.and_then(|p| p["createdAt"].as_u64()).unwrap_or(now);
                let updated = match (unchanged, before) {
                    (true, Some(p)) => p["updatedAt"].as_u64().unwrap_or(now),
                    _ => now,
                };
                let mut entry = json!({
                    "id": id,
                    "content": item["content"],
                    "status": item["status"],
                    "priority": item.get("priority").cloned().unwrap_or_else(|| json!("medium")),
                    "createdAt": created,
                    "updatedAt": updated,
                });
                if let Some(active_form) = item.get("activeForm") {
                    entry["activeForm"] = active_form.clone();
                }
                entry
            })
            .collect();
        items.sort_by_key(|item| match item["status"].as_str() {
            Some("completed") => 0,
            Some("in_progress") => 1,
            _ => 2,
        });
        let (pending, active, done) = (
            count(&items, "pending"),
            count(&items, "in_progress"),
            count(&items, "completed"),
        );
        let total = items.len();
        success(
            json!({
                "todos": items,
                "stats": { "total": total, "completed": done, "inProgress": active, "pending": pending },
            }),
            format!("{total} task(s): {done} completed, {active} in progress, {pending} pending"),
        )
    }
}

/// The list the last successful `TodoWrite` of the conversation returned.
fn previous_items(conversation: &[Arc<ModelMessage>]) -> Vec<Value> {
    conversation
        .iter()
        .rev()
        .filter(|m| m.role == Role::Tool && m.name.as_deref() == Some("TodoWrite"))
        .map(|m| text_of(&m.content))
        .find(|text| !is_tool_error(text))
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|output| output["todos"].as_array().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn write(conversation: &mut Vec<Arc<ModelMessage>>, todos: Value) -> Value {
        let context = ToolContext {
            conversation: conversation.clone(),
            ..ToolContext::detached()
        };
        let outcome = TodoWriteTool.run(json!({ "todos": todos }), context).await;
        assert!(!outcome.is_error);
        conversation.push(Arc::new(ModelMessage {
            tool_call_id: Some(format!("call-{}", conversation.len())),
            name: Some("TodoWrite".into()),
            ..ModelMessage::new(Role::Tool, outcome.output.to_string())
        }));
        outcome.output
    }

    #[test]
    fn the_list_and_its_texts_are_capped() {
        let schema = TodoWriteTool.spec().input_schema;
        let item = json!({ "content": "x", "status": "pending" });
        let list = |n: usize| json!({ "todos": vec![item.clone(); n] });
        assert!(crate::tools::schema::validate(&schema, &list(MAX_ITEMS)).is_ok());
        let over = crate::tools::schema::validate(&schema, &list(MAX_ITEMS + 1)).unwrap_err();
        assert!(over.contains("at most 200 items"), "{over}");
        let long = json!({ "todos": [{ "content": "x".repeat(MAX_ITEM_CHARS + 1), "status": "pending" }] });
        assert!(crate::tools::schema::validate(&schema, &long).is_err());
    }

    #[tokio::test]
    async fn items_get_ids_priorities_and_timestamps_and_come_back_sorted() {
        let mut conversation = Vec::new();
        let first = write(
            &mut conversation,
            json!([
                { "content": "Write tests", "status": "pending", "activeForm": "Writing tests" },
                { "content": "Fix bug", "status": "in_progress", "priority": "high" },
                { "content": "Read code", "status": "completed", "id": "read" },
            ]),
        )
        .await;
        let statuses: Vec<&str> = first["todos"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["completed", "in_progress", "pending"]);
        assert_eq!(first["todos"][0]["id"], "read");
        assert_eq!(first["todos"][2]["priority"], "medium");
        assert_eq!(first["todos"][1]["priority"], "high");
        assert_eq!(first["todos"][2]["id"].as_str().unwrap().len(), 8);
        assert_eq!(
            first["stats"],
            json!({ "total": 3, "completed": 1, "inProgress": 1, "pending": 1 })
        );
        let read_created = first["todos"][0]["createdAt"].clone();
        std::thread::sleep(std::time::Duration::from_millis(3));
        let second = write(
            &mut conversation,
            json!([{ "content": "Read code", "status": "completed", "id": "read" }]),
        )
        .await;
        assert_eq!(
            second["todos"][0]["createdAt"], read_created,
            "a kept item keeps its creation time"
        );
    }
}
