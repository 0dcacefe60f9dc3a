//! The two cluster processes: `executor` (sessions over gRPC) and `gateway` (HTTP in front of
//! executors). Both share one store (PostgreSQL in production).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime::telemetry::{NoTelemetry, SharedTelemetry};
use agent_runtime_executor::grpc::worker::{register, spawn_heartbeat};
use agent_runtime_executor::grpc::{ClusterSecret, ExecutorService, WorkerIdentity, serve_grpc};
use agent_runtime_executor::provider::ModelProvider;
use agent_runtime_executor::tools::ToolRegistry;
use agent_runtime_executor::{
    ExecutorConfig, ExecutorDeps, InProcessExecutor, StoreSink, WorkerLeases,
};
use agent_runtime_gateway::cluster::{HubSignals, RemoteExecutor, Router};
use agent_runtime_gateway::{
    AuditConfig, AuthMode, Gateway, GatewayConfig, GatewayDeps, TokenGrant, build_authenticator,
};
use agent_runtime_store::Store;
use agent_runtime_store::follow::LocalSignals;
use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

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
    /// How long a drain may take before leases are handed off anyway.
    pub drain_grace: Duration,
}

/// A running executor.
pub struct RunningExecutor {
    pub address: SocketAddr,
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
    runtime: (Arc<dyn ModelProvider>, ToolRegistry),
    store: Arc<dyn Store>,
    clock: SharedClock,
    listener: TcpListener,
) -> anyhow::Result<RunningExecutor> {
    let (provider, tools) = runtime;
    let secret = ClusterSecret::new(config.secret.clone()).map_err(anyhow::Error::msg)?;
    let address = listener.local_addr()?;
    let signals = LocalSignals::new();
    let (leases, mut lost) = WorkerLeases::new(
        store.clone(),
        &config.worker_id,
        config.lease_ttl,
        config.executor.max_active_sessions_per_tenant,
    );
    let telemetry: SharedTelemetry = Arc::new(NoTelemetry);
    let executor = Arc::new(InProcessExecutor::new(
        config.executor.clone(),
        ExecutorDeps {
            store: store.clone(),
            sink: Arc::new(StoreSink::new(store.clone(), telemetry).with_signals(signals.clone())),
            provider,
            tools,
            clock,
            leases: leases.clone(),
        },
    ));
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
    let server = tokio::spawn(serve_grpc(service, secret, listener, serving.clone()));
    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        stop.cancelled().await;
        // Drain: refuse new sessions, then end what runs and hand every session off.
        draining.store(true, Ordering::SeqCst);
        if let Err(error) = store.drain_worker(&config.worker_id).await {
            tracing::warn!(error = %error, "marking the worker as draining failed");
        }
        agent_runtime::executor_port::SessionExecutor::shutdown(executor.as_ref()).await;
        leases.release_all().await;
        adoption.abort();
        renewal.abort();
        heartbeat.abort();
        lost_sessions.abort();
        serving.cancel();
        server
            .await
            .context("the gRPC server panicked")?
            .context("serving gRPC")?;
        Ok(())
    });
    Ok(RunningExecutor {
        address,
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
}

/// Starts a cluster gateway; it serves until the returned token is cancelled.
pub async fn start_gateway(
    config: GatewayProcessConfig,
    store: Arc<dyn Store>,
    clock: SharedClock,
    listener: TcpListener,
) -> anyhow::Result<crate::RunningServer> {
    ClusterSecret::new(config.secret.clone()).map_err(anyhow::Error::msg)?;
    let router = Arc::new(Router::new(store.clone(), clock.clone(), &config.secret));
    let executor = Arc::new(RemoteExecutor::new(router.clone(), config.failover_window));
    let auth = build_authenticator(&config.auth_mode, config.tokens, clock.clone())?;
    let audit = crate::serve::start_audit(config.audit.as_ref())?;
    let gateway = Gateway::new(
        config.gateway,
        GatewayDeps {
            store: store.clone(),
            executor,
            auth,
            clock,
            telemetry: crate::serve::with_audit(None, audit.as_ref()),
            live: Some(Arc::new(HubSignals::new(router))),
        },
    );
    let address = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let serving = shutdown.clone();
    let task = tokio::spawn(async move {
        let served = gateway.serve(listener, serving).await;
        crate::serve::close_audit(audit).await;
        served.context("serving HTTP")?;
        Ok(())
    });
    Ok(crate::RunningServer::from_parts(
        address, None, shutdown, task,
    ))
}
