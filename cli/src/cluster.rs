//! The two cluster processes: `executor` (sessions over gRPC) and `gateway` (HTTP in front of
//! executors). Both share one store (PostgreSQL in production).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime_executor::grpc::worker::{register, spawn_heartbeat};
use agent_runtime_executor::grpc::{ClusterSecret, ExecutorService, WorkerIdentity, serve_grpc};
use agent_runtime_executor::{
    ExecutorConfig, ExecutorDeps, InProcessExecutor, StoreSink, StoredEffects, WorkerLeases,
};
use agent_runtime_gateway::cluster::{HubSignals, RemoteExecutor, Router};
use agent_runtime_gateway::{
    AuditConfig, AuthMode, Gateway, GatewayConfig, GatewayDeps, TokenGrant, build_authenticator,
};
use agent_runtime_store::follow::{HandOff, LocalSignals};
use agent_runtime_store::{Store, TimedStore};
use agent_runtime_telemetry::{Process, TelemetryConfig, TelemetryStack};
use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::telemetry::start_telemetry;

/// An executor process's settings.
#[derive(Clone, Debug)]
pub struct ExecutorProcessConfig {
    pub worker_id: String,
    /// The address gateways dial (what this executor advertises).
    pub advertise: String,
    pub capacity: u32,
    /// Worker heartbeat and session lease TTL. Default 10 s.
    pub lease_ttl: Duration,
    pub secret: String,
    pub executor: ExecutorConfig,
    /// How long a drain (SIGTERM) may take: running requests end, sessions are handed off, and
    /// gRPC calls finish within it; what is left is cut and its leases expire. Default 10 s.
    pub drain_grace: Duration,
    /// Metrics (only on `telemetry.metrics_listen`: an executor has no HTTP API) and traces.
    pub telemetry: TelemetryConfig,
}

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

    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the executor task panicked")?
    }
}

pub async fn start_executor(
    config: ExecutorProcessConfig,
    runtime: crate::serve::AgentRuntime,
    store: Arc<dyn Store>,
    clock: SharedClock,
    listener: TcpListener,
) -> anyhow::Result<RunningExecutor> {
    let secret = ClusterSecret::new(config.secret.clone()).map_err(anyhow::Error::msg)?;
    let address = listener.local_addr()?;
    let stack = TelemetryStack::start(&config.telemetry, Process::Executor, Vec::new())
        .map_err(anyhow::Error::msg)?;
    let telemetry = stack.telemetry.clone();
    let store: Arc<dyn Store> = Arc::new(TimedStore::new(store, telemetry.clone()));
    let signals = LocalSignals::new();
    let (leases, mut lost) = WorkerLeases::new(
        store.clone(),
        &config.worker_id,
        config.lease_ttl,
        config.executor.session_caps(),
        clock.clone(),
    );
    let mcp_servers = runtime.mcp_servers();
    let executor = Arc::new(InProcessExecutor::new(
        config.executor.clone(),
        ExecutorDeps {
            store: store.clone(),
            sink: Arc::new(
                StoreSink::new(store.clone(), telemetry.clone()).with_signals(signals.clone()),
            ),
            provider: runtime.provider,
            tools: runtime.tools,
            profiles: runtime.profiles,
            clock,
            leases: leases.clone(),
            telemetry: telemetry.clone(),
        },
    ));
    // The API listener of an executor is gRPC: metrics only ever go to their own listener.
    let metrics_config = TelemetryConfig {
        metrics: false,
        ..config.telemetry.clone()
    };
    let process_telemetry = start_telemetry(stack, &metrics_config).await?;
    process_telemetry.sample_loaded_sessions(&executor);
    process_telemetry.sample_held_leases(&leases);
    process_telemetry.sample_mcp_servers(mcp_servers);
    let metrics_address = process_telemetry.metrics_address();
    register(
        &store,
        &config.worker_id,
        &config.advertise,
        config.capacity,
        config.lease_ttl,
    )
    .await
    .context("registering the worker")?;
    let heartbeat = spawn_heartbeat(
        store.clone(),
        config.worker_id.clone(),
        config.advertise.clone(),
        config.capacity,
        config.lease_ttl,
    );
    let renewal = leases.spawn_renewal();
    let lost_sessions = {
        let executor = executor.clone();
        tokio::spawn(async move {
            while let Some((tenant, session)) = lost.recv().await {
                executor.drop_lost_session(&tenant, &session).await;
            }
        })
    };

    let draining = Arc::new(AtomicBool::new(false));
    let adoption = spawn_adoption(
        executor.clone(),
        leases.clone(),
        draining.clone(),
        config.lease_ttl,
    );
    let shutdown = CancellationToken::new();
    let serving = CancellationToken::new();
    let service = ExecutorService::new(
        executor.clone(),
        telemetry,
        store.clone(),
        signals,
        WorkerIdentity {
            worker_id: config.worker_id.clone(),
            capacity: config.capacity,
        },
        leases.clone(),
        draining.clone(),
        serving.clone(),
    );
    let health_draining = CancellationToken::new();
    let server = tokio::spawn(serve_grpc(
        service,
        secret,
        listener,
        health_draining.clone(),
        serving.clone(),
    ));
    let stop = shutdown.clone();
    let drain_grace = config.drain_grace;
    let task = tokio::spawn(async move {
        stop.cancelled().await;
        let deadline = tokio::time::Instant::now() + drain_grace;
        // Drain: refuse new sessions and say so (gRPC health, the worker registry, so that
        // routers pick another executor), then end what runs and hand every session off.
        draining.store(true, Ordering::SeqCst);
        health_draining.cancel();
        if let Err(error) = store.drain_worker(&config.worker_id).await {
            tracing::warn!(error = %error, "marking the worker as draining failed");
        }
        let handed_off = tokio::time::timeout_at(deadline, async {
            // Running requests end with terminal events (EXECUTOR_SHUTDOWN), stored before the
            // leases go, so the next owner resumes after them.
            agent_runtime::executor_port::SessionExecutor::shutdown(executor.as_ref()).await;
            leases.release_all().await;
        })
        .await;
        if handed_off.is_err() {
            tracing::warn!(
                drain_grace_ms = drain_grace.as_millis() as u64,
                "sessions were not all handed off within the drain grace period; their leases will expire"
            );
        }
        adoption.abort();
        renewal.abort();
        heartbeat.abort();
        lost_sessions.abort();
        // Ends the Subscribe streams; in-flight command calls finish (tonic's graceful stop).
        serving.cancel();
        let server_abort = server.abort_handle();
        let served = match tokio::time::timeout_at(deadline, server).await {
            Ok(joined) => joined.context("the gRPC server panicked")?,
            Err(_) => {
                tracing::warn!("gRPC calls still running after the drain grace period were cut");
                server_abort.abort();
                Ok(())
            }
        };
        process_telemetry.shutdown().await;
        served.context("serving gRPC")?;
        Ok(())
    });
    Ok(RunningExecutor {
        address,
        metrics_address,
        shutdown,
        task,
    })
}

