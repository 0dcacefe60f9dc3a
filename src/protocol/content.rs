//! Message content shared by commands, results and stream events: user input, model messages and
//! queued inputs (docs/protocol.md §2.1).

use serde::{Deserialize, Serialize};

use super::fields;
use super::json::JsonObject;

/// When a submitted input applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Steer the running request at once.
    Now,
    /// Steer the running request at its next turn.
    Next,
    /// Queue as a new request after the running one.
    Later,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Now => "now",
            Priority::Next => "next",
            Priority::Later => "later",
        }
    }
}

/// `UserMessageContent`: a plain string or a list of parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum UserContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl UserContent {
    /// The bytes a client sent: text and image URLs (a part's provider options as JSON).
    pub fn size(&self) -> usize {
        match self {
            UserContent::Text(text) => text.len(),
            UserContent::Parts(parts) => parts
                .iter()
                .map(|part| match part {
                    ContentPart::Text {
                        text,
                        provider_options,
                    } => {
                        let options = provider_options.as_ref().map(serde_json::to_string);
                        text.len() + options.map_or(0, |json| json.map_or(0, |json| json.len()))
                    }
                    ContentPart::ImageUrl { image_url } => image_url.url.len(),
                })
                .sum(),
        }
    }
}

impl From<String> for UserContent {
    fn from(text: String) -> UserContent {
        UserContent::Text(text)
    }
}

impl From<&str> for UserContent {
    fn from(text: &str) -> UserContent {
        UserContent::Text(text.to_owned())
    }
}

impl From<Vec<ContentPart>> for UserContent {
    fn from(parts: Vec<ContentPart>) -> UserContent {
        UserContent::Parts(parts)
    }
}

/// One part of structured content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", deny_unknown_fields)]
pub enum ContentPart {
    #[serde(rename = "text")]
    Text {
        text: String,
        #[serde(
            default,
            rename = "providerOptions",
            skip_serializing_if = "Option::is_none"
        )]
        provider_options: Option<JsonObject>,
    },
    #[serde(rename = "image_url")]
    ImageUrl { image_url: ImageUrl },
}

/// The `image_url` of an image part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ImageUrl {
    #[serde(deserialize_with = "fields::non_empty")]
    pub url: String,
}

/// An input accepted while a request runs, not yet applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PendingSessionInput {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub input_id: String,
    pub content: UserContent,
    pub priority: Priority,
    #[cfg_attr(feature = "schema", schemars(with = "Option<fields::Identifier>"))]
    #[serde(default, deserialize_with = "fields::opt_identifier")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_request_id: Option<String>,
    /// Epoch milliseconds.
    #[serde(deserialize_with = "fields::int")]
    pub accepted_at: u64,
}

/// Who wrote a model message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A transcript message (the newest stream schema's strict `ModelMessage`). The field spelling is
/// mixed on the wire (`tool_call_id`, but `reasoningContent`), hence the per-field renames. There
/// is no free-form `metadata` bag: what a message belongs to travels in the typed `correlation`,
/// where it came from in `provenance` (stored transcripts of the older shape are converted on read,
/// [`super::message_compat`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ModelMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub role: Role,
    pub content: UserContent,
    #[serde(
        default,
        rename = "reasoningContent",
        skip_serializing_if = "Option::is_none"
    )]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(
        default,
        rename = "modelIdentity",
        skip_serializing_if = "Option::is_none"
    )]
    pub model_identity: Option<ModelIdentity>,
    #[serde(
        default,
        rename = "providerOptions",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_options: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation: Option<Correlation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<Telemetry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<JsonObject>,
}

impl ModelMessage {
    /// A message with only a role and content.
    pub fn new(role: Role, content: impl Into<UserContent>) -> ModelMessage {
        ModelMessage {
            id: None,
            role,
            content: content.into(),
            reasoning_content: None,
            tool_call_id: None,
            name: None,
            tool_calls: None,
            model_identity: None,
            provider_options: None,
            provenance: None,
            correlation: None,
            telemetry: None,
            extensions: None,
        }
    }
}

/// Which submitted input, applied by which request, a message records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Correlation {
    #[serde(deserialize_with = "super::fields::non_empty")]
    pub input_id: String,
    #[serde(deserialize_with = "super::fields::non_empty")]
    pub request_id: String,
}

/// Where a message that no user or model wrote came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub source: ProvenanceSource,
}

/// `provenance.source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ProvenanceSource {
    /// Injected from a catalog (skills, instructions).
    Catalog,
    /// Added by a tool (`tool_new_messages`).
    ToolInjection,
    /// The summary a compaction wrote.
    CompactionSummary,
}

impl ProvenanceSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ProvenanceSource::Catalog => "catalog",
            ProvenanceSource::ToolInjection => "tool_injection",
            ProvenanceSource::CompactionSummary => "compaction_summary",
        }
    }

    pub fn parse(text: &str) -> Option<ProvenanceSource> {
        [
            ProvenanceSource::Catalog,
            ProvenanceSource::ToolInjection,
            ProvenanceSource::CompactionSummary,
        ]
        .into_iter()
        .find(|source| source.as_str() == text)
    }
}

/// What producing a message cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TelemetryUsage>,
}

/// `telemetry.usage`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TelemetryUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A tool call an assistant message requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    #[serde(deserialize_with = "super::fields::non_empty")]
    pub id: String,
    #[serde(rename = "type")]
    pub call_type: FunctionType,
    pub function: FunctionCall,
}

/// The only tool-call type: `"function"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum FunctionType {
    #[default]
    #[serde(rename = "function")]
    Function,
}

/// The function a tool call invokes; `arguments` is JSON text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// Which model wrote an assistant message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ModelIdentity {
    pub provider: String,
    pub api: String,
    pub model: String,
}
