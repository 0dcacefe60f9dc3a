//! The typed `data` of each command's success (docs/protocol.md §2.1).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::protocol::command::names::COMMAND_TYPES;
use crate::protocol::content::{ModelMessage, PendingSessionInput, Priority};
use crate::protocol::error::ProtocolError;
use crate::protocol::fields;
use crate::protocol::json::to_object;
use crate::protocol::json::{JsonObject, ProtocolVersion};
use crate::protocol::recovery::RecoveryObject;
use crate::protocol::session::{HistoryProgress, SessionDescriptor};
use crate::protocol::strict_json::decode_exact;

/// A typed success `data` object.
pub trait ResultData: Serialize + DeserializeOwned {
    /// The `data` object this value is sent as.
    fn to_data(&self) -> JsonObject {
        to_object(self)
    }

    /// Strictly reads a success `data` object.
    fn from_data(data: &JsonObject) -> Result<Self, ProtocolError> {
        decode_exact(Value::Object(data.clone())).map_err(|_| ProtocolError::invalid_result())
    }
}

/// `initialize`. The reference client validates it strictly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitializeResult {
    pub protocol_version: ProtocolVersion,
    #[serde(deserialize_with = "command_types")]
    pub commands: Vec<String>,
    pub transports: Vec<Transport>,
    pub features: Features,
    /// ISO-8601 date-time with offset.
    #[serde(deserialize_with = "fields::iso_datetime")]
    pub server_time: String,
}

impl InitializeResult {
    /// What this server answers: every command, SSE, every feature.
    pub fn new(server_time: impl Into<String>) -> InitializeResult {
        InitializeResult {
            protocol_version: ProtocolVersion,
            commands: COMMAND_TYPES.iter().map(|&name| name.to_owned()).collect(),
            transports: vec![Transport::HttpSse],
            features: Features::default(),
            server_time: server_time.into(),
        }
    }
}

fn command_types<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let commands = Vec::<String>::deserialize(deserializer)?;
    match commands
        .iter()
        .find(|name| !COMMAND_TYPES.contains(&name.as_str()))
    {
        Some(unknown) => Err(D::Error::custom(format_args!(
            "unknown command type {unknown:?}"
        ))),
        None => Ok(commands),
    }
}

/// An event transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Transport {
    #[serde(rename = "http-sse")]
    HttpSse,
}

/// The features of protocol v1; each is the literal `true`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Features {
    #[serde(deserialize_with = "fields::literal_true")]
    pub approvals: bool,
    #[serde(deserialize_with = "fields::literal_true")]
    pub durable_events: bool,
    #[serde(deserialize_with = "fields::literal_true")]
    pub event_replay: bool,
    #[serde(deserialize_with = "fields::literal_true")]
    pub idempotent_commands: bool,
}

impl Default for Features {
    fn default() -> Features {
        Features {
            approvals: true,
            durable_events: true,
            event_replay: true,
            idempotent_commands: true,
        }
    }
}

/// `session.create`, `session.resume`, `session.fork` (the new session) and `session.close`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionResult {
    pub session: SessionDescriptor,
}

/// `session.list`: newest `updatedAt` first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListSessionsResult {
    pub sessions: Vec<SessionDescriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `session.read`. When the session is not loaded here, `messages` and `pending_inputs` are empty
/// placeholders: reading never loads a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadSessionResult {
    pub session: SessionDescriptor,
    pub messages: Vec<ModelMessage>,
    pub pending_inputs: Vec<PendingSessionInput>,
    pub loaded: bool,
    pub recovery: RecoveryObject,
    /// How far the transcript holds the session's requests, where the store keeps it (only
    /// for a loaded session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_progress: Option<HistoryProgress>,
}

/// What became of a submitted input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SubmitStatus {
    Started,
    Steered,
    Queued,
}

/// The status of a submission with exactly the fields that status carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// A new request started.
    Started { request_id: String },
    /// The running request takes the input (`priority` is `now` or `next`).
    Steered {
        request_id: String,
        priority: Priority,
    },
    /// Queued behind the running request (`priority: "later"` on the wire).
    Queued,
}

