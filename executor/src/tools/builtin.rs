//! Which built-in tools a deployment registers (docs/agent.md §6.1): none unless
//! `builtin_tools = true`; then all of them, narrowed by `allowed_tools` and reduced by
//! `disallowed_tools`. File tools need a filesystem capability (`roots`); without one they are
//! not registered at all.
//!
//! With `workspace_root` every session gets its own workspace directory,
//! `<workspace_root>/<tenant>/<session>/`, created when the session is loaded and removed when it
//! is closed: it is the root of the file tools and the working directory of `Bash` (the only
//! host directory the sandbox binds writable), so one session or tenant cannot see another's
//! files (reliability TOOL-23). Without it, the configured `roots`/`cwd` are shared by every
//! session of the process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::agents::{AgentDefinition, SubagentTool, TaskStopTool, builtin_agents};
use super::bash::BashTool;
use super::files::{EditTool, FileEnv, ReadTool, WriteTool};
use super::fs::FsCapability;
use super::mcp::{
    LIST_MCP_RESOURCES_TOOL, ListMcpResourcesTool, MCP_PREFIX, McpFilter, McpServer,
    McpServerConfig, McpTools, McpTransport, READ_MCP_RESOURCE_TOOL, ReadMcpResourceTool,
};
use super::memory::{MemoryConfig, MemoryReadTool, MemoryWriteTool};
use super::notebook::NotebookEditTool;
use super::output::DEFAULT_MAX_OUTPUT_BYTES;
use super::plan::{EnterPlanModeTool, ExitPlanModeTool};
use super::question::AskUserQuestionTool;
use super::search::{GlobTool, GrepTool};
use super::shell_tools::{KillShellTool, TaskOutputTool};
use super::shells::ShellLimits;
use super::skill::{SkillDefinition, SkillTool};
use super::tasks::{TaskOperation, TaskTool};
use super::todo::TodoWriteTool;
use super::web_fetch::{WebFetchConfig, WebFetchTool};
use super::web_search::{DEFAULT_BRAVE_URL, SearchProvider, WebSearchTool};
use super::{Tool, ToolRegistry};
use crate::sandbox::{Sandbox, SandboxConfig, SandboxError};
use agent_runtime::secret::Secret;

/// Every built-in tool name.
pub const BUILTIN_TOOLS: [&str; 27] = [
    "Read",
    "Write",
    "Edit",
    "NotebookEdit",
    "Glob",
    "Grep",
    "Bash",
    "KillShell",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
    "TaskOutput",
    "TaskCreate",
    "TaskGet",
    "TaskUpdate",
    "TaskList",
    "AskUserQuestion",
    "EnterPlanMode",
    "ExitPlanMode",
    "Skill",
    "MemoryRead",
    "MemoryWrite",
    "DiscoverTools",
    "ListMcpResources",
    "ReadMcpResource",
    "Task",
    "TaskStop",
];
/// Tools that change files, run commands or reach the network (named by the start-up warning).
pub const RISKY_TOOLS: [&str; 7] = [
    "Write",
    "Edit",
    "NotebookEdit",
    "Bash",
    "KillShell",
    "WebFetch",
    "WebSearch",
];
const PATH_TOOLS: [&str; 6] = ["Read", "Write", "Edit", "NotebookEdit", "Glob", "Grep"];

