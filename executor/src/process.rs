//! An executor process of a cluster: the session runtime served to gateways over gRPC,
//! registered in the worker registry with a heartbeat, renewing its session leases, adopting
//! orphaned sessions, and draining in order. The counterpart of the gateway's `Gateway`: the
//! binary only wires configuration, telemetry and the listener.
//!
//! Drain order (on `shutdown`): refuse new sessions and say so (gRPC health and the worker
//! registry, so routers pick another executor); end running requests with their terminal events
//! and hand every session off by releasing its lease; then stop the background loops, end the
//! `Subscribe` streams and let in-flight calls finish. All within `drain_grace`; what is left is
//! cut and its leases expire. An operator who marks the worker as draining in the registry
//! (`agent-runtime admin executors drain`) starts the same drain at the next heartbeat
//! ([`ExecutorProcess::drain_requested`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime::executor_port::SessionExecutor;
use agent_runtime::secret::Secret;
use agent_runtime::telemetry::SharedTelemetry;
use agent_runtime_store::follow::{AppendedEvents, HandOff, LocalSignals, SharedTails, TailLog};
use agent_runtime_store::{EventReader, Store};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::grpc::worker::{register, spawn_heartbeat};
use crate::grpc::{ExecutorService, WorkerIdentity, check_cluster_secret, serve_grpc};
use crate::profiles::AgentProfile;
use crate::provider::ModelProvider;
use crate::tools::ToolRegistry;
use crate::{ExecutorConfig, ExecutorDeps, InProcessExecutor, StoreSink, WorkerLeases};

/// An executor process's settings.
#[derive(Clone, Debug)]
pub struct ExecutorProcessConfig {
    pub worker_id: String,
    /// The address gateways dial (what this executor advertises).
    pub advertise: String,
    pub capacity: u32,
    /// Worker heartbeat and session lease TTL. Default 10 s.
    pub lease_ttl: Duration,
    pub secret: Secret,
    pub executor: ExecutorConfig,
    /// How long a drain may take (see the module doc). Default 10 s.
    pub drain_grace: Duration,
}

/// What an executor process runs on.
pub struct ProcessDeps {
    /// The shared store (PostgreSQL in production), already instrumented.
    pub store: Arc<dyn Store>,
    /// The default profile's provider and tools.
    pub provider: Arc<dyn ModelProvider>,
    pub tools: ToolRegistry,
    pub profiles: Vec<AgentProfile>,
    pub clock: SharedClock,
    pub telemetry: SharedTelemetry,
}

/// Why an executor process could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("invalid cluster secret: {0}")]
    Secret(String),
    #[error("registering the worker: {0}")]
    Register(agent_runtime_store::StoreError),
    #[error("serving gRPC: {0}")]
    Serve(tonic::transport::Error),
    #[error("the gRPC server panicked")]
    Panicked,
}

/// A started executor process: registered, serving gRPC, running its background loops.
pub struct ExecutorProcess {
    config: ExecutorProcessConfig,
    store: Arc<dyn Store>,
    executor: Arc<InProcessExecutor>,
    leases: Arc<WorkerLeases>,
    draining: Arc<AtomicBool>,
    /// Cancelled first in a drain: gRPC health says NOT_SERVING.
    health_draining: CancellationToken,
    /// Cancelled last: ends the `Subscribe` streams and stops the server.
    serving: CancellationToken,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    background: Vec<JoinHandle<()>>,
    /// Cancelled when the registry says an operator drains this worker.
    drain_requested: CancellationToken,
}

impl ExecutorProcess {
    /// Registers the worker and starts serving on `listener`.
    pub async fn start(
        config: ExecutorProcessConfig,
        deps: ProcessDeps,
        listener: TcpListener,
    ) -> Result<Self, ProcessError> {
        check_cluster_secret(&config.secret).map_err(ProcessError::Secret)?;
        let secret = config.secret.clone();
        let store = deps.store.clone();
        let serving = CancellationToken::new();
        let (signals, hand_off, tails) = live_events(&store, &serving);
        let (leases, lost) = WorkerLeases::new(
            store.clone(),
            &config.worker_id,
            config.lease_ttl,
            config.executor.session_caps(),
            deps.clock.clone(),
        );
        let telemetry = deps.telemetry.clone();
        let sink = StoreSink::new(store.clone(), deps.telemetry.clone())
            .with_signals(signals)
            .with_hand_off(hand_off);
        let executor = in_process_executor(&config, deps, &leases, sink);
        register(
            &store,
            &config.worker_id,
            &config.advertise,
            config.capacity,
            config.lease_ttl,
        )
        .await
        .map_err(ProcessError::Register)?;
        let draining = Arc::new(AtomicBool::new(false));
        let drain_requested = CancellationToken::new();
        let background = vec![
            spawn_heartbeat(
                store.clone(),
                config.worker_id.clone(),
                config.advertise.clone(),
                config.capacity,
                config.lease_ttl,
                drain_requested.clone(),
            ),
            leases.spawn_renewal(),
            spawn_lost_sessions(executor.clone(), lost),
            spawn_adoption(
                executor.clone(),
                leases.clone(),
                draining.clone(),
                config.lease_ttl,
            ),
        ];
        let health_draining = CancellationToken::new();
        let identity = WorkerIdentity {
            worker_id: config.worker_id.clone(),
            capacity: config.capacity,
        };
        let service = ExecutorService::new(
            executor.clone(),
            telemetry,
            store.clone(),
            tails,
            identity,
            leases.clone(),
            draining.clone(),
            serving.clone(),
        );
        let server = tokio::spawn(serve_grpc(
            service,
            secret,
            listener,
            health_draining.clone(),
            serving.clone(),
        ));
        Ok(Self {
            config,
            store,
            executor,
            leases,
            draining,
            health_draining,
            serving,
            server,
            background,
            drain_requested,
        })
    }

