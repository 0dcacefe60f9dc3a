//! The executor of the agent session server: the session runtime (agent loop, model providers,
//! tools, approvals) and the in-process implementation of the `SessionExecutor` port.

pub mod approvals;
pub mod config;
mod in_process;
pub mod permissions;
pub mod provider;
pub mod sandbox;
pub mod secret;
mod session;
pub mod sink;
pub mod tools;

pub use crate::config::ExecutorConfig;
pub use crate::in_process::{ExecutorDeps, InProcessExecutor};
pub use crate::sink::{EventSink, StoreSink};