#[derive(Clone, Debug, PartialEq)]
pub struct ToolsConfig {
    /// Register the built-in tools at all. Default off (server profile).
    pub builtin_tools: bool,
    /// Only these built-in tools (`None`: all of them).
    pub allowed_tools: Option<Vec<String>>,
    /// Never these tools.
    pub disallowed_tools: Vec<String>,
    /// Filesystem roots of the path-taking tools; empty means no filesystem capability.
    pub roots: Vec<PathBuf>,
    /// Working directory (relative paths, `Bash`). Default: the first root, else the
    /// process's current directory.
    pub cwd: Option<PathBuf>,
    /// Per-session workspaces under this directory (created if missing) instead of the shared
    /// `roots`/`cwd`, which must then be unset. Default: none.
    pub workspace_root: Option<PathBuf>,
    /// Limit of one text field of a tool's output, in bytes. Default 30 000.
    pub max_output_bytes: usize,
    /// `Bash` timeout when the call gives none. Default 2 min; a call may ask for up to 10 min.
    pub bash_timeout: Duration,
    /// Longest silence between two `tool_progress` events of `Bash`. Default 5 s.
    pub bash_progress_interval: Duration,
    /// Background shells (`Bash` with `run_in_background`) one session may run at once.
    /// Default 4.
    pub max_background_shells: usize,
    /// Background shells all sessions of one tenant may run at once in this process.
    /// Default 16.
    pub max_background_shells_per_tenant: usize,
    /// A background shell still running after this long is killed. Default 1 h.
    pub background_shell_lifetime: Duration,
    pub web_fetch: WebFetchConfig,
    /// The search provider of `WebSearch` (not registered without one). Default: none.
    pub web_search: Option<WebSearchConfig>,
    /// The skills of `Skill`, which is registered exactly when there are some (even with
    /// `builtin_tools = false`, unless `disallowed_tools` names it). Default: none.
    pub skills: Vec<SkillDefinition>,
    /// Registered tools the model is offered only after `DiscoverTools` found them (which is
    /// registered exactly when this names a registered tool). Default: none.
    pub deferred_tools: Vec<String>,
    /// The memory tools, registered exactly when enabled (even with `builtin_tools = false`,
    /// unless `disallowed_tools` names them). Default: off.
    pub memory: MemoryConfig,
    /// The MCP servers whose tools this set offers (`mcp__<server>__<tool>`, filtered by
    /// `allowed_tools`/`disallowed_tools`), with `ListMcpResources` and `ReadMcpResource`.
    /// Default: none.
    pub mcp_servers: Vec<McpServerConfig>,
    /// Let MCP servers be child processes on stdio (started like `Bash` commands). Default off.
    pub mcp_allow_stdio: bool,
    /// Operator-defined subagents of `Task` (beside the built-in `general-purpose`, `Explore`
    /// and `Plan`; one with a built-in's name replaces it). `Task`, `TaskStop` and `TaskOutput`
    /// are registered when `builtin_tools` selects `Task` or when this names an agent.
    /// Default: none.
    pub agents: Vec<AgentDefinition>,
    /// Subagents one session may run at once. Default 4.
    pub max_subagents: usize,
    /// Longest one subagent runs. Default 10 min.
    pub subagent_timeout: Duration,
    pub sandbox: SandboxConfig,
    /// The file where the process groups of `Bash` commands are recorded; at start, groups a
    /// previous run recorded there and left running are killed (`process_groups`). The first
    /// tool set built in a process decides. Default: none (no record, no sweep).
    pub process_record: Option<PathBuf>,
}

/// Where `WebSearch` searches.
#[derive(Clone, Debug, PartialEq)]
pub struct WebSearchConfig {
    pub provider: SearchProvider,
    /// SearXNG's base URL; for Brave, the endpoint (default [`DEFAULT_BRAVE_URL`]).
    pub url: Option<String>,
    /// The API key's environment variable or file (Brave).
    pub api_key_env: Option<String>,
    pub api_key_file: Option<PathBuf>,
}

