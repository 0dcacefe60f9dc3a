//! `demo_approval`: the tool of the demo provider. It changes nothing but needs approval, so
//! the approval flow can be tried offline.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::output::{failure, success};
use super::{Tool, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;

/// Name of the demo tool.
pub use crate::provider::DEMO_APPROVAL_TOOL;

/// A tool that does nothing but needs approval, so the approval flow can be tried offline.
#[derive(Debug, Clone, Copy)]
pub struct DemoApprovalTool;

#[async_trait]
impl Tool for DemoApprovalTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: DEMO_APPROVAL_TOOL.to_owned(),
            description: "A harmless demo tool that changes nothing but asks for approval."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "action": { "type": "string" } },
                "required": ["action"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Execute
    }

    fn approval_title(&self, _input: &Value) -> String {
        "Run the demo tool".to_owned()
    }

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        let action = input.get("action").and_then(Value::as_str);
        match action {
            Some(action) => success(
                json!({ "done": true, "action": action, "note": "The demo tool changes nothing." }),
                "The demo tool ran",
            ),
            None => failure("input.action must be a string"),
        }
    }
}
