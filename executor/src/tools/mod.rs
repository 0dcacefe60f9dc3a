//! Tools a model may call, and what the permission pipeline needs to know about them.
//!
//! So far only the harmless `demo_approval` tool exists, so that approvals work end to end
//! offline; the built-in tools (`Read`, `Write`, `Bash`, ...) plug in here.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;

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

/// What the permission pipeline learns from a tool's own safety checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolCheck {
    /// What permission rules `Tool:pattern` match against: the path for file tools, the
    /// command line for `Bash`, the URL for `WebFetch`. `None`: only `Tool` rules match.
    pub subject: Option<String>,
    /// Paths the call touches, shown in the approval prompt.
    pub affected_paths: Vec<String>,
}

/// A progress report of a running tool (`tool_progress`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolProgressUpdate {
    pub message: Option<String>,
    pub data: Option<Value>,
}

/// What a running tool gets besides its input.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// Progress reports; they reach the event stream while the tool runs.
    pub progress: mpsc::Sender<ToolProgressUpdate>,
}

impl ToolContext {
    /// A context whose progress goes nowhere (tests, callers that do not stream).
    pub fn detached() -> Self {
        let (progress, _) = mpsc::channel(1);
        Self { progress }
    }

    /// Sends a progress report; a full or closed channel drops it rather than slowing the tool.
    pub fn report(&self, message: impl Into<String>, data: Option<Value>) {
        let _ = self.progress.try_send(ToolProgressUpdate {
            message: Some(message.into()),
            data,
        });
    }
}

#[async_trait]
pub trait Tool: Send + Sync + std::fmt::Debug {
    fn spec(&self) -> ToolSpec;
    fn effect(&self) -> ToolEffect;
    /// The tool's own safety checks on schema-valid input (path safety, URL safety). A refusal
    /// here ends the call with an error `tool_result`; no rule or mode can override it.
    fn check(&self, input: &Value) -> Result<ToolCheck, String>;
    /// Human title of the approval prompt.
    fn approval_title(&self, input: &Value) -> String;
    /// Runs the call. Dropping the future cancels it (a `Bash` child is killed).
    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome;
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

    fn check(&self, _input: &Value) -> Result<ToolCheck, String> {
        Ok(ToolCheck::default())
    }

    fn approval_title(&self, _input: &Value) -> String {
        "Run the demo tool".to_owned()
    }

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
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