/// `input.submit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(try_from = "SubmitWire", into = "SubmitWire")]
pub struct SubmitResult {
    pub session_id: String,
    pub input_id: String,
    pub outcome: SubmitOutcome,
}

impl SubmitResult {
    pub fn status(&self) -> SubmitStatus {
        match self.outcome {
            SubmitOutcome::Started { .. } => SubmitStatus::Started,
            SubmitOutcome::Steered { .. } => SubmitStatus::Steered,
            SubmitOutcome::Queued => SubmitStatus::Queued,
        }
    }

    pub fn request_id(&self) -> Option<&str> {
        match &self.outcome {
            SubmitOutcome::Started { request_id } | SubmitOutcome::Steered { request_id, .. } => {
                Some(request_id)
            }
            SubmitOutcome::Queued => None,
        }
    }
}

/// The flat wire shape of [`SubmitResult`].
#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SubmitWire {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    session_id: String,
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    input_id: String,
    status: SubmitStatus,
    #[cfg_attr(feature = "schema", schemars(with = "Option<fields::Identifier>"))]
    #[serde(default, deserialize_with = "fields::opt_identifier")]
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    priority: Option<Priority>,
}

impl TryFrom<SubmitWire> for SubmitResult {
    type Error = String;

    fn try_from(wire: SubmitWire) -> Result<SubmitResult, String> {
        let outcome = match (wire.status, wire.request_id, wire.priority) {
            (SubmitStatus::Started, Some(request_id), None) => {
                SubmitOutcome::Started { request_id }
            }
            (SubmitStatus::Steered, Some(request_id), Some(priority))
                if priority != Priority::Later =>
            {
                SubmitOutcome::Steered {
                    request_id,
                    priority,
                }
            }
            (SubmitStatus::Queued, None, Some(Priority::Later)) => SubmitOutcome::Queued,
            (status, _, _) => {
                return Err(format!("fields do not match submission status {status:?}"));
            }
        };
        Ok(SubmitResult {
            session_id: wire.session_id,
            input_id: wire.input_id,
            outcome,
        })
    }
}

impl From<SubmitResult> for SubmitWire {
    fn from(result: SubmitResult) -> SubmitWire {
        let status = result.status();
        let (request_id, priority) = match result.outcome {
            SubmitOutcome::Started { request_id } => (Some(request_id), None),
            SubmitOutcome::Steered {
                request_id,
                priority,
            } => (Some(request_id), Some(priority)),
            SubmitOutcome::Queued => (None, Some(Priority::Later)),
        };
        SubmitWire {
            session_id: result.session_id,
            input_id: result.input_id,
            status,
            request_id,
            priority,
        }
    }
}

/// `request.abort`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AbortResult {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub session_id: String,
    /// Always `true`.
    #[serde(deserialize_with = "fields::literal_true")]
    pub aborted: bool,
}

impl AbortResult {
    pub fn new(session_id: impl Into<String>) -> AbortResult {
        AbortResult {
            session_id: session_id.into(),
            aborted: true,
        }
    }
}

/// `permission.resolve`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvePermissionResult {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub session_id: String,
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub permission_request_id: String,
    /// Always `true`.
    #[serde(deserialize_with = "fields::literal_true")]
    pub resolved: bool,
}

impl ResolvePermissionResult {
    pub fn new(
        session_id: impl Into<String>,
        permission_request_id: impl Into<String>,
    ) -> ResolvePermissionResult {
        ResolvePermissionResult {
            session_id: session_id.into(),
            permission_request_id: permission_request_id.into(),
            resolved: true,
        }
    }
}

impl ResultData for InitializeResult {}
impl ResultData for SessionResult {}
impl ResultData for ListSessionsResult {}
impl ResultData for ReadSessionResult {}
impl ResultData for SubmitResult {}
impl ResultData for AbortResult {}
impl ResultData for ResolvePermissionResult {}