/// Takes over orphaned sessions (their owner died or drained) so that failover needs no client
/// command: the interrupted request gets its terminal event within about one lease TTL.
fn spawn_adoption(
    executor: Arc<InProcessExecutor>,
    leases: Arc<WorkerLeases>,
    draining: Arc<AtomicBool>,
    lease_ttl: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval((lease_ttl / 4).max(Duration::from_millis(100)));
        loop {
            ticker.tick().await;
            if draining.load(Ordering::SeqCst) {
                continue;
            }
            // Adopt as many orphans as there are, one claim at a time.
            loop {
                match leases.adopt_next().await {
                    Ok(Some(lease)) => {
                        let Some(tenant) = leases.tenant_of(&lease) else {
                            break;
                        };
                        if let Err(error) = executor.adopt(&tenant, lease).await {
                            tracing::warn!(error = %error, "adopting a session failed");
                        }
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::debug!(error = %error, "looking for orphaned sessions failed");
                        break;
                    }
                }
            }
        }
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
    pub secret: String,
    pub failover_window: Duration,
    /// Metrics and traces.
    pub telemetry: TelemetryConfig,
}

/// Starts a cluster gateway; it serves until the returned token is cancelled.
pub async fn start_gateway(
    config: GatewayProcessConfig,
    store: Arc<dyn Store>,
    clock: SharedClock,
    listener: TcpListener,
) -> anyhow::Result<crate::RunningServer> {
    ClusterSecret::new(config.secret.clone()).map_err(anyhow::Error::msg)?;
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
    let executor = Arc::new(RemoteExecutor::new(router.clone(), config.failover_window));
    let auth = build_authenticator(&config.auth_mode, config.tokens, clock.clone())?;
    let frames = HandOff::new();
    let gateway = Gateway::new(
        config.gateway,
        GatewayDeps {
            store: store.clone(),
            executor,
            auth,
            clock,
            telemetry,
            live: Some(Arc::new(HubSignals::new(router, Arc::clone(&frames)))),
            metrics: process_telemetry.endpoint(),
            readiness: None,
            // The events its executors push with their wake-ups go to the shared tails.
            hand_off: Some(frames),
            effects: Some(Arc::new(StoredEffects::new(store.clone()))),
        },
    );
    let address = listener.local_addr()?;
    let metrics_address = process_telemetry.metrics_address();
    let shutdown = CancellationToken::new();
    let serving = shutdown.clone();
    let task = tokio::spawn(async move {
        let served = gateway.serve(listener, serving).await;
        process_telemetry.shutdown().await;
        crate::serve::close_audit(audit).await;
        served.context("serving HTTP")?;
        Ok(())
    });
    Ok(crate::RunningServer::from_parts(
        address,
        None,
        metrics_address,
        shutdown,
        task,
    ))
}
