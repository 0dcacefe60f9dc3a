//! The strict `data` schema of each command type (docs/protocol.md §2.1).

use serde::{Deserialize, Serialize};

use crate::protocol::content::{Priority, UserContent};
use crate::protocol::fields;
use crate::protocol::json::JsonObject;

/// `initialize`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct InitializeData {
    pub client: ClientInfo,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<ClientCapabilities>,
}

/// The client announcing itself in `initialize`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ClientInfo {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub name: String,
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub version: String,
    /// 1..=256 UTF-16 code units.
    #[serde(
        default,
        deserialize_with = "fields::opt_utf16_len::<1, 256, _>",
        skip_serializing_if = "Option::is_none"
    )]
    pub title: Option<String>,
}

/// What the client says it can handle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientCapabilities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durable_events: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_replay: Option<bool>,
}

/// `session.create`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSessionData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// `session.read`, `session.resume`, `session.close` and `request.abort`: just the session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRef {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub session_id: String,
}

impl SessionRef {
    pub fn new(session_id: impl Into<String>) -> SessionRef {
        SessionRef {
            session_id: session_id.into(),
        }
    }
}

/// `session.list`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ListSessionsData {
    /// Opaque, store-defined; at least one character.
    #[serde(
        default,
        deserialize_with = "fields::opt_utf16_len::<1, { usize::MAX }, _>",
        skip_serializing_if = "Option::is_none"
    )]
    pub cursor: Option<String>,
    /// 1..=100.
    #[serde(
        default,
        deserialize_with = "fields::opt_int_in::<1, 100, _>",
        skip_serializing_if = "Option::is_none"
    )]
    pub limit: Option<u64>,
}

/// `session.fork`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkSessionData {
    /// The source session.
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub session_id: String,
    #[cfg_attr(feature = "schema", schemars(with = "Option<fields::Identifier>"))]
    #[serde(default, deserialize_with = "fields::opt_identifier")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// The new session's metadata; the source's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// `input.submit`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubmitInputData {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub session_id: String,
    pub input: UserContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<fields::Identifier>"))]
    #[serde(default, deserialize_with = "fields::opt_identifier")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_request_id: Option<String>,
    /// A positive integer.
    #[serde(
        default,
        deserialize_with = "fields::opt_int_in::<1, { fields::MAX_SAFE_INTEGER }, _>",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_turns: Option<u64>,
}

/// How long an approval holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum PermissionScope {
    Once,
    Session,
}

/// `permission.resolve`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvePermissionData {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub session_id: String,
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub permission_request_id: String,
    pub approved: bool,
    /// At most 4096 UTF-16 code units.
    #[serde(
        default,
        deserialize_with = "fields::opt_utf16_len::<0, 4096, _>",
        skip_serializing_if = "Option::is_none"
    )]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<PermissionScope>,
}
