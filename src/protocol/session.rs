//! `SessionDescriptor` (docs/protocol.md §2.1).

use serde::{Deserialize, Serialize};

use super::fields;
use super::json::JsonObject;

/// Whether a session accepts work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    Active,
    Closed,
}

/// What clients see of a session: the stored record without `tenantId` and `createdBy`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionDescriptor {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub session_id: String,
    pub status: SessionStatus,
    /// ISO-8601 date-time with offset.
    #[serde(deserialize_with = "fields::iso_datetime")]
    pub created_at: String,
    /// ISO-8601 date-time with offset.
    #[serde(deserialize_with = "fields::iso_datetime")]
    pub updated_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
}

/// How far the transcript holds the session's requests (`historyProgress` of `session.read`,
/// docs/protocol.md §7.1): where the recovery cursor comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HistoryProgress {
    pub state: HistoryProgressState,
    /// The newest request whose messages the transcript fully holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered_request_id: Option<String>,
}

/// `historyProgress.state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum HistoryProgressState {
    /// A request is writing messages the transcript does not hold yet.
    InProgress,
    Complete,
    /// The transcript has a known gap (sticky until repaired).
    Failed,
}