impl WebSearchConfig {
    /// The key, read now; `None` for a provider that needs none.
    fn api_key(&self) -> Result<Option<Secret>, ToolsError> {
        let key = match (&self.api_key_env, &self.api_key_file) {
            (Some(name), _) => std::env::var(name).ok(),
            (None, Some(path)) => std::fs::read_to_string(path).ok(),
            (None, None) => None,
        };
        let key = key.map(|k| k.trim().to_owned()).filter(|k| !k.is_empty());
        match (&self.provider, key) {
            (SearchProvider::Brave, None) => Err(ToolsError::Configuration(
                "tools.web_search_provider = \"brave\" needs its API key \
                 (web_search_api_key_env or web_search_api_key_file)"
                    .to_owned(),
            )),
            (_, key) => Ok(key.map(Secret::new)),
        }
    }
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            builtin_tools: false,
            allowed_tools: None,
            disallowed_tools: Vec::new(),
            roots: Vec::new(),
            cwd: None,
            workspace_root: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            bash_timeout: Duration::from_secs(120),
            bash_progress_interval: Duration::from_secs(5),
            max_background_shells: 4,
            max_background_shells_per_tenant: 16,
            background_shell_lifetime: Duration::from_secs(3600),
            web_fetch: WebFetchConfig::default(),
            web_search: None,
            skills: Vec::new(),
            memory: MemoryConfig::default(),
            deferred_tools: Vec::new(),
            mcp_servers: Vec::new(),
            mcp_allow_stdio: false,
            agents: Vec::new(),
            max_subagents: 4,
            subagent_timeout: Duration::from_secs(600),
            sandbox: SandboxConfig::default(),
            process_record: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    #[error(
        "tools: unknown tool {0:?} in allowed_tools/disallowed_tools (built-in tools: {known})",
        known = BUILTIN_TOOLS.join(", ")
    )]
    UnknownTool(String),
    #[error("tools: {0}")]
    Filesystem(String),
    /// A setting that cannot work as given (a search provider without its URL or key).
    #[error("tools: {0}")]
    Configuration(String),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

impl ToolsConfig {
    /// The built-in tool names this configuration registers (before the filesystem check).
    pub fn selected(&self) -> Result<Vec<&'static str>, ToolsError> {
        let names = self
            .allowed_tools
            .iter()
            .flatten()
            .chain(&self.disallowed_tools)
            .chain(&self.deferred_tools)
            .filter(|name| name.as_str() != "DiscoverTools");
        if let Some(unknown) = names
            .into_iter()
            .find(|n| !BUILTIN_TOOLS.contains(&n.as_str()) && !n.starts_with(MCP_PREFIX))
        {
            return Err(ToolsError::UnknownTool(unknown.clone()));
        }
        if !self.builtin_tools {
            return Ok(Vec::new());
        }
        let allowed = |name: &str| {
            self.allowed_tools
                .as_ref()
                .is_none_or(|list| list.iter().any(|n| n == name))
                && !self.disallowed_tools.iter().any(|n| n == name)
        };
        Ok(BUILTIN_TOOLS
            .into_iter()
            .filter(|name| allowed(name))
            .collect())
    }

    /// The registered built-in tools, with `extra` tools added (the demo tool). Probes the
    /// sandbox when it is enabled and `Bash` is registered: start-up fails if it cannot run.
    pub async fn build(&self, extra: Vec<Arc<dyn Tool>>) -> Result<ToolRegistry, ToolsError> {
        let selected = self.selected()?;
        self.warn_if_everything_is_exposed(&selected);
        self.check_names()?;
        self.sweep_left_running();
        let stdio = self
            .mcp_servers
            .iter()
            .any(|s| matches!(s.transport, McpTransport::Stdio { .. }));
        let sandbox = match selected.contains(&"Bash") || stdio {
            true => Sandbox::probe(&self.sandbox).await?,
            false => None,
        };
        let mcp = self.start_mcp(sandbox.clone()).await?;
        let web_search = self.selected_web_search(&selected)?;
        // Every session's tools share all but their root.
        let workspaces = |root, selected| Workspaces {
            root,
            config: self.clone(),
            selected,
            sandbox,
            extra,
            web_search,
            shell_limits: self.shell_limits(),
            mcp,
        };
        if let Some(root) = &self.workspace_root {
            if !self.roots.is_empty() || self.cwd.is_some() {
                return Err(ToolsError::Filesystem(
                    "tools.workspace_root gives every session its own root and working \
                     directory: leave tools.roots and tools.cwd unset"
                        .to_owned(),
                ));
            }
            let root = std::fs::create_dir_all(root)
                .and_then(|()| root.canonicalize())
                .map_err(|e| {
                    ToolsError::Filesystem(format!("workspace_root {}: {e}", root.display()))
                })?;
            let workspaces = Arc::new(workspaces(root, selected));
            // The process-wide set holds only the tools that need no workspace; every session
            // gets the full set from `ToolRegistry::for_session`.
            let mut registry = workspaces.assemble(None, None);
            registry.workspaces = Some(workspaces);
            return Ok(registry);
        }
        let (fs, cwd) = self.filesystem(&selected)?;
        Ok(workspaces(cwd.clone(), selected).assemble(fs, Some(cwd)))
    }
}

