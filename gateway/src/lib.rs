//! The gateway of the agent session server: the axum HTTP surface (commands, SSE, health,
//! readiness, metrics), authentication and scopes, the idempotent command pipeline, per-tenant admission,
//! and the recovery cursor of `session.read`. It never runs models or tools: every session command
//! goes through the `SessionExecutor` port.

mod a2a;
pub mod admin;
pub mod admission;
mod agui;
pub mod answer;
pub mod audit;
pub mod auth;
pub mod cluster;
pub mod config;
mod dispatch;
pub mod http;
mod internal;
mod lifecycle;
mod pipeline;
mod projected;
mod read;
pub mod reconcile;
pub mod recovery;
pub mod response;
mod retention;
mod server;
pub mod sse;
mod state;
mod store_errors;
pub mod stream_slots;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime::executor_port::{CommandEffects, SessionExecutor};
use agent_runtime::telemetry::SharedTelemetry;
use agent_runtime_store::follow::{AppendedEvents, HandOff, LiveSignal, StoreSignal};
use agent_runtime_store::{EventReader, Store};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use crate::admission::{AdmissionLimits, TenantAdmission};
pub use crate::audit::{AuditConfig, AuditLog, AuditTarget};
use crate::auth::failures::FailureLimiter;
pub use crate::auth::{
    AuthMode, Authenticator, StaticTokens, TokenGrant, build_authenticator, token_sha256,
};
pub use crate::config::{
    GatewayConfig, TenantLimits, TenantQuota, TenantQuotas, normalize_base_path,
};
use crate::state::AppState;
use agent_runtime_store::follow::{SharedTails, TailLog};

/// What the gateway is wired to.
pub struct GatewayDeps {
    pub store: Arc<dyn Store>,
    pub executor: Arc<dyn SessionExecutor>,
    pub auth: Arc<dyn Authenticator>,
    pub clock: SharedClock,
    pub telemetry: SharedTelemetry,
    /// Where SSE wake-ups come from; `None` uses the store's own `wait_for_events`.
    pub live: Option<Arc<dyn LiveSignal>>,
    /// Serves `GET /metrics` (Prometheus or OpenMetrics text, no token) when set.
    pub metrics: Option<MetricsEndpoint>,
    /// More of what `readyz` reports (the MCP servers' health), when set.
    pub readiness: Option<ReadinessDetails>,
    /// The events this process's own executor appends, handed to the SSE tails (`serve`).
    pub hand_off: Option<Arc<HandOff>>,
    /// Where the sweep looks for the effects of long-sealed commands; `None`: no such sweep.
    pub effects: Option<Arc<dyn CommandEffects>>,
    /// The cluster's router, for the admin API's moves; `None` in one process.
    pub cluster: Option<Arc<cluster::Router>>,
    /// The tools of a tenant's profile (name, description), for its A2A skills: the local
    /// executor's in `serve`; in a cluster, `None` asks a live executor over gRPC.
    pub tenant_tools: Option<TenantTools>,
}

/// The tools (name, description) new sessions of a tenant get.
pub type TenantTools = Arc<
    dyn Fn(String) -> futures_util::future::BoxFuture<'static, Vec<(String, String)>> + Send + Sync,
>;

