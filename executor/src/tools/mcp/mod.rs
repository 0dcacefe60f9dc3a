//! Tools from MCP servers (the reference's `McpClient`/`McpRegistry`), on the official Rust SDK
//! (`rmcp`, client half only).
//!
//! The operator declares the servers (`[[mcp_servers]]`) and attaches them to agent profiles;
//! clients never name one. Each server of a profile has one connection, kept by a supervisor
//! task ([`McpServer`]): connect (with the URL vetted like `WebFetch`'s), list the tools, check
//! health every `health_interval` (a `tools/list`, which also picks up a changed list), and on
//! any failure reconnect with backoff (1 s doubling to 30 s). The agent sees the tools under
//! `mcp__<server>__<tool>` ([`tool_name`]) and `ListMcpResources`/`ReadMcpResource`.
//!
//! Not supported, on purpose: sampling, roots, elicitation (the client announces no
//! capabilities) and OAuth's browser flow. Authentication is a bearer token or headers whose
//! values the operator keeps in environment variables or files.

mod connection;
mod error;
mod resources;
mod tool;
mod transport;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use connection::{McpHealth, McpServer, McpState};
pub use error::{McpError, McpErrorCode};
pub use resources::{LIST_MCP_RESOURCES_TOOL, READ_MCP_RESOURCE_TOOL};
pub(crate) use resources::{ListMcpResourcesTool, ReadMcpResourceTool};

use super::Tool;
use crate::provider::ToolSpec;
use agent_runtime::secret::Secret;

/// How tools of MCP servers are named: `mcp__<server>__<tool>`, a namespace no built-in uses.
pub const MCP_PREFIX: &str = "mcp__";
/// Longest tool name providers accept.
const MAX_TOOL_NAME: usize = 64;

/// One operator-declared MCP server.
#[derive(Clone, Debug, PartialEq)]
pub struct McpServerConfig {
    /// Letters, digits, `-` and `_`: the middle of its tools' names.
    pub name: String,
    pub transport: McpTransport,
    /// Sent as `Authorization: Bearer <token>`; read at every connect (rotation needs no
    /// restart), never logged.
    pub bearer_token: Option<SecretSource>,
    /// Further headers, each value from an environment variable or a file.
    pub headers: Vec<(String, SecretSource)>,
    /// Let the URL resolve to loopback or private addresses (an operator's own network).
    /// Cloud metadata addresses stay refused. Default off.
    pub allow_private_addresses: bool,
    /// Connect and handshake, and every health check. Default 10 s.
    pub connect_timeout: Duration,
    /// One tool call or resource read. Default 60 s.
    pub call_timeout: Duration,
    /// Between two health checks (`tools/list`). Default 30 s.
    pub health_interval: Duration,
    /// Take `readOnlyHint` at its word (a read-only tool runs without asking in `default`
    /// mode). Off: every tool of the server is `execute`. Default on.
    pub trust_annotations: bool,
    /// Largest JSON message accepted from the server, in bytes. Default 4 MiB.
    pub max_message_bytes: usize,
}

impl McpServerConfig {
    pub fn new(name: impl Into<String>, transport: McpTransport) -> Self {
        Self {
            name: name.into(),
            transport,
            bearer_token: None,
            headers: Vec::new(),
            allow_private_addresses: false,
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(60),
            health_interval: Duration::from_secs(30),
            trust_annotations: true,
            max_message_bytes: 4 << 20,
        }
    }

    /// Whether the name can be the middle of a tool name: no `__`, and no `_` at either end,
    /// so that `mcp__<server>__<tool>` names one server only (`docs` and `docs_` would both
    /// make `mcp__docs___x`).
    pub fn valid_name(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= 32
            && !name.contains("__")
            && !name.starts_with('_')
            && !name.ends_with('_')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum McpTransport {
    /// Streamable HTTP (the default): the server's endpoint URL.
    Http { url: String },
    /// A child process speaking MCP on stdin/stdout, started like `Bash` commands (the
    /// sandbox when enabled, a scrubbed environment). Only with `tools.mcp_allow_stdio`.
    Stdio {
        /// The command line (`bash -c`).
        command: String,
        /// Working directory. Default: the process's temporary directory.
        cwd: Option<PathBuf>,
        /// Environment variables passed on from the server's own environment (everything else
        /// is cleared).
        env: Vec<String>,
    },
}

/// Where a secret is kept: an environment variable or a file (never the configuration file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    Env(String),
    File(PathBuf),
}

impl SecretSource {
    pub fn read(&self) -> Result<Secret, String> {
        let value = match self {
            Self::Env(name) => std::env::var(name)
                .map_err(|_| format!("the environment variable {name} is not set"))?,
            Self::File(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        };
        let value = value.trim();
        match value.is_empty() {
            true => Err("the secret is empty".to_owned()),
            false => Ok(Secret::new(value)),
        }
    }
}

/// The public name of a server's tool, or `None` when it does not fit providers' limit. Each
/// part keeps `[A-Za-z0-9_-]`; a tool name that had to change gets a short hash of the original,
/// so `a.b` and `a_b` stay distinct.
pub fn tool_name(server: &str, tool: &str) -> Option<String> {
    let plain: String = tool
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                true => c,
                false => '_',
            },
        )
        .collect();
    let tool = match plain == tool {
        true => plain,
        false => format!("{plain}_{:08x}", fnv1a(tool)),
    };
    let name = format!("{MCP_PREFIX}{server}__{tool}");
    (name.len() <= MAX_TOOL_NAME).then_some(name)
}

fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// Which MCP tools a tool set lets through: `allowed_tools` (when set) must name the tool or
/// its server (`mcp__<server>__*`), and `disallowed_tools` must not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct McpFilter {
    pub allowed: Option<Vec<String>>,
    pub disallowed: Vec<String>,
}

impl McpFilter {
    pub fn admits(&self, name: &str) -> bool {
        let matches = |pattern: &String| match pattern.strip_suffix('*') {
            Some(prefix) => pattern.starts_with(MCP_PREFIX) && name.starts_with(prefix),
            None => pattern == name,
        };
        self.allowed
            .as_ref()
            .is_none_or(|list| list.iter().any(matches))
            && !self.disallowed.iter().any(matches)
    }
}

/// The MCP servers of one tool set and what of them it offers.
#[derive(Clone, Debug, Default)]
pub struct McpTools {
    pub servers: Vec<Arc<McpServer>>,
    pub filter: McpFilter,
}

impl McpTools {
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The tools offered now (the servers' current lists).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.servers
            .iter()
            .flat_map(|server| server.tools())
            .filter(|tool| self.filter.admits(&tool.spec().name))
            .collect()
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools().iter().map(|tool| tool.spec()).collect()
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if !name.starts_with(MCP_PREFIX) || !self.filter.admits(name) {
            return None;
        }
        self.servers.iter().find_map(|server| server.tool(name))
    }

    /// Why `name`, a tool of one of these servers that is not offered now, cannot be called:
    /// its server is not connected. `None` when the server is connected (no such tool) or no
    /// server of this set has the name's prefix.
    pub fn unavailable(&self, name: &str) -> Option<McpError> {
        if !self.filter.admits(name) {
            return None;
        }
        let rest = name.strip_prefix(MCP_PREFIX)?;
        let (server, _) = rest.split_once("__")?;
        self.servers
            .iter()
            .find(|candidate| candidate.name() == server)?
            .unavailable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_namespaced_normalised_and_bounded() {
        assert_eq!(
            tool_name("everything", "get-sum").as_deref(),
            Some("mcp__everything__get-sum")
        );
        let dotted = tool_name("s", "a.b").unwrap();
        let underscored = tool_name("s", "a_b").unwrap();
        assert!(dotted.starts_with("mcp__s__a_b_"), "{dotted}");
        assert_ne!(dotted, underscored);
        assert_eq!(tool_name("s", &"x".repeat(60)), None);
    }

    #[test]
    fn server_names_must_be_plain() {
        assert!(McpServerConfig::valid_name("everything-2"));
        assert!(!McpServerConfig::valid_name("a__b"));
        assert!(!McpServerConfig::valid_name("a.b"));
        assert!(!McpServerConfig::valid_name(""));
        // `docs_` and `_docs` would share tool names with `docs`.
        assert!(!McpServerConfig::valid_name("docs_"));
        assert!(!McpServerConfig::valid_name("_docs"));
        assert!(McpServerConfig::valid_name("my_docs"));
    }

    #[test]
    fn the_filter_takes_exact_names_and_server_wildcards() {
        let open = McpFilter::default();
        assert!(open.admits("mcp__a__echo"));
        let only_a = McpFilter {
            allowed: Some(vec!["mcp__a__*".to_owned(), "Read".to_owned()]),
            disallowed: vec!["mcp__a__rm".to_owned()],
        };
        assert!(only_a.admits("mcp__a__echo"));
        assert!(!only_a.admits("mcp__a__rm"));
        assert!(!only_a.admits("mcp__b__echo"));
        // A bare `*` is not an MCP wildcard.
        let star = McpFilter {
            allowed: Some(vec!["*".to_owned()]),
            disallowed: Vec::new(),
        };
        assert!(!star.admits("mcp__a__echo"));
    }
}
