//! `[[mcp_servers]]`: the MCP servers the operator declares; `tools.mcp_servers` (top level or in
//! a profile) picks which of them a tool set has (default: all).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use agent_runtime_executor::tools::mcp::{McpServerConfig, McpTransport, SecretSource};
use serde::Deserialize;

use super::set;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct McpServerSection {
    name: String,
    /// Streamable HTTP endpoint, or
    url: Option<String>,
    /// a stdio command line (needs `tools.mcp_allow_stdio`).
    command: Option<String>,
    cwd: Option<PathBuf>,
    /// Environment variables passed on to a stdio command.
    #[serde(default)]
    env: Vec<String>,
    bearer_token_env: Option<String>,
    bearer_token_file: Option<PathBuf>,
    /// Header name → the environment variable holding its value.
    #[serde(default)]
    headers_env: BTreeMap<String, String>,
    /// Header name → the file holding its value.
    #[serde(default)]
    headers_file: BTreeMap<String, PathBuf>,
    allow_private_addresses: Option<bool>,
    connect_timeout_ms: Option<u64>,
    call_timeout_ms: Option<u64>,
    health_interval_ms: Option<u64>,
    trust_annotations: Option<bool>,
    max_message_bytes: Option<usize>,
}

impl McpServerSection {
    pub(super) fn server(self) -> anyhow::Result<McpServerConfig> {
        let name = self.name;
        let transport = match (self.url, self.command) {
            (Some(url), None) => {
                anyhow::ensure!(
                    self.cwd.is_none() && self.env.is_empty(),
                    "mcp_servers {name}: cwd and env are for stdio commands"
                );
                McpTransport::Http { url }
            }
            (None, Some(command)) => McpTransport::Stdio {
                command,
                cwd: self.cwd,
                env: self.env,
            },
            _ => anyhow::bail!("mcp_servers {name}: give exactly one of url and command"),
        };
        let mut server = McpServerConfig::new(name, transport);
        server.bearer_token = match (self.bearer_token_env, self.bearer_token_file) {
            (Some(_), Some(_)) => anyhow::bail!(
                "mcp_servers {}: give at most one of bearer_token_env and bearer_token_file",
                server.name
            ),
            (Some(var), None) => Some(SecretSource::Env(var)),
            (None, Some(path)) => Some(SecretSource::File(path)),
            (None, None) => None,
        };
        server.headers = self
            .headers_env
            .into_iter()
            .map(|(header, var)| (header, SecretSource::Env(var)))
            .chain(
                self.headers_file
                    .into_iter()
                    .map(|(header, path)| (header, SecretSource::File(path))),
            )
            .collect();
        let ms = |v: Option<u64>| v.map(Duration::from_millis);
        set(
            &mut server.allow_private_addresses,
            self.allow_private_addresses,
        );
        set(&mut server.connect_timeout, ms(self.connect_timeout_ms));
        set(&mut server.call_timeout, ms(self.call_timeout_ms));
        set(&mut server.health_interval, ms(self.health_interval_ms));
        set(&mut server.trust_annotations, self.trust_annotations);
        set(&mut server.max_message_bytes, self.max_message_bytes);
        for (key, duration) in [
            ("connect_timeout_ms", server.connect_timeout),
            ("call_timeout_ms", server.call_timeout),
            ("health_interval_ms", server.health_interval),
        ] {
            anyhow::ensure!(
                !duration.is_zero(),
                "mcp_servers {}: {key} must be positive",
                server.name
            );
        }
        anyhow::ensure!(
            McpServerConfig::valid_name(&server.name),
            "mcp_servers: {:?} is not a server name (letters, digits, - and _, no \"__\", no _ at either end, at most 32 characters)",
            server.name
        );
        Ok(server)
    }
}

/// The declared servers `names` picks, in declaration order.
pub(super) fn pick(
    declared: &[McpServerConfig],
    names: &[String],
) -> anyhow::Result<Vec<McpServerConfig>> {
    if let Some(unknown) = names
        .iter()
        .find(|name| !declared.iter().any(|s| &s.name == *name))
    {
        anyhow::bail!("tools.mcp_servers: no [[mcp_servers]] entry is named {unknown:?}");
    }
    Ok(declared
        .iter()
        .filter(|s| names.contains(&s.name))
        .cloned()
        .collect())
}
