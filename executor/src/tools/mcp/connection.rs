//! One MCP server's connection, kept by a supervisor task: connect, list the tools, check health,
//! reconnect with backoff. Calls never wait for a reconnect: a server that is down fails its
//! calls at once with a readable error, and its tools leave the list the model is offered.

use agent_runtime::sync::Locked;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use agent_runtime::telemetry::TraceContext;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest,
    CustomRequest, ReadResourceRequestParams, RequestId, RequestParamsMeta, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::error::{McpError, McpErrorCode, TooLarge, server_text};
use super::tool::McpTool;
use super::transport::{self, Connection, Handler, ProgressRoutes, StdioLauncher};
use super::{McpServerConfig, tool_name};
use crate::tools::output::elide_middle;
use crate::tools::{Tool, ToolProgressUpdate};

/// Pages of `tools/list` (or `resources/list`) read at most for one listing: a server that
/// always answers with another cursor cannot keep the client listing for ever.
const MAX_LIST_PAGES: usize = 100;

/// Where a server's connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McpState {
    /// Not connected yet (start-up).
    Connecting,
    Ready,
    /// The last connect or health check failed; reconnecting with backoff.
    Unavailable,
    /// The configuration refuses the server (its address, a header): not retried until the
    /// configuration changes and the process restarts.
    Misconfigured,
}

impl McpState {
    pub const ALL: [McpState; 4] = [
        Self::Connecting,
        Self::Ready,
        Self::Unavailable,
        Self::Misconfigured,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Ready => "ready",
            Self::Unavailable => "unavailable",
            Self::Misconfigured => "misconfigured",
        }
    }
}

/// What readiness and metrics report of a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpHealth {
    pub server: String,
    pub state: McpState,
    /// Tools offered now.
    pub tools: usize,
    /// Why it is unavailable (never a secret: tokens are not part of any message).
    pub error: Option<String>,
    /// The stable code of that error (`MCP_SERVER_UNAVAILABLE`, …).
    pub code: Option<&'static str>,
}

/// Backoff between reconnects: 1 s, doubling, at most 30 s (as the reference).
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(5)).min(Duration::from_secs(30))
}

#[derive(Debug)]
struct Current {
    peer: Option<Peer<RoleClient>>,
    tools: Vec<Arc<dyn Tool>>,
    state: McpState,
    error: Option<McpError>,
}

pub struct McpServer {
    config: McpServerConfig,
    stdio: Option<StdioLauncher>,
    max_output_bytes: usize,
    current: Mutex<Current>,
    /// A call saw the connection fail, or the tool list changed: check now.
    wake: Arc<Notify>,
    tools_changed: Arc<AtomicBool>,
    /// The calls waiting for `notifications/progress`, by progress token.
    progress: ProgressRoutes,
    /// Raised when the connection closed because the server sent a message too large.
    overflowed: Arc<AtomicBool>,
    /// Raised once the first connect attempt ended (either way).
    settled: Notify,
    /// Ends the supervisor with the server.
    _stop: DropGuard,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts the server's supervisor and waits for its first connect attempt (at most
    /// `connect_timeout`): a reachable server's tools are there for the first session, and an
    /// unreachable one does not stop start-up (it is reported unavailable and retried).
    pub(crate) async fn start(
        config: McpServerConfig,
        sandbox: Option<crate::sandbox::Sandbox>,
        stdio_allowed: bool,
        max_output_bytes: usize,
    ) -> Arc<Self> {
        let stop = CancellationToken::new();
        let server = Arc::new(Self {
            stdio: stdio_allowed.then_some(StdioLauncher { sandbox }),
            max_output_bytes,
            current: Mutex::new(Current {
                peer: None,
                tools: Vec::new(),
                state: McpState::Connecting,
                error: None,
            }),
            wake: Arc::new(Notify::new()),
            tools_changed: Arc::new(AtomicBool::new(false)),
            progress: ProgressRoutes::default(),
            overflowed: Arc::new(AtomicBool::new(false)),
            settled: Notify::new(),
            _stop: stop.clone().drop_guard(),
            config,
        });
        let settled = server.settled.notified();
        tokio::spawn(supervise(Arc::downgrade(&server), stop));
        let _ = tokio::time::timeout(server.config.connect_timeout, settled).await;
        server
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub(super) fn config(&self) -> &McpServerConfig {
        &self.config
    }

    pub(super) fn max_output_bytes(&self) -> usize {
        self.max_output_bytes
    }

    pub fn health(&self) -> McpHealth {
        let current = self.lock();
        McpHealth {
            server: self.config.name.clone(),
            state: current.state,
            tools: current.tools.len(),
            error: current.error.as_ref().map(|error| error.message.clone()),
            code: current.error.as_ref().map(|error| error.code.as_str()),
        }
    }

    /// Why a tool of this server that is not offered now cannot be called: the server is not
    /// connected. `None` when it is (the tool does not exist).
    pub(super) fn unavailable(&self) -> Option<McpError> {
        self.peer().err()
    }

    pub(super) fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.lock().tools.clone()
    }

