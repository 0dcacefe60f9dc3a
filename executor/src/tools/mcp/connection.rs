//! One MCP server's connection, kept by a supervisor task: connect, list the tools, check health,
//! reconnect with backoff. Calls never wait for a reconnect: a server that is down fails its
//! calls at once with a readable error, and its tools leave the list the model is offered.

use crate::secret::scrub_urls;
use crate::tools::output::elide_middle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use agent_runtime::telemetry::TraceContext;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams, RequestParamsMeta};
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::tool::McpTool;
use super::transport::{self, Connection, Handler, StdioLauncher};
use super::{McpServerConfig, tool_name};
use crate::tools::Tool;

/// Where a server's connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McpState {
    /// Not connected yet (start-up).
    Connecting,
    Ready,
    /// The last connect or health check failed; reconnecting with backoff.
    Unavailable,
}

impl McpState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Ready => "ready",
            Self::Unavailable => "unavailable",
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
    error: Option<String>,
}

pub struct McpServer {
    config: McpServerConfig,
    stdio: Option<StdioLauncher>,
    max_output_bytes: usize,
    current: Mutex<Current>,
    /// A call saw the connection fail, or the tool list changed: check now.
    wake: Arc<Notify>,
    tools_changed: Arc<AtomicBool>,
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
            error: current.error.clone(),
        }
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
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live connection, or why there is none (a call's readable error).
    fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let current = self.lock();
        current.peer.clone().ok_or_else(|| {
            format!(
                "the MCP server {} is unavailable{}",
                self.config.name,
                current
                    .error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            )
        })
    }

    /// One `tools/call`; its result as the wire's JSON. A traced call carries its trace context
    /// as `_meta.traceparent` (MCP's SEP-414); never `tracestate`, as for model providers.
    pub(super) async fn call_tool(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        trace: Option<&TraceContext>,
    ) -> Result<Value, String> {
        let peer = self.peer()?;
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        if let Some(trace) = trace {
            params.set_traceparent(&trace.traceparent());
        }
        let call = peer.call_tool(params);
        // Dropping the call (timeout, abort) sends `notifications/cancelled`.
        let result = self.bounded(call).await?;
        serde_json::to_value(result).map_err(|e| e.to_string())
    }

    pub(super) async fn list_resources(&self) -> Result<Value, String> {
        let peer = self.peer()?;
        let resources = self.bounded(peer.list_all_resources()).await?;
        serde_json::to_value(resources).map_err(|e| e.to_string())
    }

    pub(super) async fn read_resource(&self, uri: &str) -> Result<Value, String> {
        let peer = self.peer()?;
        let read = self
            .bounded(peer.read_resource(ReadResourceRequestParams::new(uri)))
            .await?;
        serde_json::to_value(read).map_err(|e| e.to_string())
    }

    /// A request under the call timeout; a failed connection wakes the supervisor.
    async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, String> {
        let name = &self.config.name;
        match tokio::time::timeout(self.config.call_timeout, request).await {
            Err(_) => Err(format!(
                "the MCP server {name} did not answer within {} s",
                self.config.call_timeout.as_secs_f64()
            )),
            Ok(Ok(value)) => Ok(value),
            Ok(Err(ServiceError::McpError(error))) => Err(format!(
                "the MCP server {name} refused: {}",
                elide_middle(&scrub_urls(&error.message), 2_000)
            )),
            Ok(Err(error)) => {
                self.wake.notify_one();
                Err(format!(
                    "the MCP server {name} failed: {}",
                    elide_middle(&scrub_urls(&error.to_string()), 2_000)
                ))
            }
        }
    }

    /// The server's tools as this process offers them.
    async fn list_tools(
        self: &Arc<Self>,
        peer: &Peer<RoleClient>,
    ) -> Result<Vec<Arc<dyn Tool>>, String> {
        let listed = tokio::time::timeout(self.config.connect_timeout, peer.list_all_tools())
            .await
            .map_err(|_| "tools/list timed out".to_owned())?
            .map_err(|e| format!("tools/list failed: {}", elide_middle(&e.to_string(), 2_000)))?;
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for remote in listed {
            let Some(name) = tool_name(&self.config.name, &remote.name) else {
                tracing::warn!(server = %self.config.name, "an MCP tool's name is too long for providers: not offered");
                continue;
            };
            if tools.iter().any(|tool| tool.spec().name == name) {
                // Never two tools under one name: the second could shadow the first.
                tracing::warn!(server = %self.config.name, tool = %name, "two MCP tools map to one name: the second is not offered");
                continue;
            }
            match McpTool::new(Arc::downgrade(self), name.clone(), remote) {
                Some(tool) => tools.push(Arc::new(tool)),
                None => {
                    tracing::warn!(server = %self.config.name, tool = %name, "an MCP tool whose input is not an object: not offered")
                }
            }
        }
        Ok(tools)
    }

    fn set(&self, update: impl FnOnce(&mut Current)) {
        update(&mut self.lock());
    }
}

/// The supervisor: holds the connection, checks it, and replaces it when it fails. Ends when
/// the server is dropped.
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
                let error = scrub_urls(&watch(&server, &connection, &wake, interval, &stop).await);
                // Ends the session politely (HTTP `DELETE`); then the child, if any, is killed.
                let _ = connection.close_with_timeout(Duration::from_secs(2)).await;
                drop(child);
                let Some(strong) = server.upgrade() else {
                    return;
                };
                tracing::warn!(server = %strong.config.name, %error, "MCP server unavailable: reconnecting");
                strong.set(|c| {
                    c.peer = None;
                    c.tools.clear();
                    c.state = McpState::Unavailable;
                    c.error = Some(error);
                });
            }
            Err(error) => {
                let error = scrub_urls(&error);
                failures += 1;
                if failures == 1 {
                    tracing::warn!(server = %strong.config.name, %error, "cannot connect to an MCP server: retrying with backoff");
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
async fn connect(server: &Arc<McpServer>) -> Result<transport::Opened, String> {
    let handler = Handler {
        tools_changed: Arc::clone(&server.tools_changed),
        wake: Arc::clone(&server.wake),
    };
    let timeout = server.config.connect_timeout;
    let (connection, child) = tokio::time::timeout(
        timeout,
        transport::connect(&server.config, handler, server.stdio.as_ref()),
    )
    .await
    .map_err(|_| format!("no answer within {} s", timeout.as_secs_f64()))??;
    // The default response cache would answer a failing `tools/list` with the last list.
    connection
        .peer()
        .set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
        .await;
    server.tools_changed.store(false, Ordering::Release);
    let tools = server.list_tools(connection.peer()).await?;
    tracing::info!(server = %server.config.name, tools = tools.len(), "MCP server connected");
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
) -> String {
    let mut next = Instant::now() + interval;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return "stopped".to_owned(),
            _ = tokio::time::sleep_until(next.into()) => next = Instant::now() + interval,
            _ = wake.notified() => {}
        }
        let Some(server) = server.upgrade() else {
            return "stopped".to_owned();
        };
        if connection.is_closed() || connection.peer().is_transport_closed() {
            return "the connection closed".to_owned();
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
