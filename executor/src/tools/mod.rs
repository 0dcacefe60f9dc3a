//! Tools a model may call, and what the permission pipeline needs to know about them: the
//! built-in tools (`Read`, `Write`, `Edit`, `NotebookEdit`, `Glob`, `Grep`, `Bash`, `WebFetch`,
//! `TodoWrite`, `TaskCreate`, `TaskGet`, `TaskUpdate`, `TaskList`, `AskUserQuestion`,
//! `EnterPlanMode`, `ExitPlanMode`, `TaskOutput`, `KillShell`, `MemoryRead`, `MemoryWrite`, chosen by [`ToolsConfig`]) and the harmless `demo_approval` tool of the demo provider.

pub mod agents;
mod bash;
mod builtin;
mod demo;
mod discover;
mod file_state;
mod files;
pub mod fs;
pub mod mcp;
mod memory;
mod notebook;
pub mod output;
mod plan;
pub mod process_groups;
mod question;
mod regular_file;
pub mod schema;
mod search;
mod shell_tools;
pub mod shells;
mod skill;
mod tasks;
mod todo;
mod walk;
mod web_fetch;
mod web_search;

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_runtime::protocol::content::ModelMessage;
use agent_runtime::telemetry::TraceContext;
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::provider::ToolSpec;

pub use crate::permissions::ToolEffect;
pub use bash::BashTool;
pub use builtin::{BUILTIN_TOOLS, RISKY_TOOLS, ToolsConfig, ToolsError, WebSearchConfig};
pub use demo::{DEMO_APPROVAL_TOOL, DemoApprovalTool};
pub use discover::{DISCOVER_TOOLS_TOOL, DiscoverToolsTool, discovered};
pub use file_state::{TOOL_STATE_EXTENSION, state_extensions};
pub use files::{EditTool, FileEnv, ReadTool, WriteTool};
pub use memory::{
    MEMORY_READ_TOOL, MEMORY_WRITE_TOOL, MemoryConfig, MemoryReadTool, MemoryScope, MemoryWriteTool,
};
pub use notebook::{NOTEBOOK_EDIT_TOOL, NotebookEditTool};
pub use plan::{
    ENTER_PLAN_MODE_TOOL, EXIT_PLAN_MODE_TOOL, EnterPlanModeTool, ExitPlanModeTool, effective_mode,
};
pub use question::{ASK_USER_QUESTION_TOOL, AskUserQuestionTool};
pub use search::{GlobTool, GrepTool};
pub use shell_tools::{KILL_SHELL_TOOL, KillShellTool, TASK_OUTPUT_TOOL, TaskOutputTool};
pub use shells::{SessionShells, ShellLimits};
pub use skill::{SKILL_TOOL, SkillDefinition, SkillTool, active_policy, permits};
pub use tasks::{TASK_TOOLS, Task, TaskOperation, TaskTool};
pub use todo::TodoWriteTool;
pub use web_fetch::{
    HostResolver, SystemResolver, WebFetchConfig, WebFetchTool, is_global, is_metadata_address,
};
pub use web_search::{DEFAULT_BRAVE_URL, SearchProvider, WEB_SEARCH_TOOL, WebSearchTool};

/// The output of the call that started the background task `id` (a shell or a subagent, named
/// by `key`) in this conversation: how a task this process no longer holds is known to have
/// existed (it is reported lost, never started again).
pub fn background_output(conversation: &[Arc<ModelMessage>], key: &str, id: &str) -> Option<Value> {
    conversation.iter().rev().find_map(|message| {
        if message.role != agent_runtime::protocol::content::Role::Tool {
            return None;
        }
        let agent_runtime::protocol::content::UserContent::Text(text) = &message.content else {
            return None;
        };
        let output: Value = serde_json::from_str(text).ok()?;
        (output["background"] == true && output[key] == id).then_some(output)
    })
}

