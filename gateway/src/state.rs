//! What every request handler shares.

use std::sync::Arc;

use agent_runtime::clock::SharedClock;
use agent_runtime::executor_port::SessionExecutor;
use agent_runtime::telemetry::SharedTelemetry;
use agent_runtime_store::Store;
use tokio_util::task::TaskTracker;

use crate::admission::TenantAdmission;
use crate::auth::Authenticator;
use crate::config::GatewayConfig;
use crate::lifecycle::Lifecycle;
use crate::stream_slots::StreamSlots;
use agent_runtime_store::follow::TailLog;

pub struct AppState {
    pub config: GatewayConfig,
    pub store: Arc<dyn Store>,
    pub executor: Arc<dyn SessionExecutor>,
    pub auth: Arc<dyn Authenticator>,
    /// The brake on clients that fail authentication too often; `None` when turned off.
    pub auth_failures: Option<crate::auth::failures::FailureLimiter>,
    pub admission: TenantAdmission,
    pub clock: SharedClock,
    pub telemetry: SharedTelemetry,
    /// What SSE streams read and wait on: the shared tails of followed sessions (their pumps
    /// wait on the live signal).
    pub tails: Arc<TailLog>,
    /// `GET /metrics`, when the operator exposes metrics on this listener.
    pub metrics: Option<crate::MetricsEndpoint>,
    /// What `readyz` adds to its body.
    pub readiness: Option<crate::ReadinessDetails>,
    /// Where shutdown stands: readiness, draining (SSE streams end, commands are refused), forced.
    pub lifecycle: Lifecycle,
    /// Open SSE connections per tenant and in all, against their caps.
    pub streams: StreamSlots,
    /// Sealed commands running to their end; shutdown waits for them within the grace period.
    pub commands: TaskTracker,
    /// Where the admin API looks for the effects of unfinished commands; `None`: it says
    /// `unknown`.
    pub effects: Option<Arc<dyn agent_runtime::executor_port::CommandEffects>>,
    /// The cluster's router (where an operator's move goes); `None` in one process.
    pub cluster: Option<Arc<crate::cluster::Router>>,
    /// The tools of a tenant's profile, for its A2A skills; `None` in a cluster gateway.
    pub tenant_tools: Option<crate::TenantTools>,
}
