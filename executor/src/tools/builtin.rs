//! Which built-in tools a deployment registers (agent.md, server profile): none unless
//! `builtin_tools = true`; then all of them, narrowed by `allowed_tools` and reduced by
//! `disallowed_tools`. File tools need a filesystem capability (`roots`); without one they are
//! not registered at all.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::bash::BashTool;
use super::files::{EditTool, FileEnv, ReadTool, WriteTool};
use super::fs::FsCapability;
use super::output::DEFAULT_MAX_OUTPUT_BYTES;
use super::search::{GlobTool, GrepTool};
use super::todo::TodoWriteTool;
use super::web_fetch::{WebFetchConfig, WebFetchTool};
use super::{Tool, ToolRegistry};
use crate::sandbox::{Sandbox, SandboxConfig, SandboxError};

/// Every built-in tool name.
pub const BUILTIN_TOOLS: [&str; 8] = [
    "Read",
    "Write",
    "Edit",
    "Glob",
    "Grep",
    "Bash",
    "WebFetch",
    "TodoWrite",
];
/// Tools that change files, run commands or reach the network (named by the start-up warning).
pub const RISKY_TOOLS: [&str; 4] = ["Write", "Edit", "Bash", "WebFetch"];
const PATH_TOOLS: [&str; 5] = ["Read", "Write", "Edit", "Glob", "Grep"];

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
    /// Limit of one text field of a tool's output, in bytes. Default 30 000.
    pub max_output_bytes: usize,
    /// `Bash` timeout when the call gives none. Default 2 min; a call may ask for up to 10 min.
    pub bash_timeout: Duration,
    /// Longest silence between two `tool_progress` events of `Bash`. Default 5 s.
    pub bash_progress_interval: Duration,
    pub web_fetch: WebFetchConfig,
    pub sandbox: SandboxConfig,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            builtin_tools: false,
            allowed_tools: None,
            disallowed_tools: Vec::new(),
            roots: Vec::new(),
            cwd: None,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            bash_timeout: Duration::from_secs(120),
            bash_progress_interval: Duration::from_secs(5),
            web_fetch: WebFetchConfig::default(),
            sandbox: SandboxConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ToolsError {
    #[error(
        "tools: unknown tool {0:?} in allowed_tools/disallowed_tools (built-in tools: Read, Write, Edit, Glob, Grep, Bash, WebFetch, TodoWrite)"
    )]
    UnknownTool(String),
    #[error("tools: {0}")]
    Filesystem(String),
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
            .chain(&self.disallowed_tools);
        if let Some(unknown) = names
            .into_iter()
            .find(|n| !BUILTIN_TOOLS.contains(&n.as_str()))
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
        if self.builtin_tools && self.allowed_tools.is_none() {
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
        let sandbox = match selected.contains(&"Bash") {
            true => Sandbox::probe(&self.sandbox).await?,
            false => None,
        };
        let env = fs.map(|fs| {
            Arc::new(FileEnv {
                fs,
                max_output_bytes: self.max_output_bytes,
            })
        });
        let mut tools = extra;
        for name in selected {
            let tool: Arc<dyn Tool> = match (name, &env) {
                (name, None) if PATH_TOOLS.contains(&name) => {
                    tracing::warn!(
                        tool = name,
                        "not registered: it needs a filesystem capability (tools.roots)"
                    );
                    continue;
                }
                ("Read", Some(env)) => Arc::new(ReadTool(Arc::clone(env))),
                ("Write", Some(env)) => Arc::new(WriteTool(Arc::clone(env))),
                ("Edit", Some(env)) => Arc::new(EditTool(Arc::clone(env))),
                ("Glob", Some(env)) => Arc::new(GlobTool(Arc::clone(env))),
                ("Grep", Some(env)) => Arc::new(GrepTool(Arc::clone(env))),
                ("Bash", _) => Arc::new(BashTool {
                    cwd: cwd.clone(),
                    sandbox: sandbox.clone(),
                    default_timeout: self.bash_timeout,
                    max_timeout: Duration::from_secs(600).max(self.bash_timeout),
                    progress_interval: self.bash_progress_interval,
                    max_output_bytes: self.max_output_bytes,
                }),
                ("WebFetch", _) => Arc::new(WebFetchTool::new(
                    self.web_fetch.clone(),
                    self.max_output_bytes,
                )),
                ("TodoWrite", _) => Arc::new(TodoWriteTool),
                (other, _) => return Err(ToolsError::UnknownTool(other.to_owned())),
            };
            tools.push(tool);
        }
        Ok(ToolRegistry::new(tools))
    }
}