/// The result of running a tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutcome {
    pub output: Value,
    pub is_error: bool,
    /// A one-line human summary for the `display` of `tool_result`.
    pub summary: String,
    /// Session state the call leaves (what a file looked like when this session read or wrote
    /// it), kept with the call's message in the transcript (`extensions.toolState`) and never
    /// shown to the model; later calls read it from their [`ToolContext::conversation`].
    pub state: Option<Value>,
    /// A runtime patch the call applies (a loaded skill): published as `tool_runtime_patch`
    /// before the call's `tool_result`.
    pub patch: Option<agent_runtime::protocol::stream::RuntimePatch>,
    /// A context patch the call applies (plan mode changing the permission mode): published
    /// as `tool_context_patch` before the call's `tool_result`.
    pub context_patch: Option<agent_runtime::protocol::stream::ContextPatch>,
    /// Messages the call adds to the conversation (a skill's system prompt addition):
    /// published as `tool_new_messages` and appended after the step's tool results.
    pub new_messages: Vec<ModelMessage>,
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

impl ToolCheck {
    /// Rules match the input's string field `key`; the call touches no path.
    pub fn on_field(input: &Value, key: &str) -> ToolCheck {
        ToolCheck {
            subject: input[key].as_str().map(str::to_owned),
            affected_paths: Vec::new(),
        }
    }
}

/// The input's string field `key`; empty when it is absent or not a string (the input schema
/// has already said which fields are required).
pub fn text<'a>(input: &'a Value, key: &str) -> &'a str {
    input[key].as_str().unwrap_or_default()
}

/// A report of a running tool: progress (`tool_progress`), or a note saying what it does
/// (`tool_message`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolProgressUpdate {
    pub message: Option<String>,
    pub data: Option<Value>,
    /// How much is done, of `total` when known (an MCP server's `notifications/progress`).
    pub completed: Option<serde_json::Number>,
    pub total: Option<serde_json::Number>,
    /// A `tool_message` (its `message` is the summary) rather than progress.
    pub note: bool,
}

/// What a tool that asks the user (its own prompt, not a permission) shows in
/// `permission.requested`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserPrompt {
    pub title: String,
    pub message: String,
    /// What the prompt is (`question`, `plan`); permissions carry none.
    pub kind: Option<String>,
}

/// The user's answer to a tool's own prompt: `permission.resolve`'s `approved` and `reason`. A
/// prompt nobody answered in time, or cancelled, is not approved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserAnswer {
    pub approved: bool,
    pub reason: Option<String>,
}

/// What a running tool gets besides its input.
#[derive(Clone)]
pub struct ToolContext {
    /// Progress reports; they reach the event stream while the tool runs.
    pub progress: mpsc::Sender<ToolProgressUpdate>,
    /// The session's conversation as the model sees it, up to this call (earlier calls of the
    /// same step and their results included): session state kept in the transcript, such as
    /// the structured task list, is rebuilt from it.
    pub conversation: Vec<Arc<ModelMessage>>,
    /// The answer to the tool's own prompt ([`Tool::user_prompt`]), when it has one.
    pub answer: Option<UserAnswer>,
    /// The session's background shells (`Bash` with `run_in_background`, `TaskOutput`,
    /// `KillShell`).
    pub shells: Arc<SessionShells>,
    /// The session's tenant and creator (whose memories `MemoryRead`/`MemoryWrite` see).
    pub tenant_id: String,
    pub creator: String,
    /// The store of the memory tools, when the session has one.
    pub memories: Option<Arc<dyn agent_runtime_store::AgentMemories>>,
    /// The session's subagents (`Task`, `TaskOutput`, `TaskStop`).
    pub agents: Arc<agents::SessionAgents>,
    /// Runs child agent loops; `None` inside a child (depth 1) and without a session.
    pub runner: Option<Arc<dyn agents::AgentRunner>>,
    /// The span the tool runs under (the executor's command span), when the request is traced:
    /// MCP calls carry it on as `_meta.traceparent`.
    pub trace: Option<TraceContext>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("conversation", &self.conversation.len())
            .field("answer", &self.answer)
            .field("tenant_id", &self.tenant_id)
            .field("memories", &self.memories.is_some())
            .field("runner", &self.runner.is_some())
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context whose progress goes nowhere (tests, callers that do not stream).
    pub fn detached() -> Self {
        let (progress, _) = mpsc::channel(1);
        Self {
            progress,
            conversation: Vec::new(),
            answer: None,
            shells: SessionShells::new(""),
            tenant_id: String::new(),
            creator: String::new(),
            memories: None,
            agents: agents::SessionAgents::new(4),
            runner: None,
            trace: None,
        }
    }