impl ToolsConfig {
    /// Kills what a previous run left running. Without the record, commands still die with the
    /// executor; only the sweep of what they started is lost, which is no reason to refuse to
    /// start.
    fn sweep_left_running(&self) {
        match self
            .process_record
            .as_deref()
            .map(super::process_groups::record_in)
        {
            Some(Ok(0)) | None => {}
            Some(Ok(killed)) => {
                tracing::warn!(killed, "killed the commands a previous run left running")
            }
            Some(Err(error)) => tracing::warn!(
                %error,
                "commands this executor leaves running will not be swept at its next start"
            ),
        }
    }

    /// The `WebSearch` tool when it is selected and has a provider.
    fn selected_web_search(
        &self,
        selected: &[&'static str],
    ) -> Result<Option<Arc<dyn Tool>>, ToolsError> {
        match (&self.web_search, selected.contains(&"WebSearch")) {
            (Some(search), true) => Ok(Some(self.web_search_tool(search)?)),
            (None, true) => {
                tracing::warn!(
                    "WebSearch not registered: it needs a search provider (tools.web_search_provider)"
                );
                Ok(None)
            }
            (_, false) => Ok(None),
        }
    }

    /// The filesystem capability of `tools.roots` (none without roots: the path tools are then
    /// left out) and the working directory.
    fn filesystem(
        &self,
        selected: &[&'static str],
    ) -> Result<(Option<FsCapability>, PathBuf), ToolsError> {
        let fs = match self.roots.is_empty() {
            true => None,
            false => Some(
                FsCapability::new(&self.roots, self.cwd.as_deref())
                    .map_err(ToolsError::Filesystem)?,
            ),
        };
        let cwd = match (&fs, &self.cwd) {
            (Some(fs), _) => fs.cwd().to_path_buf(),
            (None, Some(cwd)) => cwd.clone(),
            (None, None) => {
                std::env::current_dir().map_err(|e| ToolsError::Filesystem(e.to_string()))?
            }
        };
        if fs.is_none() {
            for name in selected.iter().filter(|n| PATH_TOOLS.contains(n)) {
                tracing::warn!(
                    tool = name,
                    "not registered: it needs a filesystem capability (tools.roots)"
                );
            }
        }
        Ok((fs, cwd))
    }

    /// `builtin_tools` without `allowed_tools` registers every built-in tool: say which risky
    /// ones that exposes.
    fn warn_if_everything_is_exposed(&self, selected: &[&'static str]) {
        if !self.builtin_tools || self.allowed_tools.is_some() {
            return;
        }
        let exposed: Vec<&str> = RISKY_TOOLS
            .into_iter()
            .filter(|t| selected.contains(t))
            .collect();
        tracing::warn!(
            tools = ?exposed,
            "builtin_tools = true without allowed_tools: every built-in tool is registered, including tools that write files, run commands and use the network ({})",
            exposed.join(", ")
        );
    }

    /// Deferred tools need `DiscoverTools`; agents and skills are valid and named once each.
    fn check_names(&self) -> Result<(), ToolsError> {
        if !self.deferred_tools.is_empty()
            && self.disallowed_tools.iter().any(|n| n == "DiscoverTools")
        {
            return Err(ToolsError::Configuration(
                "tools.deferred_tools are offered only through DiscoverTools, which \
                 disallowed_tools removes"
                    .to_owned(),
            ));
        }
        for (index, agent) in self.agents.iter().enumerate() {
            agent.validate().map_err(ToolsError::Configuration)?;
            if self.agents[..index].iter().any(|a| a.name == agent.name) {
                return Err(ToolsError::Configuration(format!(
                    "two agents are named {}",
                    agent.name
                )));
            }
        }
        for (index, skill) in self.skills.iter().enumerate() {
            skill.validate().map_err(ToolsError::Configuration)?;
            if self.skills[..index].iter().any(|s| s.name == skill.name) {
                return Err(ToolsError::Configuration(format!(
                    "two skills are named {}",
                    skill.name
                )));
            }
        }
        Ok(())
    }
}

impl ToolsConfig {
    /// Starts this set's MCP servers (each waits for its first connect attempt, at most its
    /// `connect_timeout`; one that cannot connect is retried in the background).
    async fn start_mcp(&self, sandbox: Option<Sandbox>) -> Result<McpTools, ToolsError> {
        for (index, server) in self.mcp_servers.iter().enumerate() {
            if !McpServerConfig::valid_name(&server.name) {
                return Err(ToolsError::Configuration(format!(
                    "mcp_servers: {:?} is not a server name (letters, digits, - and _, no \"__\", \
                     no _ at either end, at most 32 characters)",
                    server.name
                )));
            }
            if self.mcp_servers[..index]
                .iter()
                .any(|s| s.name == server.name)
            {
                return Err(ToolsError::Configuration(format!(
                    "two MCP servers are named {}",
                    server.name
                )));
            }
            if matches!(server.transport, McpTransport::Stdio { .. }) && !self.mcp_allow_stdio {
                return Err(ToolsError::Configuration(format!(
                    "the MCP server {} is a stdio command, which runs on this host: \
                     set tools.mcp_allow_stdio = true to allow it",
                    server.name
                )));
            }
        }
        let starts = self.mcp_servers.iter().map(|server| {
            McpServer::start(
                server.clone(),
                sandbox.clone(),
                self.mcp_allow_stdio,
                self.max_output_bytes,
            )
        });
        Ok(McpTools {
            servers: futures_util::future::join_all(starts).await,
            filter: McpFilter {
                allowed: self.allowed_tools.clone(),
                disallowed: self.disallowed_tools.clone(),
            },
        })
    }

    fn shell_limits(&self) -> Arc<ShellLimits> {
        Arc::new(ShellLimits::new(
            self.max_background_shells,
            self.max_background_shells_per_tenant,
            self.background_shell_lifetime,
            self.max_output_bytes,
        ))
    }

    fn web_search_tool(&self, search: &WebSearchConfig) -> Result<Arc<dyn Tool>, ToolsError> {
        let url = match (&search.provider, &search.url) {
            (_, Some(url)) => url.clone(),
            (SearchProvider::Brave, None) => DEFAULT_BRAVE_URL.to_owned(),
            (SearchProvider::Searxng, None) => {
                return Err(ToolsError::Configuration(
                    "tools.web_search_provider = \"searxng\" needs web_search_url".to_owned(),
                ));
            }
        };
        Ok(Arc::new(WebSearchTool {
            provider: search.provider.clone(),
            url,
            api_key: search.api_key()?,
            fetch: WebFetchTool::new(self.web_fetch.clone(), self.max_output_bytes),
        }))
    }
}

/// What builds a set of tools for one place: the configuration, the probed sandbox and the extra
/// tools; with `tools.workspace_root`, the root of the per-session workspaces.
#[derive(Debug)]
pub(crate) struct Workspaces {
    root: PathBuf,
    config: ToolsConfig,
    selected: Vec<&'static str>,
    sandbox: Option<Sandbox>,
    extra: Vec<Arc<dyn Tool>>,
    /// `WebSearch`, built once (its key read at start-up), when a provider is configured.
    web_search: Option<Arc<dyn Tool>>,
    /// Shared by every `Bash` of the process: the per-tenant count of background shells.
    shell_limits: Arc<ShellLimits>,
    /// The MCP servers, connected once for every session of the set.
    mcp: McpTools,
}

impl Workspaces {
    /// The tools with this filesystem capability and working directory; the path tools need
    /// `fs` and `Bash` needs `cwd`, and are left out without them.
    fn assemble(&self, fs: Option<FsCapability>, cwd: Option<PathBuf>) -> ToolRegistry {
        let config = &self.config;
        let env = fs.map(|fs| {
            Arc::new(FileEnv {
                fs,
                max_output_bytes: config.max_output_bytes,
            })
        });
        let mut tools = self.extra.clone();
        for &name in &self.selected {
            tools.extend(self.selected_tool(name, &env, &cwd));
        }
        self.push_configured(&mut tools);
        let mut registry = ToolRegistry::new(tools);
        registry.mcp = self.mcp.clone();
        registry.max_subagents = config.max_subagents;
        if registry.get(super::SKILL_TOOL).is_some() {
            registry.skill_models = config
                .skills
                .iter()
                .filter_map(|skill| Some((skill.name.clone(), skill.model.clone()?)))
                .collect();
        }
        // Like `Skill`, `DiscoverTools` comes with what it serves: the deferred tools.
        registry.with_deferred(&config.deferred_tools)
    }

    /// The built-in tool `name` with this filesystem environment and working directory; `None`
    /// for one that needs what is missing, and for the tools [`Workspaces::push_configured`]
    /// adds.
    fn selected_tool(
        &self,
        name: &str,
        env: &Option<Arc<FileEnv>>,
        cwd: &Option<PathBuf>,
    ) -> Option<Arc<dyn Tool>> {
        let config = &self.config;
        let tool: Arc<dyn Tool> = match (name, env, cwd) {
            ("Read", Some(env), _) => Arc::new(ReadTool(Arc::clone(env))),
            ("Write", Some(env), _) => Arc::new(WriteTool(Arc::clone(env))),
            ("Edit", Some(env), _) => Arc::new(EditTool(Arc::clone(env))),
            ("NotebookEdit", Some(env), _) => Arc::new(NotebookEditTool(Arc::clone(env))),
            ("Glob", Some(env), _) => Arc::new(GlobTool(Arc::clone(env))),
            ("Grep", Some(env), _) => Arc::new(GrepTool(Arc::clone(env))),
            ("Bash", _, Some(cwd)) => Arc::new(BashTool {
                cwd: cwd.clone(),
                fs: env.as_ref().map(|env| env.fs.clone()),
                sandbox: self.sandbox.clone(),
                default_timeout: config.bash_timeout,
                max_timeout: Duration::from_secs(600).max(config.bash_timeout),
                progress_interval: config.bash_progress_interval,
                max_output_bytes: config.max_output_bytes,
                background: Arc::clone(&self.shell_limits),
            }),
            // Only beside `Bash`: without it there are no background shells to read or stop.
            ("KillShell", _, Some(_)) if self.selected.contains(&"Bash") => Arc::new(KillShellTool),
            ("TaskOutput", _, Some(_)) if self.selected.contains(&"Bash") => {
                Arc::new(TaskOutputTool)
            }
            // With subagents instead (registered below).
            ("TaskOutput", _, _) => return None,
            ("WebFetch", _, _) => Arc::new(WebFetchTool::new(
                config.web_fetch.clone(),
                config.max_output_bytes,
            )),
            ("WebSearch", _, _) => match &self.web_search {
                Some(search) => Arc::clone(search),
                None => return None,
            },
            // Registered below, with or without the other built-in tools.
            (
                "Skill" | "MemoryRead" | "MemoryWrite" | "DiscoverTools" | "ListMcpResources"
                | "ReadMcpResource" | "Task" | "TaskStop",
                _,
                _,
            ) => return None,
            ("TodoWrite", _, _) => Arc::new(TodoWriteTool),
            ("TaskCreate", _, _) => Arc::new(TaskTool(TaskOperation::Create)),
            ("TaskGet", _, _) => Arc::new(TaskTool(TaskOperation::Get)),
            ("TaskUpdate", _, _) => Arc::new(TaskTool(TaskOperation::Update)),
            ("TaskList", _, _) => Arc::new(TaskTool(TaskOperation::List)),
            ("AskUserQuestion", _, _) => Arc::new(AskUserQuestionTool),
            ("EnterPlanMode", _, _) => Arc::new(EnterPlanModeTool),
            ("ExitPlanMode", _, _) => Arc::new(ExitPlanModeTool),
            _ => return None,
        };
        Some(tool)
    }

    /// The tools that come with their configuration (skills, memory, MCP resources, subagents),
    /// with or without `builtin_tools`, unless disallowed.
    fn push_configured(&self, tools: &mut Vec<Arc<dyn Tool>>) {
        let config = &self.config;
        // Configured on their own, these come without `builtin_tools` too.
        let allowed = |name: &str| {
            !config.disallowed_tools.iter().any(|n| n == name)
                && (!config.builtin_tools || self.selected.contains(&name))
        };
        if !config.skills.is_empty() && allowed("Skill") {
            tools.push(Arc::new(SkillTool {
                skills: config.skills.clone(),
            }));
        }
        if config.memory.enabled {
            if allowed("MemoryRead") {
                tools.push(Arc::new(MemoryReadTool(config.memory.clone())));
            }
            if allowed("MemoryWrite") {
                tools.push(Arc::new(MemoryWriteTool(config.memory.clone())));
            }
        }
        if !self.mcp.is_empty() {
            let servers = self.mcp.servers.clone();
            let max_output_bytes = config.max_output_bytes;
            if allowed(LIST_MCP_RESOURCES_TOOL) {
                tools.push(Arc::new(ListMcpResourcesTool {
                    servers: servers.clone(),
                    max_output_bytes,
                }));
            }
            if allowed(READ_MCP_RESOURCE_TOOL) {
                tools.push(Arc::new(ReadMcpResourceTool {
                    servers,
                    max_output_bytes,
                }));
            }
        }
        let subagents = match config.builtin_tools {
            true => self.selected.contains(&"Task"),
            false => !config.agents.is_empty() && allowed("Task"),
        };
        if subagents {
            let mut agents = builtin_agents();
            for agent in &config.agents {
                agents.retain(|a| a.name != agent.name);
                agents.push(agent.clone());
            }
            tools.push(Arc::new(SubagentTool {
                agents,
                timeout: config.subagent_timeout,
            }));
            if allowed("TaskStop") {
                tools.push(Arc::new(TaskStopTool));
            }
            if allowed("TaskOutput") && !tools.iter().any(|t| t.spec().name == "TaskOutput") {
                tools.push(Arc::new(TaskOutputTool));
            }
        }
    }

    /// `<root>/<tenant>/<session>`, each id encoded so that it is one plain path component.
    fn directory(&self, tenant_id: &str, session_id: &str) -> PathBuf {
        self.root
            .join(path_component(tenant_id))
            .join(path_component(session_id))
    }

    /// The tools of one session, in its workspace (created if missing).
    pub(crate) fn for_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<ToolRegistry, String> {
        let dir = self.directory(tenant_id, session_id);
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create the workspace: {e}"))?;
        let fs = FsCapability::new(std::slice::from_ref(&dir), None)?;
        let cwd = fs.cwd().to_path_buf();
        Ok(self.assemble(Some(fs), Some(cwd)))
    }

    /// Deletes a closed session's workspace.
    pub(crate) fn remove(&self, tenant_id: &str, session_id: &str) -> std::io::Result<()> {
        match std::fs::remove_dir_all(self.directory(tenant_id, session_id)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }
}

/// An id as one path component: ASCII letters, digits, `_` and `-` stay, every other byte
/// becomes `%XX` (so no `/`, no `..`, no hidden names, and distinct ids stay distinct).
fn path_component(id: &str) -> String {
    if id.is_empty() {
        return "%".to_owned();
    }
    id.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' => char::from(b).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::path_component;

    #[test]
    fn ids_become_one_plain_path_component() {
        assert_eq!(path_component("tenant-a_1"), "tenant-a_1");
        assert_eq!(path_component(".."), "%2E%2E");
        assert_eq!(path_component("../tenant-a"), "%2E%2E%2Ftenant-a");
        assert_eq!(path_component("/etc"), "%2Fetc");
        assert_eq!(path_component(".hidden"), "%2Ehidden");
        assert_eq!(path_component(""), "%");
        // Distinct ids stay distinct: `%` itself is encoded.
        assert_ne!(path_component("%2E"), path_component("."));
    }
}
