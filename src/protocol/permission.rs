//! `permission.requested` event data (docs/protocol.md §6.3).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ProtocolError;
use super::fields;
use super::json::{JsonObject, to_object};
use super::strict_json::decode_exact;

/// A tool asks the client for approval. Resolve it with `permission.resolve`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermissionRequestedData {
    #[cfg_attr(feature = "schema", schemars(with = "fields::Identifier"))]
    #[serde(deserialize_with = "fields::identifier")]
    pub permission_request_id: String,
    #[serde(default = "default_tool_name")]
    pub tool_name: String,
    /// The tool's arguments.
    #[serde(default)]
    pub input: JsonObject,
    #[serde(default = "default_title")]
    pub title: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub affected_paths: Vec<String>,
    #[serde(default)]
    pub risks: Vec<String>,
}

pub const DEFAULT_TOOL_NAME: &str = "unknown";
pub const DEFAULT_PERMISSION_TITLE: &str = "Permission required";

fn default_tool_name() -> String {
    DEFAULT_TOOL_NAME.to_owned()
}

fn default_title() -> String {
    DEFAULT_PERMISSION_TITLE.to_owned()
}

impl PermissionRequestedData {
    /// A request with every defaulted field at its default.
    pub fn new(
        permission_request_id: impl Into<String>,
        message: impl Into<String>,
    ) -> PermissionRequestedData {
        PermissionRequestedData {
            permission_request_id: permission_request_id.into(),
            tool_name: default_tool_name(),
            input: JsonObject::new(),
            title: default_title(),
            message: message.into(),
            kind: None,
            affected_paths: Vec::new(),
            risks: Vec::new(),
        }
    }

    /// The event `data` object; defaulted fields are always written out.
    pub fn to_data(&self) -> JsonObject {
        to_object(self)
    }

    /// Strictly reads an event `data` object. The schema's defaults are filled in first, so that a
    /// producer omitting e.g. `risks` is accepted while any other difference is not.
    pub fn from_data(data: &JsonObject) -> Result<PermissionRequestedData, ProtocolError> {
        let mut filled = data.clone();
        let defaults: [(&str, Value); 5] = [
            ("toolName", DEFAULT_TOOL_NAME.into()),
            ("input", Value::Object(JsonObject::new())),
            ("title", DEFAULT_PERMISSION_TITLE.into()),
            ("affectedPaths", Value::Array(Vec::new())),
            ("risks", Value::Array(Vec::new())),
        ];
        for (key, value) in defaults {
            filled.entry(key).or_insert(value);
        }
        decode_exact(Value::Object(filled)).map_err(|error| {
            ProtocolError::invalid_event(format!("Permission request event is invalid: {error}"))
        })
    }
}