    pub(super) fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let current = self.lock();
        current
            .tools
            .iter()
            .find(|tool| tool.spec().name == name)
            .cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.locked()
    }

    /// The live connection, or why there is none (a call's readable error).
    fn peer(&self) -> Result<Peer<RoleClient>, McpError> {
        let current = self.lock();
        if let Some(peer) = &current.peer {
            return Ok(peer.clone());
        }
        let name = &self.config.name;
        Err(match (&current.error, current.state) {
            (Some(error), McpState::Misconfigured) => error.clone(),
            (Some(error), _) => McpError::new(
                McpErrorCode::Unavailable,
                format!("the MCP server {name} is unavailable; last error: {error}"),
            ),
            (None, _) => McpError::new(
                McpErrorCode::Unavailable,
                format!("the MCP server {name} is unavailable (still connecting)"),
            ),
        })
    }

    /// One `tools/call`; its result as the wire's JSON. A traced call carries its trace context
    /// as `_meta.traceparent` (MCP's SEP-414); never `tracestate`, as for model providers. The
    /// server's `notifications/progress` for the call go to `progress`.
    pub(super) async fn call_tool(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        trace: Option<&TraceContext>,
        progress: mpsc::Sender<ToolProgressUpdate>,
    ) -> Result<Value, McpError> {
        let peer = self.peer()?;
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        if let Some(trace) = trace {
            params.set_traceparent(&trace.traceparent());
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let call = async {
            // The SDK gives every request its own progress token: the call's progress is routed
            // by it.
            let handle = peer
                .send_cancellable_request(request, PeerRequestOptions::no_options())
                .await?;
            let _route = self.progress.open(&handle.progress_token, progress);
            // Dropped before the answer (a timeout, an abort): the server is told with
            // `notifications/cancelled`.
            let abandoned = Abandoned::new(&peer, handle.id.clone());
            let answer = handle.await_response().await;
            abandoned.disarm();
            answer
        };
        match self.bounded(call).await? {
            ServerResult::CallToolResult(result) => {
                serde_json::to_value(result).map_err(|_| self.malformed())
            }
            _ => Err(self.malformed()),
        }
    }

    pub(super) async fn list_resources(&self) -> Result<Value, McpError> {
        let peer = self.peer()?;
        let resources = self
            .list_pages(
                &peer,
                "resources/list",
                "resources",
                self.config.call_timeout,
            )
            .await?;
        Ok(Value::Array(resources))
    }

    pub(super) async fn read_resource(&self, uri: &str) -> Result<Value, McpError> {
        let peer = self.peer()?;
        let read = self
            .bounded(peer.read_resource(ReadResourceRequestParams::new(uri)))
            .await?;
        serde_json::to_value(read).map_err(|_| self.malformed())
    }

    fn malformed(&self) -> McpError {
        McpError::new(
            McpErrorCode::Protocol,
            format!(
                "the MCP server {} sent an answer that does not follow MCP",
                self.config.name
            ),
        )
    }

    /// A request under the call timeout; a failed connection wakes the supervisor.
    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, McpError> {
        self.within(self.config.call_timeout, request).await
    }

    async fn within<T>(
        &self,
        timeout: Duration,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, McpError> {
        let name = &self.config.name;
        match tokio::time::timeout(timeout, request).await {
            Err(_) => Err(McpError::new(
                McpErrorCode::Timeout,
                format!(
                    "the MCP server {name} did not answer within {} s",
                    timeout.as_secs_f64()
                ),
            )),
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                if !matches!(error, ServiceError::McpError(_)) {
                    self.wake.notify_one();
                }
                if self.overflowed.load(Ordering::Acquire) {
                    let limit = self.config.max_message_bytes;
                    return Err(McpError::new(
                        McpErrorCode::MessageTooLarge,
                        format!("the MCP server {name} failed: {}", TooLarge { limit }),
                    ));
                }
                Err(McpError::of_request(name, &error))
            }
        }
    }

    /// Every page of a listing (`tools/list`, `resources/list`) as raw items, so that one
    /// malformed item is left out alone rather than failing the whole answer. At most
    /// [`MAX_LIST_PAGES`] pages; a cursor seen before ends the listing.
    async fn list_pages(
        &self,
        peer: &Peer<RoleClient>,
        method: &str,
        field: &str,
        timeout: Duration,
    ) -> Result<Vec<Value>, McpError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = HashSet::new();
        for _ in 0..MAX_LIST_PAGES {
            let params = cursor.as_ref().map(|cursor| json!({ "cursor": cursor }));
            let request = ClientRequest::CustomRequest(CustomRequest::new(method, params));
            let answer = self.within(timeout, peer.send_request(request)).await?;
            let mut page = serde_json::to_value(answer).map_err(|_| self.malformed())?;
            match page.get_mut(field).map(Value::take) {
                Some(Value::Array(listed)) => items.extend(listed),
                _ => return Err(self.malformed()),
            }
            cursor = match page.get("nextCursor") {
                Some(Value::String(next)) if seen.insert(next.clone()) => Some(next.clone()),
                Some(Value::String(_)) => {
                    tracing::warn!(server = %self.config.name, %method, "an MCP server repeated a page cursor: the listing ends there");
                    return Ok(items);
                }
                _ => return Ok(items),
            };
        }
        tracing::warn!(server = %self.config.name, %method, pages = MAX_LIST_PAGES, "an MCP server's listing has more pages than are read: the rest is left out");
        Ok(items)
    }

    /// The server's tools as this process offers them; a tool that cannot be offered (its
    /// name, its schema) is left out alone.
    async fn list_tools(
        self: &Arc<Self>,
        peer: &Peer<RoleClient>,
    ) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        let server = &self.config.name;
        let listed = self
            .list_pages(peer, "tools/list", "tools", self.config.connect_timeout)
            .await?;
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for raw in listed {
            let shown = server_text(&elide_middle(raw["name"].as_str().unwrap_or("?"), 80));
            let Ok(remote) = serde_json::from_value::<rmcp::model::Tool>(raw) else {
                tracing::warn!(%server, tool = %shown, "an MCP tool that does not follow MCP (its input schema is not an object): not offered");
                continue;
            };
            let Some(name) = tool_name(server, &remote.name) else {
                tracing::warn!(%server, tool = %shown, "an MCP tool's name is too long for providers: not offered");
                continue;
            };
            if tools.iter().any(|tool| tool.spec().name == name) {
                // Never two tools under one name: the second could shadow the first.
                tracing::warn!(%server, tool = %name, "two MCP tools map to one name: the second is not offered");
                continue;
            }
            match McpTool::new(Arc::downgrade(self), name.clone(), remote) {
                Some(tool) => tools.push(Arc::new(tool)),
                None => {
                    tracing::warn!(%server, tool = %name, "an MCP tool whose input is not an object: not offered")
                }
            }
        }
        Ok(tools)
    }

    fn set(&self, update: impl FnOnce(&mut Current)) {
        update(&mut self.lock());
    }
}