/// Renders what `GET /metrics` answers for the request's `Accept` header: the content type
/// (the scraper's choice of text format) and the body.
pub type MetricsEndpoint = Arc<dyn Fn(Option<&str>) -> (&'static str, String) + Send + Sync>;

/// Keys added to the `readyz` body; they report without changing readiness (an optional
/// dependency that is down does not take the server out of its load balancer). The argument says
/// whether the caller may see names and error text (`session:admin`); otherwise only fixed
/// states and counts (`readyz` needs no token).
pub type ReadinessDetails =
    Arc<dyn Fn(bool) -> serde_json::Map<String, serde_json::Value> + Send + Sync>;

/// A configured gateway, ready to serve on a pre-bound listener.
pub struct Gateway {
    state: Arc<AppState>,
    effects: Option<Arc<dyn CommandEffects>>,
}

impl Gateway {
    pub fn new(mut config: GatewayConfig, deps: GatewayDeps) -> Self {
        config.base_path = normalize_base_path(&config.base_path);
        let quotas = TenantQuotas::from_config(&config);
        let overrides = config
            .tenant_limits
            .iter()
            .map(|limits| {
                let quota = quotas.for_tenant(&limits.tenant);
                (limits.tenant.clone(), quota.admission)
            })
            .collect();
        let admission =
            TenantAdmission::with_overrides(config.admission(), overrides, deps.clock.clone());
        let streams = stream_slots::StreamSlots::new(config.max_sse_connections, quotas);
        let live = deps
            .live
            .unwrap_or_else(|| Arc::new(StoreSignal(deps.store.clone())));
        let lifecycle = lifecycle::Lifecycle::default();
        // The pumps of the shared tails stop with the SSE streams.
        let events: Arc<dyn EventReader> = deps.store.clone();
        let shared = SharedTails::new(events, live, lifecycle.streams_ending().clone());
        if let Some(hand_off) = &deps.hand_off {
            let target: Arc<dyn AppendedEvents> = shared.clone();
            // Held weakly: the tails live as long as the gateway's state.
            hand_off.connect(&target);
        }
        let tails = Arc::new(TailLog(shared));
        let auth_failures = FailureLimiter::new(config.auth_failures_per_minute);
        let state = AppState {
            auth_failures,
            config,
            store: deps.store,
            executor: deps.executor,
            auth: deps.auth,
            admission,
            clock: deps.clock,
            telemetry: deps.telemetry,
            tails,
            metrics: deps.metrics,
            readiness: deps.readiness,
            lifecycle,
            streams,
            commands: TaskTracker::new(),
            effects: deps.effects.clone(),
            tenant_tools: deps
                .tenant_tools
                .or_else(|| deps.cluster.as_ref().map(cluster::tenant_tools)),
            cluster: deps.cluster,
        };
        Self {
            state: Arc::new(state),
            effects: deps.effects,
        }
    }

    /// The router, for in-process tests (`oneshot`).
    pub fn router(&self) -> axum::Router {
        http::router(Arc::clone(&self.state))
    }

    /// Serves until `shutdown` fires, then shuts down in phases: `readyz` answers 503 for
    /// `shutdown_readiness_delay` while everything else is still served; then the listener closes,
    /// SSE streams end cleanly, late commands are refused with a retryable `OVERLOADED`, and
    /// in-flight requests and sealed commands get `shutdown_grace` to finish before their
    /// connections are dropped.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> std::io::Result<()> {
        let state = Arc::clone(&self.state);
        let sweeper = tokio::spawn(sweep_expired_work(Arc::clone(&state)));
        let reconciler = self
            .effects
            .map(|effects| tokio::spawn(complete_long_sealed(Arc::clone(&state), effects)));
        server::run(listener, state, shutdown).await;
        sweeper.abort();
        if let Some(reconciler) = reconciler {
            reconciler.abort();
        }
        Ok(())
    }
}

/// Binds a listener; port 0 picks a free port. Returns it with its address.
pub async fn bind(address: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// Completes the long-sealed commands whose effect is stored (see
/// [`reconcile::complete_stored_effects`]), a few times per `reconcile_sealed_after`.
async fn complete_long_sealed(state: Arc<AppState>, effects: Arc<dyn CommandEffects>) {
    let after = state.config.reconcile_sealed_after;
    let period = (after / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
    let mut ticker = tokio::time::interval(period);
    loop {
        ticker.tick().await;
        let cut_off = state
            .clock
            .now_ms()
            .saturating_sub(after.as_millis() as u64);
        let completed =
            reconcile::complete_stored_effects(state.store.as_ref(), effects.as_ref(), cut_off)
                .await;
        if completed > 0 {
            tracing::info!(
                completed,
                "completed long-sealed commands from their stored effects"
            );
        }
    }
}

/// Abandons sealed commands that never completed (decision S5), recovers expired leases, deletes
/// the receipts of commands finished longer ago than the retention, and purges closed sessions
/// past theirs.
async fn sweep_expired_work(state: Arc<AppState>) {
    let window_ms = state.config.abandon_sealed_after.as_millis() as u64;
    let retention_ms = state.config.command_retention.as_millis() as u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(30));
    loop {
        ticker.tick().await;
        let finished_before_ms = state.clock.now_ms().saturating_sub(retention_ms);
        retention::reap_receipts(&state, finished_before_ms).await;
        retention::reap_receipts_over_budget(&state).await;
        retention::trim_old_events(&state).await;
        retention::purge_closed_sessions(&state).await;
        retention::purge_closed_sessions_over_budget(&state).await;
        match state.store.recover_expired_work(window_ms).await {
            Ok(counts) if counts.abandoned_commands > 0 || counts.suspended_sessions > 0 => {
                tracing::info!(
                    abandoned_commands = counts.abandoned_commands,
                    suspended_sessions = counts.suspended_sessions,
                    offline_workers = counts.offline_workers,
                    "recovered expired work"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(error = %error, "recovery sweep failed"),
        }
    }
}
