//! Storage ports of the agent session server and their memory, JSONL and PostgreSQL backends.
//!
//! `store` knows nothing of HTTP or gRPC: the ports speak in store records and typed
//! [`StoreError`]s, and the gateway and executors map those to protocol codes at their boundaries.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod error;
#[cfg(any(test, feature = "testing"))]
pub mod faulty;
pub mod follow;
pub mod frozen;
pub mod hooked;
pub mod journal;
pub mod jsonl;
pub mod memory;
pub mod model;
pub mod options;
pub mod outbox;
pub mod portable;
pub mod ports;
pub mod postgres;
pub mod rules;
#[cfg(any(test, feature = "testing"))]
pub mod test_hooks;
#[cfg(feature = "testing")]
pub mod testing;
pub mod timed;
pub mod transcript;

pub use error::{
    CommandProgress, RuntimeErrorCode, StoreError, StoreResult, WriteOutcome, command_error,
};
pub use frozen::Frozen;
pub use hooked::{Hooked, Operation, StoreHooks};
pub use journal::{CommandLease, Journal, JournalEntry};
pub use jsonl::{JsonlBackend, JsonlStore};
pub use memory::{Backend, DurableState, MemoryBackend, MemoryStore, StoreEngine};
pub use model::*;
pub use options::StoreOptions;
pub use outbox::*;
pub use portable::{ImportCounts, ImportOutcome, Portable};
pub use ports::*;
pub use postgres::{DatabaseClock, PostgresOptions, PostgresStore, SchemaPolicy};
#[cfg(any(test, feature = "testing"))]
pub use test_hooks::TestHooks;
pub use timed::TimedStore;
