//! The `recovery` object of a `session.read` result (docs/protocol.md §7.1): where a client resumes
//! the event stream after rendering the snapshot.

use serde::{Deserialize, Serialize};

use super::fields;
use super::route::RouteState;

/// `data.recovery` of `session.read`. Every optional field is omitted when unknown, never `null`:
/// for `pendingInputCount` "unknown is not empty".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecoveryObject {
    /// Whether the session runtime is loaded in the answering process.
    pub session_loaded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_state: Option<RouteState>,
    #[serde(
        default,
        deserialize_with = "fields::opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub attempt: Option<u64>,
    #[serde(
        default,
        deserialize_with = "fields::opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub fencing_token: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// Only when the session is loaded.
    #[serde(
        default,
        deserialize_with = "fields::opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub pending_input_count: Option<u64>,
    /// Resume the SSE stream with `after = lastEventSequence` and dedupe by `eventId`.
    #[serde(
        default,
        deserialize_with = "fields::opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_event_sequence: Option<u64>,
    /// Present only when `true`: the server cannot prove a safe resume point. A strict parse
    /// therefore rejects an explicit `false`, which no server writes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recovery_incomplete: bool,
}
