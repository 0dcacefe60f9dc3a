//! The gateway of the agent session server: the axum HTTP surface (commands, SSE, health,
//! readiness), authentication and scopes, the idempotent command pipeline, per-tenant admission,
//! and the recovery cursor of `session.read`. It never runs models or tools: every session command
//! goes through the `SessionExecutor` port.

pub mod admission;
pub mod auth;
pub mod cluster;
pub mod config;
mod dispatch;
pub mod http;
mod pipeline;
mod read;
pub mod recovery;
pub mod response;
pub mod sse;
mod state;
mod store_errors;
pub mod tail;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime::executor_port::SessionExecutor;
use agent_runtime::telemetry::SharedTelemetry;
use agent_runtime_store::follow::{LiveSignal, StoreSignal};
use agent_runtime_store::{EventLog, Store};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use crate::admission::{AdmissionLimits, TenantAdmission};
pub use crate::auth::{Authenticator, StaticTokens, TokenGrant, token_sha256};
pub use crate::config::{GatewayConfig, normalize_base_path};
use crate::state::AppState;
use crate::tail::{SharedTails, TailLog};

/// What the gateway is wired to.
pub struct GatewayDeps {
    pub store: Arc<dyn Store>,
    pub executor: Arc<dyn SessionExecutor>,
    pub auth: Arc<dyn Authenticator>,
    pub clock: SharedClock,
    pub telemetry: SharedTelemetry,
    /// Where SSE wake-ups come from; `None` uses the store's own `wait_for_events`.
    pub live: Option<Arc<dyn LiveSignal>>,
}

/// A configured gateway, ready to serve on a pre-bound listener.
pub struct Gateway {
    state: Arc<AppState>,
}

impl Gateway {
    pub fn new(mut config: GatewayConfig, deps: GatewayDeps) -> Self {
        config.base_path = normalize_base_path(&config.base_path);
        let admission = TenantAdmission::new(config.admission, deps.clock.clone());
        let live = deps
            .live
            .unwrap_or_else(|| Arc::new(StoreSignal(deps.store.clone())));
        let shutdown = CancellationToken::new();
        let events: Arc<dyn EventLog> = deps.store.clone();
        let tails = Arc::new(TailLog(SharedTails::new(events, live, shutdown.clone())));
        let state = AppState {
            config,
            store: deps.store,
            executor: deps.executor,
            auth: deps.auth,
            admission,
            clock: deps.clock,
            telemetry: deps.telemetry,
            tails,
            shutdown,
        };
        Self {
            state: Arc::new(state),
        }
    }

    /// The router, for in-process tests (`oneshot`).
    pub fn router(&self) -> axum::Router {
        http::router(Arc::clone(&self.state))
    }

    /// Serves until `shutdown` fires, then stops accepting, ends SSE streams, and lets in-flight
    /// commands finish within the grace period.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> std::io::Result<()> {
        let state = Arc::clone(&self.state);
        let sweeper = tokio::spawn(sweep_expired_work(Arc::clone(&state)));
        let router = self.router();
        let stopping = {
            let state = Arc::clone(&state);
            async move {
                shutdown.cancelled().await;
                // Ending the SSE streams first lets graceful shutdown complete: open streams
                // would otherwise hold their connections forever.
                state.shutdown.cancel();
            }
        };
        let server = axum::serve(listener, router).with_graceful_shutdown(stopping);
        let grace = state.config.shutdown_grace;
        let served = server.into_future();
        tokio::pin!(served);
        let outcome = tokio::select! {
            outcome = &mut served => outcome,
            () = async {
                state.shutdown.cancelled().await;
                tokio::time::sleep(grace).await;
            } => {
                tracing::warn!("in-flight requests did not finish within the shutdown grace period");
                Ok(())
            }
        };
        sweeper.abort();
        outcome
    }
}

/// Binds a listener; port 0 picks a free port. Returns it with its address.
pub async fn bind(address: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// Abandons sealed commands that never completed (decision S5) and recovers expired leases.
async fn sweep_expired_work(state: Arc<AppState>) {
    let window_ms = state.config.abandon_sealed_after.as_millis() as u64;
    let mut ticker = tokio::time::interval(Duration::from_secs(30));
    loop {
        ticker.tick().await;
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
