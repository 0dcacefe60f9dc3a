//! The executor of the agent session server: the session runtime (agent loop, model providers,
//! tools, approvals) and the in-process implementation of the `SessionExecutor` port.

pub mod approvals;
pub mod config;
pub mod glob;
pub mod grpc;
mod in_process;
pub mod leases;
pub mod permissions;
pub mod process;
pub mod profiles;
pub mod provider;
pub mod sandbox;
pub mod scrub;
mod session;
pub mod sink;
pub mod tools;
pub mod traced;

pub use crate::config::{
    ExecutorConfig, ExecutorTenantLimits, PendingInputLimits, SessionCaps, TenantCaps,
};
pub use crate::in_process::{ExecutorDeps, InProcessExecutor, StoredEffects};
pub use crate::leases::{NoLeases, SessionLeases, WorkerLeases};
pub use crate::session::event_bound::{
    DEFAULT_MAX_EVENT_BYTES, MAX_EVENT_BYTES_LIMIT, MIN_EVENT_BYTES,
};
pub use crate::sink::{EventSink, StoreSink};
pub use crate::traced::TracedExecutor;
