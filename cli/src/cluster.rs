//! The two cluster processes: `executor` (sessions over gRPC) and `gateway` (HTTP in front of
//! executors). Both share one store (PostgreSQL in production).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime::secret::Secret;
use agent_runtime_executor::StoredEffects;
use agent_runtime_executor::grpc::check_cluster_secret;
pub use agent_runtime_executor::process::ExecutorProcessConfig;
use agent_runtime_executor::process::{ExecutorProcess, ProcessDeps};
use agent_runtime_gateway::cluster::{HubSignals, RemoteExecutor, Router};
use agent_runtime_gateway::{
    AuditConfig, AuthMode, Gateway, GatewayConfig, GatewayDeps, TokenGrant, build_authenticator,
};
use agent_runtime_store::follow::HandOff;
use agent_runtime_store::{Store, TimedStore};
use agent_runtime_telemetry::{Process, TelemetryConfig, TelemetryStack};
use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::telemetry::start_telemetry;

/// A running executor.
pub struct RunningExecutor {
    pub address: SocketAddr,
    /// Where `GET /metrics` is served, when `telemetry.metrics_listen` is set.
    pub metrics_address: Option<SocketAddr>,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl RunningExecutor {
    /// Drains: stops taking sessions, ends running requests, hands sessions off, stops serving.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Resolves once a drain has begun: by [`Self::shutdown`], or by an operator's drain.
    pub async fn draining(&self) {
        self.shutdown.cancelled().await;
    }

    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the executor task panicked")?
    }
}

/// Starts an executor process (`agent_runtime_executor::process`) with this binary's telemetry:
/// metrics only on `telemetry.metrics_listen` (an executor's API listener is gRPC) and traces.
pub async fn start_executor(
    config: ExecutorProcessConfig,
    telemetry_config: &TelemetryConfig,
    runtime: crate::serve::AgentRuntime,
    store: Arc<dyn Store>,
    clock: SharedClock,
    listener: TcpListener,
) -> anyhow::Result<RunningExecutor> {
    let address = listener.local_addr()?;
    let stack = TelemetryStack::start(telemetry_config, Process::Executor, Vec::new())
        .map_err(anyhow::Error::msg)?;
    let telemetry = stack.telemetry.clone();
    let mcp_servers = runtime.mcp_servers();
    let deps = ProcessDeps {
        store: Arc::new(TimedStore::new(store, telemetry.clone())),
        provider: runtime.provider,
        tools: runtime.tools,
        profiles: runtime.profiles,
        clock,
        telemetry,
    };
    let process = ExecutorProcess::start(config, deps, listener).await?;
    let metrics_config = TelemetryConfig {
        metrics: false,
        ..telemetry_config.clone()
    };
    let process_telemetry = start_telemetry(stack, &metrics_config).await?;
    process_telemetry.sample_loaded_sessions(process.executor());
    process_telemetry.sample_held_leases(process.leases());
    process_telemetry.sample_mcp_servers(mcp_servers);
    let metrics_address = process_telemetry.metrics_address();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    // An operator's drain (seen at a heartbeat) stops the process like SIGTERM.
    let drained = process.drain_requested();
    let on_drain = shutdown.clone();
    tokio::spawn(async move {
        drained.cancelled().await;
        on_drain.cancel();
    });
    let task = tokio::spawn(async move {
        let served = process.run_until(stop).await;
        process_telemetry.shutdown().await;
        Ok(served?)
    });
    Ok(RunningExecutor {
        address,
        metrics_address,
        shutdown,
        task,
    })
}

/// A gateway process's settings.
#[derive(Clone, Debug)]
pub struct GatewayProcessConfig {
    pub gateway: GatewayConfig,
    /// The static grants (`auth_mode` static).
    pub tokens: Vec<TokenGrant>,
    /// How requests authenticate.
    pub auth_mode: AuthMode,
    /// The audit log; `None` writes none.
    pub audit: Option<AuditConfig>,
    pub secret: Secret,
    pub failover_window: Duration,
    /// Metrics and traces.
    pub telemetry: TelemetryConfig,
    /// `[webhooks]`: this gateway delivers the cluster's webhooks (with every other that has it).
    pub webhooks: Option<crate::config::WebhooksConfig>,
}

/// Starts a cluster gateway; it serves until the returned token is cancelled.
pub async fn start_gateway(
    config: GatewayProcessConfig,
    store: Arc<dyn Store>,
    clock: SharedClock,
    listener: TcpListener,
) -> anyhow::Result<crate::RunningServer> {
    check_cluster_secret(&config.secret).map_err(anyhow::Error::msg)?;
    let audit = crate::serve::start_audit(config.audit.as_ref())?;
    let adapters = crate::serve::audit_adapter(audit.as_ref())
        .into_iter()
        .collect();
    let stack = TelemetryStack::start(&config.telemetry, Process::Gateway, adapters)
        .map_err(anyhow::Error::msg)?;
    let telemetry = stack.telemetry.clone();
    let store: Arc<dyn Store> = Arc::new(TimedStore::new(store, telemetry.clone()));
    let process_telemetry = start_telemetry(stack, &config.telemetry).await?;
    let router = Arc::new(Router::new(store.clone(), clock.clone(), &config.secret));
    let effects = Arc::new(StoredEffects::new(store.clone()));
    let executor = Arc::new(
        RemoteExecutor::new(router.clone(), config.failover_window, telemetry.clone())
            .with_effects(effects.clone()),
    );
    let auth = build_authenticator(&config.auth_mode, config.tokens, clock.clone())?;
    let webhooks = crate::webhooks::RunningWebhooks::start(
        config.webhooks.as_ref(),
        store.clone(),
        clock.clone(),
        telemetry.clone(),
    )
    .await?;
    let frames = HandOff::new();
    let gateway = Gateway::new(
        config.gateway,
        GatewayDeps {
            store: store.clone(),
            executor,
            auth,
            clock,
            telemetry,
            live: Some(Arc::new(HubSignals::new(
                Arc::clone(&router),
                Arc::clone(&frames),
            ))),
            metrics: process_telemetry.endpoint(),
            readiness: None,
            // The events its executors push with their wake-ups go to the shared tails.
            hand_off: Some(frames),
            effects: Some(effects),
            cluster: Some(router),
            tenant_tools: None,
        },
    );
    let metrics_address = process_telemetry.metrics_address();
    let close = async move {
        crate::webhooks::RunningWebhooks::stop(webhooks).await;
        process_telemetry.shutdown().await;
        crate::serve::close_audit(audit).await;
        Ok(())
    };
    crate::RunningServer::spawn(gateway, listener, None, metrics_address, close)
}
