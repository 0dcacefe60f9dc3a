//! Storage ports of the agent session server and their memory and JSONL backends.
//!
//! `store` knows nothing of HTTP or gRPC: the ports speak in store records and typed
//! [`StoreError`]s, and the gateway and executors map those to protocol codes at their boundaries.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod error;
pub mod model;
pub mod ports;

pub use error::{RuntimeErrorCode, StoreError, StoreResult};
pub use model::*;
pub use ports::*;
