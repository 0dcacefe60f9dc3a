//! Command results (docs/protocol.md §1.3): the JSON body of every `POST …/commands` answer.
//!
//! A success carries an arbitrary JSON object as `data`; [`data`] holds the typed shape of each
//! command's `data`, convertible through [`ResultData`]. Parsing a result is what a *client* does,
//! so a malformed result is `INTERNAL_ERROR`, as in the reference client (§11.3).

pub(crate) mod data;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::session_commands::SuccessData;
pub use data::{
    AbortResult, Features, InitializeResult, ListSessionsResult, ReadSessionResult,
    ResolvePermissionResult, ResultData, SessionResult, SubmitOutcome, SubmitResult, SubmitStatus,
    Transport,
};

use super::error::ProtocolError;
use super::fields;
use super::json::{JsonObject, ProtocolVersion, to_object};
use super::strict_json::{decode_exact, parse_strict};

/// The answer to one command.
#[derive(Clone, Debug, PartialEq)]
pub enum CommandResult {
    Success {
        command_id: String,
        data: JsonObject,
    },
    Failure {
        command_id: String,
        error: ProtocolError,
    },
}

impl CommandResult {
    pub fn success(command_id: impl Into<String>, data: JsonObject) -> CommandResult {
        CommandResult::Success {
            command_id: command_id.into(),
            data,
        }
    }

    /// A success whose `data` is a typed result.
    pub fn success_with<T: ResultData>(command_id: impl Into<String>, data: &T) -> CommandResult {
        CommandResult::success(command_id, data.to_data())
    }

    /// A failure. Use a [`super::error::pseudo_command_id`] when the real commandId is unknown.
    pub fn failure(command_id: impl Into<String>, error: ProtocolError) -> CommandResult {
        CommandResult::Failure {
            command_id: command_id.into(),
            error,
        }
    }

    pub fn command_id(&self) -> &str {
        match self {
            CommandResult::Success { command_id, .. }
            | CommandResult::Failure { command_id, .. } => command_id,
        }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, CommandResult::Success { .. })
    }

    pub fn error(&self) -> Option<&ProtocolError> {
        match self {
            CommandResult::Success { .. } => None,
            CommandResult::Failure { error, .. } => Some(error),
        }
    }

    /// 200 for a success; the error's status otherwise (docs/protocol.md §2.0).
    pub fn http_status(&self) -> u16 {
        self.error().map_or(200, ProtocolError::http_status)
    }

    /// The `retry-after` header in seconds, when the failure carries a positive `retryAfterMs`.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.error().and_then(ProtocolError::retry_after_seconds)
    }

    /// The wire JSON.
    pub fn to_value(&self) -> Value {
        self.clone().into_value()
    }

    /// The wire JSON, without copying the result first.
    pub fn into_value(self) -> Value {
        Value::Object(to_object(&ResultWire::from(self)))
    }

    /// Strictly reads a parsed result body.
    pub fn from_value(value: Value) -> Result<CommandResult, ProtocolError> {
        decode_exact::<ResultWire>(value)
            .map(CommandResult::from)
            .map_err(|_| ProtocolError::invalid_result())
    }
}

impl Serialize for CommandResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ResultWire::from(self.clone()).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CommandResult {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        CommandResult::from_value(value).map_err(serde::de::Error::custom)
    }
}

/// A success as stored in the command's receipt and sent: `{protocolVersion, commandId, ok,
/// data}`. One function for the gateway and for an executor that completes the receipt in the
/// write that takes effect, so both store the same value.
pub fn success_value(command_id: &str, data: JsonObject) -> Value {
    CommandResult::success(command_id, data).into_value()
}

/// Parses a command result body strictly (bad JSON and schema failures alike are
/// `INTERNAL_ERROR`, see the module docs).
pub fn parse_command_result(body: &[u8]) -> Result<CommandResult, ProtocolError> {
    let value = parse_strict(body).map_err(|_| ProtocolError::invalid_result())?;
    CommandResult::from_value(value)
}

/// The two wire shapes, told apart by the `ok` literal.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ResultWire {
    Success(SuccessWire),
    Failure(FailureWire),
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SuccessWire {
    protocol_version: ProtocolVersion,
    #[serde(deserialize_with = "fields::identifier")]
    command_id: String,
    #[serde(deserialize_with = "fields::literal_true")]
    ok: bool,
    data: JsonObject,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FailureWire {
    protocol_version: ProtocolVersion,
    #[serde(deserialize_with = "fields::identifier")]
    command_id: String,
    #[serde(deserialize_with = "fields::literal_false")]
    ok: bool,
    error: ProtocolError,
}

impl From<CommandResult> for ResultWire {
    fn from(result: CommandResult) -> ResultWire {
        match result {
            CommandResult::Success { command_id, data } => ResultWire::Success(SuccessWire {
                protocol_version: ProtocolVersion,
                command_id,
                ok: true,
                data,
            }),
            CommandResult::Failure { command_id, error } => ResultWire::Failure(FailureWire {
                protocol_version: ProtocolVersion,
                command_id,
                ok: false,
                error,
            }),
        }
    }
}

impl From<ResultWire> for CommandResult {
    fn from(wire: ResultWire) -> CommandResult {
        match wire {
            ResultWire::Success(SuccessWire {
                command_id, data, ..
            }) => CommandResult::Success { command_id, data },
            ResultWire::Failure(FailureWire {
                command_id, error, ..
            }) => CommandResult::Failure { command_id, error },
        }
    }
}

#[cfg(test)]
mod tests;
