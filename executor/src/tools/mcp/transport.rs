//! Opening one connection to an MCP server: streamable HTTP through a client pinned to the
//! vetted address, or a sandboxed child process on stdio; then the handshake.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};

use super::{McpServerConfig, McpTransport};
use crate::sandbox::{Sandbox, shell_command};
use crate::tools::web_fetch::{WebFetchConfig, WebFetchTool, pinned_client};

/// A live connection, and the child process of a stdio server (killed when dropped).
pub(super) type Connection = RunningService<RoleClient, Handler>;
pub(super) type Opened = (Connection, Option<tokio::process::Child>);

/// Our side of the connection: no capabilities (no sampling, roots or elicitation), the
/// protocol version pinned, and a flag raised when the server says its tool list changed.
#[derive(Clone, Debug)]
pub(super) struct Handler {
    pub tools_changed: Arc<AtomicBool>,
    pub wake: Arc<tokio::sync::Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agent-runtime", env!("CARGO_PKG_VERSION")),
        )
        // Newer versions move list-changed notifications to subscriptions.
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.store(true, Ordering::Release);
        self.wake.notify_one();
    }
}

/// How a stdio server is started.
#[derive(Clone, Debug)]
pub(super) struct StdioLauncher {
    pub sandbox: Option<Sandbox>,
}

/// Connects and completes the handshake (no timeout here: the caller bounds it).
pub(super) async fn connect(
    config: &McpServerConfig,
    handler: Handler,
    stdio: Option<&StdioLauncher>,
) -> Result<Opened, String> {
    match &config.transport {
        McpTransport::Http { url } => {
            let transport = http(config, url).await?;
            let connection = handler
                .serve(transport)
                .await
                .map_err(|e| format!("the MCP handshake failed: {e}"))?;
            Ok((connection, None))
        }
        McpTransport::Stdio { command, cwd, env } => {
            let Some(launcher) = stdio else {
                return Err("stdio MCP servers are off (tools.mcp_allow_stdio)".to_owned());
            };
            let cwd = cwd.clone().unwrap_or_else(std::env::temp_dir);
            let mut child = launcher
                .command(&cwd, command, env)
                .spawn()
                .map_err(|e| format!("cannot start the MCP server: {e}"))?;
            let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                return Err("the MCP server has no stdio".to_owned());
            };
            let connection = handler
                .serve((stdout, stdin))
                .await
                .map_err(|e| format!("the MCP handshake failed: {e}"))?;
            Ok((connection, Some(child)))
        }
    }
}

/// The streamable HTTP transport: the URL checked like a `WebFetch` URL and its address pinned,
/// no redirects (an endpoint that moves is refused, never followed to an unchecked host), no
/// whole-request timeout (it would cut the server's event stream), bounded reconnects of the
/// event stream, and messages capped.
async fn http(
    config: &McpServerConfig,
    url: &str,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, String> {
    let policy = WebFetchTool::new(
        WebFetchConfig {
            allow_private_addresses: config.allow_private_addresses,
            ..WebFetchConfig::default()
        },
        0,
    );
    let url = policy.parse(url)?;
    let address = policy.vet(&url).await?;
    let client = pinned_client(&url, address)
        .connect_timeout(config.connect_timeout)
        .pool_max_idle_per_host(0)
        .user_agent(concat!("agent-runtime-mcp/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|_| "cannot create the HTTP client".to_owned())?;
    let mut settings = StreamableHttpClientTransportConfig::with_uri(url.as_str())
        .max_json_response_size(config.max_message_bytes)
        .max_sse_event_size(config.max_message_bytes);
    if let Some(token) = &config.bearer_token {
        settings = settings.auth_header(token.read()?.expose());
    }
    let mut headers = std::collections::HashMap::new();
    for (name, source) in &config.headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{name:?} is not a header name"))?;
        let mut value = reqwest::header::HeaderValue::from_str(source.read()?.expose())
            .map_err(|_| format!("the value of the header {name} is not a header value"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    settings = settings.custom_headers(headers);
    let mut retry = ExponentialBackoff::default();
    retry.max_times = Some(3);
    retry.max_delay = Some(std::time::Duration::from_secs(5));
    settings.retry_config = Arc::new(retry);
    Ok(StreamableHttpClientTransport::with_client(client, settings))
}

impl StdioLauncher {
    /// The command like `Bash`'s: in the sandbox when there is one, with a cleared environment
    /// but for a plain `PATH`, `HOME`, `LANG` and the variables the operator passes on.
    fn command(
        &self,
        cwd: &std::path::Path,
        line: &str,
        pass: &[String],
    ) -> tokio::process::Command {
        let mut command = shell_command(self.sandbox.as_ref(), cwd, cwd, line);
        command
            .envs(
                pass.iter()
                    .filter_map(|name| Some((name, std::env::var_os(name)?))),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        command
    }
}
