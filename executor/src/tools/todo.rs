//! `TodoWrite`: the model's task list. The tool keeps no state: each call carries the whole
//! list, which the transcript then holds (as the tool call and its result), so the list survives
//! a restart and a fork exactly like the rest of the conversation.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::output::success;
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;

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
            description: "Replaces the task list. At most one task is in_progress.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "todos": { "type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "content": { "type": "string", "minLength": 1 },
                        "status": { "enum": ["pending", "in_progress", "completed"] },
                        "activeForm": { "type": "string" },
                        "id": { "type": "string" },
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

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        let items = todos(&input);
        let (pending, active, done) = (
            count(items, "pending"),
            count(items, "in_progress"),
            count(items, "completed"),
        );
        success(
            json!({ "todos": items, "pending": pending, "inProgress": active, "completed": done }),
            format!(
                "{} task(s): {done} completed, {active} in progress, {pending} pending",
                items.len()
            ),
        )
    }
}