/// Tells the server a call was abandoned (`notifications/cancelled`) when dropped armed.
struct Abandoned {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Abandoned {
    fn new(peer: &Peer<RoleClient>, id: RequestId) -> Self {
        Self {
            peer: peer.clone(),
            id: Some(id),
        }
    }

    /// The call was answered: nothing to tell.
    fn disarm(mut self) {
        self.id = None;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let params = CancelledNotificationParam::new(
                Some(id),
                Some("the call was abandoned".to_owned()),
            );
            let _ = peer.notify_cancelled(params).await;
        });
    }
}

/// The supervisor: holds the connection, checks it, and replaces it when it fails. Ends when
/// the server is dropped, or when the configuration refuses the server.
async fn supervise(server: Weak<McpServer>, stop: CancellationToken) {
    let mut failures = 0u32;
    loop {
        let Some(strong) = server.upgrade() else {
            return;
        };
        let wake = Arc::clone(&strong.wake);
        let attempt = tokio::select! {
            _ = stop.cancelled() => return,
            attempt = connect(&strong) => attempt,
        };
        match attempt {
            Ok((mut connection, child)) => {
                failures = 0;
                strong.settled.notify_waiters();
                let interval = strong.config.health_interval;
                drop(strong);
                let error = watch(&server, &connection, &wake, interval, &stop).await;
                // Ends the session politely (HTTP `DELETE`); then the child, if any, is killed.
                let _ = connection.close_with_timeout(Duration::from_secs(2)).await;
                drop(child);
                let Some(strong) = server.upgrade() else {
                    return;
                };
                tracing::warn!(server = %strong.config.name, code = error.code.as_str(), %error, "MCP server unavailable: reconnecting");
                strong.set(|c| {
                    c.peer = None;
                    c.tools.clear();
                    c.state = McpState::Unavailable;
                    c.error = Some(error);
                });
            }
            Err(error) if error.code == McpErrorCode::Misconfigured => {
                tracing::warn!(server = %strong.config.name, code = error.code.as_str(), %error, "an MCP server the configuration refuses: not connected until it changes");
                strong.set(|c| {
                    c.state = McpState::Misconfigured;
                    c.error = Some(error);
                });
                strong.settled.notify_waiters();
                return;
            }
            Err(error) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(server = %strong.config.name, code = error.code.as_str(), %error, "cannot connect to an MCP server: retrying with backoff");
                }
                strong.set(|c| {
                    c.state = McpState::Unavailable;
                    c.error = Some(error);
                });
                strong.settled.notify_waiters();
                drop(strong);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff(failures)) => {}
                }
            }
        }
    }
}