    /// Cancelled once an operator marked this worker as draining: the owner of the process then
    /// shuts it down (see the module doc).
    pub fn drain_requested(&self) -> CancellationToken {
        self.drain_requested.clone()
    }

    /// The sessions this process runs (for telemetry's loaded-session gauge).
    pub fn executor(&self) -> &Arc<InProcessExecutor> {
        &self.executor
    }

    /// The session leases this process holds (for telemetry's held-lease gauge).
    pub fn leases(&self) -> &Arc<WorkerLeases> {
        &self.leases
    }

    /// Serves until `shutdown` is cancelled, then drains (see the module doc).
    pub async fn run_until(self, shutdown: CancellationToken) -> Result<(), ProcessError> {
        shutdown.cancelled().await;
        let deadline = tokio::time::Instant::now() + self.config.drain_grace;
        self.draining.store(true, Ordering::SeqCst);
        self.health_draining.cancel();
        if let Err(error) = self.store.drain_worker(&self.config.worker_id).await {
            tracing::warn!(error = %error, "marking the worker as draining failed");
        }
        let handed_off = tokio::time::timeout_at(deadline, async {
            // Running requests end with terminal events (EXECUTOR_SHUTDOWN), stored before the
            // leases go, so the next owner resumes after them.
            SessionExecutor::shutdown(self.executor.as_ref()).await;
            self.leases.release_all().await;
        })
        .await;
        if handed_off.is_err() {
            tracing::warn!(
                drain_grace_ms = self.config.drain_grace.as_millis() as u64,
                "sessions were not all handed off within the drain grace period; their leases will expire"
            );
        }
        for task in &self.background {
            task.abort();
        }
        // Ends the Subscribe streams; in-flight command calls finish (tonic's graceful stop).
        self.serving.cancel();
        let server_abort = self.server.abort_handle();
        match tokio::time::timeout_at(deadline, self.server).await {
            Ok(Ok(served)) => served.map_err(ProcessError::Serve),
            Ok(Err(_)) => Err(ProcessError::Panicked),
            Err(_) => {
                tracing::warn!("gRPC calls still running after the drain grace period were cut");
                server_abort.abort();
                Ok(())
            }
        }
    }
}

/// The session runtime of this process: its events go to the store and wake this process's
/// streams; its sessions are held under this worker's leases.
/// Where this executor's committed events go: straight to the tails its `Subscribe` streams
/// read (the hand-off), as in `serve`, so a live event is never read back from the store; the
/// signals wake the tails' pumps for anything else.
fn live_events(
    store: &Arc<dyn Store>,
    stop: &CancellationToken,
) -> (Arc<LocalSignals>, Arc<HandOff>, Arc<TailLog>) {
    let signals = LocalSignals::new();
    let hand_off = HandOff::new();
    let events: Arc<dyn EventReader> = store.clone();
    let tails = SharedTails::new(events, signals.clone(), stop.clone());
    let appended: Arc<dyn AppendedEvents> = tails.clone();
    hand_off.connect(&appended);
    (signals, hand_off, Arc::new(TailLog(tails)))
}

fn in_process_executor(
    config: &ExecutorProcessConfig,
    deps: ProcessDeps,
    leases: &Arc<WorkerLeases>,
    sink: StoreSink,
) -> Arc<InProcessExecutor> {
    Arc::new(InProcessExecutor::new(
        config.executor.clone(),
        ExecutorDeps {
            store: deps.store,
            sink: Arc::new(sink),
            provider: deps.provider,
            tools: deps.tools,
            profiles: deps.profiles,
            clock: deps.clock,
            leases: leases.clone(),
            telemetry: deps.telemetry,
        },
    ))
}

/// Drops the sessions whose lease this process lost (another executor owns them now).
fn spawn_lost_sessions(
    executor: Arc<InProcessExecutor>,
    mut lost: tokio::sync::mpsc::UnboundedReceiver<(String, String)>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some((tenant, session)) = lost.recv().await {
            executor.drop_lost_session(&tenant, &session).await;
        }
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
