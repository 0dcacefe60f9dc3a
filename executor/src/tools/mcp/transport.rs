//! Opening one connection to an MCP server: streamable HTTP through a client pinned to the
//! vetted address, or a sandboxed child process on stdio; then the handshake.

use agent_runtime::sync::Locked;
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, NumberOrString, ProgressNotificationParam,
    ProgressToken, ProtocolVersion,
};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Number;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

use super::error::{McpError, McpErrorCode, TooLarge, server_text};
use super::{McpServerConfig, McpTransport};
use crate::sandbox::{Sandbox, shell_command};
use crate::tools::ToolProgressUpdate;
use agent_runtime_http_client::address::{Refusal as VetRefusal, pinned_client};

use crate::tools::web_fetch::{WebFetchConfig, WebFetchTool};

/// A live connection, and the child process of a stdio server (killed when dropped).
pub(super) type Connection = RunningService<RoleClient, Handler>;
pub(super) type Opened = (Connection, Option<tokio::process::Child>);

/// Our side of the connection: no capabilities (no sampling, roots or elicitation), the
/// protocol version pinned, a flag raised when the server says its tool list changed, and the
/// server's progress passed on to the call it belongs to.
#[derive(Clone, Debug)]
pub(super) struct Handler {
    pub tools_changed: Arc<AtomicBool>,
    pub wake: Arc<tokio::sync::Notify>,
    pub progress: ProgressRoutes,
}

/// Where the `notifications/progress` of each running call go, by the call's progress token.
/// A notification can arrive before its call is registered (the request is out before the SDK
/// hands over its token): a few such are kept for the call that registers next.
#[derive(Clone, Debug, Default)]
pub(super) struct ProgressRoutes {
    inner: Arc<Mutex<Routes>>,
}

#[derive(Debug, Default)]
struct Routes {
    calls: HashMap<String, mpsc::Sender<ToolProgressUpdate>>,
    early: VecDeque<(String, ToolProgressUpdate)>,
}

/// Notifications kept for calls not registered yet.
const EARLY_PROGRESS: usize = 64;

impl ProgressRoutes {
    /// The progress of the call with `token` goes to `sender` until the route is dropped.
    pub fn open(
        &self,
        token: &ProgressToken,
        sender: mpsc::Sender<ToolProgressUpdate>,
    ) -> ProgressRoute {
        let token = key(token);
        let mut routes = self.lock();
        let (early, kept): (Vec<_>, Vec<_>) = routes
            .early
            .drain(..)
            .partition(|(owner, _)| *owner == token);
        routes.early = kept.into();
        for (_, update) in early {
            let _ = sender.try_send(update);
        }
        routes.calls.insert(token.clone(), sender);
        ProgressRoute {
            token,
            routes: self.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.inner.locked()
    }

    /// Passes a progress notification on to its call.
    fn deliver(&self, params: ProgressNotificationParam) {
        let token = key(&params.progress_token);
        let update = ToolProgressUpdate {
            message: params.message.as_deref().map(server_text),
            completed: Number::from_f64(params.progress),
            total: params.total.and_then(Number::from_f64),
            ..ToolProgressUpdate::default()
        };
        let mut routes = self.lock();
        match routes.calls.get(&token) {
            // A full channel drops a report rather than slowing the connection.
            Some(sender) => {
                let _ = sender.try_send(update);
            }
            None => {
                if routes.early.len() == EARLY_PROGRESS {
                    routes.early.pop_front();
                }
                routes.early.push_back((token, update));
            }
        }
    }
}

fn key(token: &ProgressToken) -> String {
    match &token.0 {
        NumberOrString::String(token) => format!("s:{token}"),
        NumberOrString::Number(number) => format!("n:{number}"),
    }
}

/// One call's progress route; closed when dropped.
pub(super) struct ProgressRoute {
    token: String,
    routes: ProgressRoutes,
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        self.routes.lock().calls.remove(&self.token);
    }
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

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.deliver(params);
    }
}

/// How a stdio server is started.
#[derive(Clone, Debug)]
pub(super) struct StdioLauncher {
    pub sandbox: Option<Sandbox>,
}

/// Connects and completes the handshake (no timeout here: the caller bounds it). A stdio
/// server's line past `max_message_bytes` raises `overflowed` and closes the connection.
pub(super) async fn connect(
    config: &McpServerConfig,
    handler: Handler,
    stdio: Option<&StdioLauncher>,
    overflowed: Arc<AtomicBool>,
) -> Result<Opened, McpError> {
    let name = &config.name;
    let handshake = |error| McpError::of_handshake(name, &error);
    match &config.transport {
        McpTransport::Http { url } => {
            let transport = http(config, url).await?;
            let connection = handler.serve(transport).await.map_err(handshake)?;
            Ok((connection, None))
        }
        McpTransport::Stdio { command, cwd, env } => {
            let Some(launcher) = stdio else {
                return Err(McpError::new(
                    McpErrorCode::Misconfigured,
                    format!(
                        "the MCP server {name} runs on stdio, which is off: set \
                         tools.mcp_allow_stdio = true to allow it"
                    ),
                ));
            };
            let cwd = cwd.clone().unwrap_or_else(std::env::temp_dir);
            let mut child = launcher.command(&cwd, command, env).spawn().map_err(|e| {
                McpError::new(
                    McpErrorCode::Unavailable,
                    format!("the MCP server {name} cannot be started: {e}"),
                )
            })?;
            let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                return Err(McpError::new(
                    McpErrorCode::Unavailable,
                    format!("the MCP server {name} has no stdio"),
                ));
            };
            let stdout = BoundedLines {
                inner: stdout,
                limit: config.max_message_bytes,
                run: 0,
                overflowed,
            };
            let connection = handler.serve((stdout, stdin)).await.map_err(handshake)?;
            Ok((connection, Some(child)))
        }
    }
}