/// Connects, lists the tools and publishes them.
async fn connect(server: &Arc<McpServer>) -> Result<transport::Opened, McpError> {
    let handler = Handler {
        tools_changed: Arc::clone(&server.tools_changed),
        wake: Arc::clone(&server.wake),
        progress: server.progress.clone(),
    };
    server.overflowed.store(false, Ordering::Release);
    let timeout = server.config.connect_timeout;
    let name = &server.config.name;
    let (connection, child) = tokio::time::timeout(
        timeout,
        transport::connect(
            &server.config,
            handler,
            server.stdio.as_ref(),
            Arc::clone(&server.overflowed),
        ),
    )
    .await
    .map_err(|_| {
        McpError::new(
            McpErrorCode::Timeout,
            format!(
                "the MCP server {name} did not answer within {} s",
                timeout.as_secs_f64()
            ),
        )
    })??;
    // The default response cache would answer a failing `tools/list` with the last list.
    connection
        .peer()
        .set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
        .await;
    server.tools_changed.store(false, Ordering::Release);
    let tools = server.list_tools(connection.peer()).await?;
    tracing::info!(server = %name, tools = tools.len(), "MCP server connected");
    server.set(|c| {
        c.peer = Some(connection.peer().clone());
        c.tools = tools;
        c.state = McpState::Ready;
        c.error = None;
    });
    Ok((connection, child))
}

/// Checks a live connection every `interval`, or at once when woken; returns why it failed.
async fn watch(
    server: &Weak<McpServer>,
    connection: &Connection,
    wake: &Notify,
    interval: Duration,
    stop: &CancellationToken,
) -> McpError {
    let stopped = || McpError::new(McpErrorCode::Unavailable, "stopped");
    let mut next = Instant::now() + interval;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return stopped(),
            _ = tokio::time::sleep_until(next.into()) => next = Instant::now() + interval,
            _ = wake.notified() => {}
        }
        let Some(server) = server.upgrade() else {
            return stopped();
        };
        if connection.is_closed() || connection.peer().is_transport_closed() {
            let name = &server.config.name;
            return match server.overflowed.load(Ordering::Acquire) {
                true => McpError::new(
                    McpErrorCode::MessageTooLarge,
                    format!(
                        "the MCP server {name} failed: {}",
                        TooLarge {
                            limit: server.config.max_message_bytes
                        }
                    ),
                ),
                false => McpError::new(
                    McpErrorCode::Unavailable,
                    format!("the connection to the MCP server {name} closed"),
                ),
            };
        }
        server.tools_changed.store(false, Ordering::Release);
        match server.list_tools(connection.peer()).await {
            Ok(tools) => server.set(|c| c.tools = tools),
            Err(error) => return error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::backoff;
    use std::time::Duration;

    #[test]
    fn backoff_doubles_from_one_second_to_thirty() {
        let delays: Vec<Duration> = (1..=8).map(backoff).collect();
        assert_eq!(delays[0], Duration::from_secs(1));
        assert_eq!(delays[1], Duration::from_secs(2));
        assert_eq!(delays[4], Duration::from_secs(16));
        assert_eq!(delays[5], Duration::from_secs(30));
        assert_eq!(delays[7], Duration::from_secs(30));
    }
}
