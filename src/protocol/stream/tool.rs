//! Tool-related pieces of stream messages: progress, display, permission-rule updates, and usage.

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

use crate::protocol::fields;

/// The literal `"progress"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ProgressKind {
    #[default]
    #[serde(rename = "progress")]
    Progress,
}

/// `tool_progress.progress`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolProgress {
    pub kind: ProgressKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Any JSON value.
    #[serde(
        default,
        deserialize_with = "fields::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<Number>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_token: Option<String>,
}

/// `tool_message.content` and `tool_result.display`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolDisplay {
    pub summary: String,
    /// Any JSON value.
    #[serde(
        default,
        deserialize_with = "fields::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub detail: Option<Value>,
}

/// Whether added rules allow or deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum PermissionBehavior {
    Allow,
    Deny,
}

/// One permission rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PermissionRule {
    pub tool_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_content: Option<String>,
}

/// One entry of `tool_permission_updates.updates`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum PermissionUpdate {
    AddRules {
        rules: Vec<PermissionRule>,
        behavior: PermissionBehavior,
    },
    RemoveRules {
        rules: Vec<PermissionRule>,
    },
}

/// `usage.usage`: token counts, all non-negative numbers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    #[serde(deserialize_with = "fields::non_negative")]
    pub input_tokens: Number,
    #[serde(deserialize_with = "fields::non_negative")]
    pub output_tokens: Number,
    #[serde(deserialize_with = "fields::non_negative")]
    pub total_tokens: Number,
    #[serde(deserialize_with = "fields::non_negative")]
    pub max_context_tokens: Number,
    #[serde(
        default,
        deserialize_with = "fields::opt_non_negative",
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_read_input_tokens: Option<Number>,
    #[serde(
        default,
        deserialize_with = "fields::opt_non_negative",
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_miss_input_tokens: Option<Number>,
    #[serde(
        default,
        deserialize_with = "fields::opt_non_negative",
        skip_serializing_if = "Option::is_none"
    )]
    pub billable_input_tokens: Option<Number>,
    #[serde(
        default,
        deserialize_with = "fields::opt_non_negative",
        skip_serializing_if = "Option::is_none"
    )]
    pub reasoning_tokens: Option<Number>,
}
