//! Tools a model may call, and what the permission pipeline needs to know about them.
//!
//! So far only the harmless `demo_approval` tool exists, so that approvals work end to end
//! offline; the built-in tools (`Read`, `Write`, `Bash`, ...) plug in here.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::provider::ToolSpec;

/// Name of the demo tool.
pub const DEMO_APPROVAL_TOOL: &str = "demo_approval";

/// What a tool can do to the world; decides the default permission (agent.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolEffect {
    /// Reads only: allowed by default.
    ReadOnly,
    /// Changes files.
    Edit,
    /// Runs commands or otherwise acts: asks by default.
    Execute,
}

/// The result of running a tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutcome {
    pub output: Value,
    pub is_error: bool,
    /// A one-line human summary for the `display` of `tool_result`.
    pub summary: String,
}

#[async_trait]
pub trait Tool: Send + Sync + std::fmt::Debug {
    fn spec(&self) -> ToolSpec;
    fn effect(&self) -> ToolEffect;
    /// Human title of the approval prompt.
    fn approval_title(&self, input: &Value) -> String;
    async fn run(&self, input: Value) -> ToolOutcome;
}

/// The tools of a session, by name.
#[derive(Clone, Debug, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    pub fn new(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        let tools = tools
            .into_iter()
            .map(|tool| (tool.spec().name, tool))
            .collect();
        Self { tools }
    }

    /// The tools every demo session has.
    pub fn demo() -> Self {
        Self::new([Arc::new(DemoApprovalTool) as Arc<dyn Tool>])
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|tool| tool.spec()).collect()
    }
}

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

    async fn run(&self, input: Value) -> ToolOutcome {
        let action = input.get("action").and_then(Value::as_str);
        match action {
            Some(action) => ToolOutcome {
                output: json!({ "done": true, "action": action, "note": "The demo tool changes nothing." }),
                is_error: false,
                summary: "The demo tool ran".to_owned(),
            },
            None => ToolOutcome {
                output: json!({ "error": "input.action must be a string" }),
                is_error: true,
                summary: "Invalid input".to_owned(),
            },
        }
    }
}