    /// A context whose conversation holds the state earlier calls left, as a session's would
    /// (for running tools without a session: tests, tools called directly).
    pub fn after(outcomes: &[&ToolOutcome]) -> Self {
        let conversation = outcomes
            .iter()
            .enumerate()
            .map(|(index, outcome)| {
                Arc::new(ModelMessage {
                    tool_call_id: Some(format!("call-{index}")),
                    extensions: outcome.state.clone().map(state_extensions),
                    ..ModelMessage::new(
                        agent_runtime::protocol::content::Role::Tool,
                        outcome.output.to_string(),
                    )
                })
            })
            .collect();
        Self {
            conversation,
            ..Self::detached()
        }
    }

    /// Sends a progress report; a full or closed channel drops it rather than slowing the tool.
    pub fn report(&self, message: impl Into<String>, data: Option<Value>) {
        let _ = self.progress.try_send(ToolProgressUpdate {
            message: Some(message.into()),
            data,
            ..ToolProgressUpdate::default()
        });
    }

    /// Says what the tool is doing (`tool_message`), like the reference's tools do.
    pub fn say(&self, summary: impl Into<String>) {
        let _ = self.progress.try_send(ToolProgressUpdate {
            message: Some(summary.into()),
            note: true,
            ..ToolProgressUpdate::default()
        });
    }
}

#[async_trait]
pub trait Tool: Send + Sync + std::fmt::Debug {
    fn spec(&self) -> ToolSpec;
    fn effect(&self) -> ToolEffect;
    /// The kind of one call, for tools whose calls differ (a `WebFetch` POST writes).
    fn effect_of(&self, _input: &Value) -> ToolEffect {
        self.effect()
    }
    /// The tool's own safety checks on schema-valid input (path safety, URL safety). A refusal
    /// here ends the call with an error `tool_result`; no rule or mode can override it. Tools
    /// that touch nothing outside the conversation have none.
    fn check(&self, _input: &Value) -> Result<ToolCheck, String> {
        Ok(ToolCheck::default())
    }
    /// Human title of the approval prompt.
    fn approval_title(&self, input: &Value) -> String;
    /// For a tool whose work is asking the user (`AskUserQuestion`): its prompt. The pipeline
    /// then always asks (no rule or mode answers for the user) and hands the answer to `run`.
    fn user_prompt(&self, _input: &Value) -> Option<UserPrompt> {
        None
    }
    /// Whether the user declining this tool's prompt ends the request (a rejected plan): the
    /// step's calls finish, then the request ends instead of asking the model again.
    fn ends_request_when_declined(&self) -> bool {
        false
    }
    /// Whether the tool reaches data of one user of the tenant, the session's creator
    /// (user-scoped memory): a session with such a tool takes input only from its creator.
    fn belongs_to_creator(&self) -> bool {
        false
    }
    /// Runs the call. Dropping the future cancels it (a `Bash` child is killed).
    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome;
}

/// The tools of a session, by name.
#[derive(Clone, Debug)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// With `tools.workspace_root`: builds each session's own tools.
    workspaces: Option<Arc<builtin::Workspaces>>,
    /// Tools offered only once `DiscoverTools` found them (`tools.deferred_tools`).
    deferred: std::collections::BTreeSet<String>,
    /// The model of each configured skill that names one.
    skill_models: BTreeMap<String, String>,
    /// Tools of MCP servers: their lists change at run time, so they are looked up per turn.
    mcp: mcp::McpTools,
    /// Subagents one session may run at once (`tools.max_subagents`).
    pub max_subagents: usize,
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self::new([])
    }
}

