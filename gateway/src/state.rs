//! What every request handler shares.

use std::sync::Arc;

use agent_runtime::clock::SharedClock;
use agent_runtime::executor_port::SessionExecutor;
use agent_runtime::telemetry::SharedTelemetry;
use agent_runtime_store::Store;
use tokio_util::sync::CancellationToken;

use crate::admission::TenantAdmission;
use crate::auth::Authenticator;
use crate::config::GatewayConfig;
use crate::tail::TailLog;

pub struct AppState {
    pub config: GatewayConfig,
    pub store: Arc<dyn Store>,
    pub executor: Arc<dyn SessionExecutor>,
    pub auth: Arc<dyn Authenticator>,
    pub admission: TenantAdmission,
    pub clock: SharedClock,
    pub telemetry: SharedTelemetry,
    /// What SSE streams read and wait on: the shared tails of followed sessions.
    pub tails: Arc<TailLog>,
    /// Fired on shutdown: SSE streams end and readiness turns 503.
    pub shutdown: CancellationToken,
}
