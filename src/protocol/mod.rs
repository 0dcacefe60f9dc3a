//! Protocol v1 wire types (docs/protocol.md §1-§7).
//!
//! Every object schema is strict: unknown keys are rejected at every level and absent optionals are
//! omitted on output (never `null`), because the reference browser client validates our answers
//! strictly. Every request parser starts from [`strict_json::parse_strict`].

pub mod canonical;
pub mod command;
pub mod content;
pub mod error;
pub mod event;
pub mod event_check;
pub mod fields;
pub mod json;
pub mod message_compat;
pub mod permission;
pub mod principal;
pub mod recovery;
pub mod result;
pub mod route;
#[cfg(feature = "schema")]
pub mod schema;
pub mod scope;
pub mod session;
pub mod shared_object;
pub mod stream;
pub mod strict_json;

pub use canonical::canonical_json;
pub use command::{COMMAND_TYPES, Command, CommandKind, command_fingerprint, parse_command};
pub use error::{ErrorCode, ProtocolError, pseudo_command_id};
pub use event::{EventEnvelope, EventType};
pub use event_check::{EventPayload, parse_event, parse_event_payload, validate_event};
pub use shared_object::SharedObject;
/// An event's `data` object.
pub type EventData = SharedObject;
pub use json::{JsonObject, PROTOCOL_VERSION, ProtocolVersion};
pub use permission::PermissionRequestedData;
pub use principal::{Principal, Scope};
pub use recovery::RecoveryObject;
pub use result::{CommandResult, ResultData, parse_command_result, success_value};
pub use route::RouteState;
pub use session::{SessionDescriptor, SessionStatus};
pub use stream::StreamMessage;