impl ToolRegistry {
    pub fn new(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        let tools = tools
            .into_iter()
            .map(|tool| (tool.spec().name, tool))
            .collect();
        Self {
            tools,
            workspaces: None,
            deferred: Default::default(),
            skill_models: BTreeMap::new(),
            mcp: mcp::McpTools::default(),
            max_subagents: 4,
        }
    }

    /// The MCP servers of this set (for readiness and metrics).
    pub fn mcp_servers(&self) -> &[Arc<mcp::McpServer>] {
        &self.mcp.servers
    }

    /// The model a configured skill of this set switches to.
    pub fn skill_model(&self, skill: &str) -> Option<&str> {
        self.skill_models.get(skill).map(String::as_str)
    }

    /// These tools are hidden until discovered: with `DiscoverTools` over them.
    pub fn with_deferred(mut self, names: &[String]) -> Self {
        let hidden: Vec<(String, String)> = names
            .iter()
            .filter_map(|name| Some((name.clone(), self.tools.get(name)?.spec().description)))
            .collect();
        if hidden.is_empty() {
            return self;
        }
        self.deferred = hidden.iter().map(|(name, _)| name.clone()).collect();
        let discover: Arc<dyn Tool> = Arc::new(DiscoverToolsTool { catalog: hidden });
        self.tools.insert(DISCOVER_TOOLS_TOOL.to_owned(), discover);
        self
    }

    /// Whether `name` is offered in a conversation that discovered `discovered`.
    pub fn offered(&self, name: &str, discovered: &std::collections::BTreeSet<String>) -> bool {
        !self.deferred.contains(name) || discovered.contains(name)
    }

    /// Whether a tool of this set reaches the session creator's own data
    /// ([`Tool::belongs_to_creator`]).
    pub fn belongs_to_creator(&self) -> bool {
        self.tools.values().any(|tool| tool.belongs_to_creator())
    }

    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// The tools of one session: this set itself, or with per-session workspaces
    /// (`tools.workspace_root`) the full set in `<workspace_root>/<tenant>/<session>`, created
    /// if missing. If it cannot be created, the session gets only the tools that need no
    /// workspace (never a shared directory).
    pub fn for_session(self: &Arc<Self>, tenant_id: &str, session_id: &str) -> Arc<ToolRegistry> {
        let Some(workspaces) = &self.workspaces else {
            return Arc::clone(self);
        };
        Arc::new(match workspaces.for_session(tenant_id, session_id) {
            Ok(tools) => tools,
            Err(error) => {
                tracing::warn!(%error, "no workspace for a session: its file tools and Bash are unavailable");
                ToolRegistry {
                    deferred: self.deferred.clone(),
                    skill_models: self.skill_models.clone(),
                    mcp: self.mcp.clone(),
                    max_subagents: self.max_subagents,
                    ..ToolRegistry::new(self.tools.values().cloned())
                }
            }
        })
    }

    /// Deletes a closed session's workspace (nothing without per-session workspaces).
    pub fn remove_workspace(&self, tenant_id: &str, session_id: &str) {
        if let Some(workspaces) = &self.workspaces
            && let Err(error) = workspaces.remove(tenant_id, session_id)
        {
            tracing::warn!(%error, "cannot remove a closed session's workspace");
        }
    }

    /// The tools every demo session has.
    pub fn demo() -> Self {
        Self::new([Arc::new(DemoApprovalTool) as Arc<dyn Tool>])
    }

    /// A tool by name: a registered one, or one an MCP server offers now.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned().or_else(|| self.mcp.get(name))
    }

    /// What a call of a tool this set does not offer answers: the MCP server it belongs to is
    /// down (its code and reason), or `Unknown tool`.
    pub fn not_offered(&self, name: &str) -> ToolOutcome {
        match self.mcp.unavailable(name) {
            Some(error) => error.outcome(),
            None => output::failure(format!("Unknown tool: {name}")),
        }
    }

    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// What the model is offered now: the registered tools and the MCP servers' current ones.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.tools.values().map(|tool| tool.spec()).collect();
        specs.extend(self.mcp.specs());
        specs
    }
}
