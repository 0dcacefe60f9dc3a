//! The telemetry of one process: its adapters (metrics, trace export), where `GET /metrics` is
//! served (on the API listener, on its own listener, or not at all), and the gauges read at
//! scrape time.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use agent_runtime_executor::tools::mcp::{McpHealth, McpServer, McpState};
use agent_runtime_executor::{InProcessExecutor, WorkerLeases};
use agent_runtime_gateway::MetricsEndpoint;
use agent_runtime_telemetry::{MetricsServer, TelemetryConfig, TelemetryStack, serve_metrics};
use anyhow::Context;
use tokio::net::TcpListener;

pub(crate) struct ProcessTelemetry {
    stack: TelemetryStack,
    /// The separate metrics listener, when configured.
    server: Option<MetricsServer>,
    /// Whether the API listener serves `/metrics`.
    on_api: bool,
}

/// Binds the metrics listener when `metrics_listen` is set.
pub(crate) async fn start_telemetry(
    stack: TelemetryStack,
    config: &TelemetryConfig,
) -> anyhow::Result<ProcessTelemetry> {
    let server = match config.metrics_listen {
        Some(address) => {
            let listener = TcpListener::bind(address)
                .await
                .with_context(|| format!("listening for metrics on {address}"))?;
            Some(serve_metrics(listener, stack.metrics.clone())?)
        }
        None => None,
    };
    Ok(ProcessTelemetry {
        on_api: config.metrics && server.is_none(),
        stack,
        server,
    })
}

impl ProcessTelemetry {
    /// What the gateway serves at `GET /metrics`, if it serves it.
    pub fn endpoint(&self) -> Option<MetricsEndpoint> {
        if !self.on_api {
            return None;
        }
        let metrics = self.stack.metrics.clone();
        Some(Arc::new(move |accept| {
            agent_runtime_telemetry::exposition(&metrics, accept)
        }))
    }

    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(|server| server.address)
    }

    /// `agent_runtime_executor_sessions_loaded`. Weak: the executor holds the telemetry, so a
    /// strong reference here would keep both alive forever.
    pub fn sample_loaded_sessions(&self, executor: &Arc<InProcessExecutor>) {
        let executor: Weak<InProcessExecutor> = Arc::downgrade(executor);
        self.stack.metrics.registry().sampled_gauge(
            "agent_runtime_executor_sessions_loaded",
            "Sessions loaded in this executor",
            move || {
                executor
                    .upgrade()
                    .map_or(0, |executor| executor.loaded_sessions().len() as i64)
            },
        );
    }

    /// `agent_runtime_executor_leases_held` (cluster executors only).
    pub fn sample_held_leases(&self, leases: &Arc<WorkerLeases>) {
        let leases: Weak<WorkerLeases> = Arc::downgrade(leases);
        self.stack.metrics.registry().sampled_gauge(
            "agent_runtime_executor_leases_held",
            "Session execution leases this executor holds",
            move || leases.upgrade().map_or(0, |leases| leases.count() as i64),
        );
    }

    /// `agent_runtime_mcp_servers` by state, and on a metrics listener of its own (the
    /// operator's protected place, `telemetry.metrics_listen`) `agent_runtime_mcp_server_up` and
    /// `agent_runtime_mcp_server_tools` per profile and server. The API listener's `/metrics`
    /// needs no token, and profile and server names can say who the customers are.
    pub fn sample_mcp_servers(&self, servers: Vec<(String, Arc<McpServer>)>) {
        if servers.is_empty() {
            return;
        }
        let registry = self.stack.metrics.registry();
        let counted = servers.clone();
        registry.sampled_gauges(
            "agent_runtime_mcp_servers",
            "MCP servers by connection state",
            &["state"],
            move || {
                McpState::ALL
                    .into_iter()
                    .map(|state| {
                        let count = counted
                            .iter()
                            .filter(|(_, server)| server.health().state == state)
                            .count();
                        (vec![state.as_str().to_owned()], count as i64)
                    })
                    .collect()
            },
        );
        if self.server.is_none() {
            return;
        }
        let series = |servers: &[(String, Arc<McpServer>)], value: fn(&McpHealth) -> i64| {
            servers
                .iter()
                .map(|(profile, server)| {
                    let health = server.health();
                    (vec![profile.clone(), health.server.clone()], value(&health))
                })
                .collect()
        };
        let up = servers.clone();
        registry.sampled_gauges(
            "agent_runtime_mcp_server_up",
            "Whether an MCP server is connected (1) or unavailable (0)",
            &["profile", "server"],
            move || series(&up, |h| i64::from(h.state == McpState::Ready)),
        );
        registry.sampled_gauges(
            "agent_runtime_mcp_server_tools",
            "Tools an MCP server offers now",
            &["profile", "server"],
            move || series(&servers, |h| h.tools as i64),
        );
    }

    /// Stops the metrics listener and flushes queued spans.
    pub async fn shutdown(self) {
        if let Some(server) = self.server {
            server.shutdown().await;
        }
        self.stack.shutdown().await;
    }
}
