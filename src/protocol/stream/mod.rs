//! `session.stream` payloads (docs/protocol.md §6.2): one agent stream message per event.
//!
//! Every variant carries `sessionId` (equal to the envelope's, checked by
//! `validate_event`) and `type`, and every variant is strict. Ids
//! inside stream payloads only need to be non-empty strings (§1.1 exception).

mod patch;
mod tool;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

pub use patch::{
    BrowserCapability, ContextCapabilities, ContextPatch, FilesystemCapability, Hook, HookEvent,
    ModelOverride, NetworkCapability, PatchScope, PatchSource, RuntimePatch, SkillRef,
    StringOrNumber, ToolContext, ToolDiscovery, ToolPolicy,
};
pub use tool::{
    PermissionBehavior, PermissionRule, PermissionUpdate, ProgressKind, ToolDisplay, ToolProgress,
    Usage,
};

use super::content::{ModelMessage, Priority};
use super::error::ProtocolError;
use super::fields;
use super::json::{JsonObject, to_object};
use super::strict_json::decode_exact;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ResultSubtype {
    Success,
    Error,
}

/// One agent stream message: the `data` of a `session.stream` event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum StreamMessage {
    TurnStart {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::signed_int")]
        turn: i64,
    },
    TurnEnd {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::signed_int")]
        turn: i64,
    },
    TurnInterrupted {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        input_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        request_id: String,
        #[serde(deserialize_with = "fields::signed_int")]
        turn: i64,
    },
    /// A steering input was applied; `priority` is `now` or `next`.
    InputApplied {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        input_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        request_id: String,
        #[serde(deserialize_with = "steer_priority")]
        priority: Priority,
        #[serde(deserialize_with = "fields::signed_int")]
        turn: i64,
    },
    /// An assistant text chunk.
    Content {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        delta: String,
    },
    Thinking {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        delta: String,
    },
    ToolUse {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        id: String,
        name: String,
        input: Value,
    },
    ToolProgress {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        id: String,
        name: String,
        progress: ToolProgress,
    },
    ToolMessage {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        id: String,
        name: String,
        content: ToolDisplay,
    },
    ToolRuntimePatch {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        id: String,
        name: String,
        patch: RuntimePatch,
    },
    ToolContextPatch {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        id: String,
        name: String,
        patch: ContextPatch,
    },
    ToolNewMessages {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        id: String,
        name: String,
        messages: Vec<ModelMessage>,
    },
    ToolPermissionUpdates {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        id: String,
        name: String,
        updates: Vec<PermissionUpdate>,
    },
    ToolResult {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        #[serde(deserialize_with = "fields::non_empty")]
        id: String,
        name: String,
        output: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        display: Option<ToolDisplay>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    Usage {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        usage: Usage,
    },
    /// The terminal event of a request: the recovery boundary of §7.
    Result {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        subtype: ResultSubtype,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The executor's pump failed.
    Error {
        #[serde(deserialize_with = "fields::non_empty")]
        session_id: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
}

/// `now` or `next`: `later` never steers a running request.
fn steer_priority<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Priority, D::Error> {
    match Priority::deserialize(deserializer)? {
        Priority::Later => Err(D::Error::custom("priority must be now or next")),
        priority => Ok(priority),
    }
}

impl StreamMessage {
    /// The session the message belongs to.
    pub fn session_id(&self) -> &str {
        match self {
            StreamMessage::TurnStart { session_id, .. }
            | StreamMessage::TurnEnd { session_id, .. }
            | StreamMessage::TurnInterrupted { session_id, .. }
            | StreamMessage::InputApplied { session_id, .. }
            | StreamMessage::Content { session_id, .. }
            | StreamMessage::Thinking { session_id, .. }
            | StreamMessage::ToolUse { session_id, .. }
            | StreamMessage::ToolProgress { session_id, .. }
            | StreamMessage::ToolMessage { session_id, .. }
            | StreamMessage::ToolRuntimePatch { session_id, .. }
            | StreamMessage::ToolContextPatch { session_id, .. }
            | StreamMessage::ToolNewMessages { session_id, .. }
            | StreamMessage::ToolPermissionUpdates { session_id, .. }
            | StreamMessage::ToolResult { session_id, .. }
            | StreamMessage::Usage { session_id, .. }
            | StreamMessage::Result { session_id, .. }
            | StreamMessage::Error { session_id, .. } => session_id,
        }
    }

    /// The wire `type`.
    pub fn message_type(&self) -> &'static str {
        match self {
            StreamMessage::TurnStart { .. } => "turn_start",
            StreamMessage::TurnEnd { .. } => "turn_end",
            StreamMessage::TurnInterrupted { .. } => "turn_interrupted",
            StreamMessage::InputApplied { .. } => "input_applied",
            StreamMessage::Content { .. } => "content",
            StreamMessage::Thinking { .. } => "thinking",
            StreamMessage::ToolUse { .. } => "tool_use",
            StreamMessage::ToolProgress { .. } => "tool_progress",
            StreamMessage::ToolMessage { .. } => "tool_message",
            StreamMessage::ToolRuntimePatch { .. } => "tool_runtime_patch",
            StreamMessage::ToolContextPatch { .. } => "tool_context_patch",
            StreamMessage::ToolNewMessages { .. } => "tool_new_messages",
            StreamMessage::ToolPermissionUpdates { .. } => "tool_permission_updates",
            StreamMessage::ToolResult { .. } => "tool_result",
            StreamMessage::Usage { .. } => "usage",
            StreamMessage::Result { .. } => "result",
            StreamMessage::Error { .. } => "error",
        }
    }

    /// The message's own request id, which the event envelope's `requestId` takes over
    /// (docs/protocol.md §6.1); other messages take the executor's active request.
    pub fn own_request_id(&self) -> Option<&str> {
        match self {
            StreamMessage::TurnInterrupted { request_id, .. }
            | StreamMessage::InputApplied { request_id, .. } => Some(request_id),
            _ => None,
        }
    }

    /// Whether this is a "completed request event" (`type: "result"`).
    pub fn is_request_terminal(&self) -> bool {
        matches!(self, StreamMessage::Result { .. })
    }

    /// The event `data` object.
    pub fn to_data(&self) -> JsonObject {
        to_object(self)
    }

    /// Strictly reads an event `data` object.
    pub fn from_data(data: &JsonObject) -> Result<StreamMessage, ProtocolError> {
        decode_exact(Value::Object(data.clone())).map_err(|error| {
            ProtocolError::invalid_event(format!("Stream event is invalid: {error}"))
        })
    }

    /// A text chunk.
    pub fn content(session_id: impl Into<String>, delta: impl Into<String>) -> StreamMessage {
        StreamMessage::Content {
            session_id: session_id.into(),
            delta: delta.into(),
        }
    }

    /// A successful end of request.
    pub fn success(session_id: impl Into<String>) -> StreamMessage {
        StreamMessage::Result {
            session_id: session_id.into(),
            subtype: ResultSubtype::Success,
            content: None,
            error: None,
        }
    }
}

/// Every `session.stream` `type`, in the order of docs/protocol.md §6.2.
pub const STREAM_MESSAGE_TYPES: [&str; 17] = [
    "turn_start",
    "turn_end",
    "turn_interrupted",
    "input_applied",
    "content",
    "thinking",
    "tool_use",
    "tool_progress",
    "tool_message",
    "tool_runtime_patch",
    "tool_context_patch",
    "tool_new_messages",
    "tool_permission_updates",
    "tool_result",
    "usage",
    "result",
    "error",
];

#[cfg(test)]
mod tests;
