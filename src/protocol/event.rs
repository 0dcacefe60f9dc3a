//! The event envelope (protocol.md §1.4): what the SSE `data:` line carries and what the store keeps.

use serde::{Deserialize, Serialize};

use super::json::{JsonObject, ProtocolVersion};

/// The three event types of a session's event log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "session.stream")]
    SessionStream,
    #[serde(rename = "permission.requested")]
    PermissionRequested,
    #[serde(rename = "session.closed")]
    SessionClosed,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::SessionStream => "session.stream",
            EventType::PermissionRequested => "permission.requested",
            EventType::SessionClosed => "session.closed",
        }
    }
}

/// A stored, sequenced event. `data` is kept as a JSON object here; its per-type schema is checked
/// where events are produced and where they are validated strictly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventEnvelope {
    pub protocol_version: ProtocolVersion,
    pub event_id: String,
    /// Positive; an integral JSON number (`1.0` reads as 1, as in JavaScript).
    #[serde(deserialize_with = "super::fields::int")]
    pub sequence: u64,
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// ISO-8601 date-time with offset, stamped at publish time.
    pub occurred_at: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub data: JsonObject,
}
