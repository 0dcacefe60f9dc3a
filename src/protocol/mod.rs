//! Protocol v1 wire types (protocol.md §1-§7).
//!
//! Every object schema is strict: unknown keys are rejected at every level and absent optionals are
//! omitted on output (never `null`), because the reference browser client validates our answers
//! strictly.

pub mod event;
pub mod json;
pub mod session;

pub use event::{EventEnvelope, EventType};
pub use json::{JsonObject, ProtocolVersion};
pub use session::{SessionDescriptor, SessionStatus};