/// A stdio server's output with each line bounded: past `limit` bytes without a line end the
/// read fails (and the connection with it) instead of waiting for the end of a message nobody
/// will take.
struct BoundedLines<R> {
    inner: R,
    limit: usize,
    /// Bytes since the last line end.
    run: usize,
    overflowed: Arc<AtomicBool>,
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        for byte in &buf.filled()[before..] {
            this.run = match byte {
                b'\n' => 0,
                _ => this.run + 1,
            };
            if this.run > this.limit {
                this.overflowed.store(true, Ordering::Release);
                // A failed read hands over nothing.
                buf.set_filled(before);
                let error = TooLarge { limit: this.limit };
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    error,
                )));
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The streamable HTTP transport: the URL checked like a `WebFetch` URL and its address pinned,
/// no redirects (an endpoint that moves is refused, never followed to an unchecked host), no
/// whole-request timeout (it would cut the server's event stream), bounded reconnects of the
/// event stream, and messages capped.
async fn http(
    config: &McpServerConfig,
    url: &str,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, McpError> {
    let name = &config.name;
    let misconfigured = |why: String| McpError::new(McpErrorCode::Misconfigured, why);
    let unavailable = |why: String| McpError::new(McpErrorCode::Unavailable, why);
    let policy = WebFetchTool::new(
        WebFetchConfig {
            allow_private_addresses: config.allow_private_addresses,
            ..WebFetchConfig::default()
        },
        0,
    );
    let url = policy
        .parse(url)
        .map_err(|why| misconfigured(format!("the MCP server {name}'s URL is refused: {why}")))?;
    let address = policy
        .vet_address(&url)
        .await
        .map_err(|refusal| match refusal {
            VetRefusal::Unresolved(why) => unavailable(format!("the MCP server {name}: {why}")),
            VetRefusal::Private(why) if !config.allow_private_addresses => misconfigured(format!(
                "the MCP server {name} is refused: {why}; set allow_private_addresses = true on \
             its [[mcp_servers]] entry to allow it"
            )),
            VetRefusal::Private(why) | VetRefusal::Forbidden(why) => {
                misconfigured(format!("the MCP server {name} is refused: {why}"))
            }
        })?;
    let client = pinned_client(&url, address)
        .connect_timeout(config.connect_timeout)
        .pool_max_idle_per_host(0)
        .user_agent(concat!("agent-runtime-mcp/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|_| unavailable("cannot create the HTTP client".to_owned()))?;
    let mut settings = StreamableHttpClientTransportConfig::with_uri(url.as_str())
        .max_json_response_size(config.max_message_bytes)
        .max_sse_event_size(config.max_message_bytes);
    let secret = |read: Result<agent_runtime::secret::Secret, String>| {
        read.map_err(|why| unavailable(format!("the MCP server {name}'s credentials: {why}")))
    };
    if let Some(token) = &config.bearer_token {
        settings = settings.auth_header(secret(token.read())?.expose());
    }
    let mut headers = std::collections::HashMap::new();
    for (header, source) in &config.headers {
        let header = reqwest::header::HeaderName::from_bytes(header.as_bytes()).map_err(|_| {
            misconfigured(format!(
                "the MCP server {name}: {header:?} is not a header name"
            ))
        })?;
        let mut value = reqwest::header::HeaderValue::from_str(secret(source.read())?.expose())
            .map_err(|_| {
                misconfigured(format!(
                    "the MCP server {name}: the value of the header {header} is not a header value"
                ))
            })?;
        value.set_sensitive(true);
        headers.insert(header, value);
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn notification(token: i64, progress: f64) -> ProgressNotificationParam {
        serde_json::from_value(serde_json::json!({
            "progressToken": token, "progress": progress, "total": 4, "message": "step",
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn progress_reaches_its_call_even_when_it_came_first() {
        let routes = ProgressRoutes::default();
        // Before the call registered its token (the SDK hands it over after sending).
        routes.deliver(notification(7, 1.0));
        routes.deliver(notification(8, 1.0));
        let (sender, mut received) = mpsc::channel(8);
        let route = routes.open(&ProgressToken(NumberOrString::Number(7)), sender);
        routes.deliver(notification(7, 2.0));
        let first = received.recv().await.unwrap();
        assert_eq!(first.completed, Number::from_f64(1.0));
        assert_eq!(first.total, Number::from_f64(4.0));
        assert_eq!(first.message.as_deref(), Some("step"));
        assert_eq!(
            received.recv().await.unwrap().completed,
            Number::from_f64(2.0)
        );
        drop(route);
        // Closed: later reports wait among the early ones, bounded.
        for _ in 0..2 * EARLY_PROGRESS {
            routes.deliver(notification(7, 3.0));
        }
        assert!(received.try_recv().is_err());
        assert_eq!(routes.lock().early.len(), EARLY_PROGRESS);
    }

    #[tokio::test]
    async fn a_line_past_the_bound_fails_the_read_and_says_so() {
        let overflowed = Arc::new(AtomicBool::new(false));
        let text = format!("{}\n{}", "a".repeat(10), "b".repeat(20));
        let mut lines = BoundedLines {
            inner: text.as_bytes(),
            limit: 16,
            run: 0,
            overflowed: Arc::clone(&overflowed),
        };
        let mut read = Vec::new();
        let error = lines.read_to_end(&mut read).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        assert!(
            error
                .to_string()
                .contains("over max_message_bytes (16 bytes)")
        );
        assert!(overflowed.load(Ordering::Acquire));
    }
}
