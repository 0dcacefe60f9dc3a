//! Commands: the `POST …/commands` body (docs/protocol.md §1.2, §2).
//!
//! [`parse_command`] is the one way in. It answers exactly the three outcomes the protocol knows:
//! bad JSON, an unsupported `protocolVersion` (decision P7), and "Command validation failed" for
//! every other schema failure. A parsed [`Command`] serialises back to exactly the wire shape, which
//! is also what its fingerprint hashes.

// The table first: `names` expands it.
#[macro_use]
mod table;
pub(crate) mod data;
pub(crate) mod names;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub use crate::session_commands::{CommandKind, SessionCommand, calls};
// Every command's data type, by the name the command table gives it.
pub use data::*;
pub use names::{COMMAND_TYPES, CommandName};

use super::canonical::{canonical_json, sha256_hex};
use super::error::ProtocolError;
use super::json::{PROTOCOL_VERSION, to_object};
use super::principal::Scope;
use super::strict_json::{StrictJsonError, decode_exact, parse_strict};

impl CommandKind {
    /// The wire `type` string.
    pub fn command_type(&self) -> &'static str {
        self.name().as_str()
    }

    /// A command that changes nothing (`initialize`, `session.read`, `session.list`): safe to run
    /// again, so its result is never stored under its command id.
    pub fn is_read_only(&self) -> bool {
        self.name().is_read_only()
    }

    /// Every scope the command needs (docs/protocol.md §2.1); `session:admin` satisfies all.
    pub fn required_scopes(&self) -> &'static [Scope] {
        self.name().required_scopes()
    }
}

/// A parsed command: `{protocolVersion: 1, commandId, type, data}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    /// Client-chosen idempotency key, scoped per tenant.
    pub command_id: String,
    pub kind: CommandKind,
}

impl Command {
    pub fn new(command_id: impl Into<String>, kind: CommandKind) -> Command {
        Command {
            command_id: command_id.into(),
            kind,
        }
    }

    pub fn command_type(&self) -> &'static str {
        self.kind.command_type()
    }

    pub fn session_id(&self) -> Option<&str> {
        self.kind.session_id()
    }

    pub fn required_scopes(&self) -> &'static [Scope] {
        self.kind.required_scopes()
    }

    /// See [`command_fingerprint`].
    pub fn fingerprint(&self) -> String {
        command_fingerprint(self)
    }

    /// The wire JSON: the envelope keys plus `type` and `data`, absent optionals omitted.
    pub fn to_value(&self) -> Value {
        let mut object = to_object(&self.kind);
        object.insert("protocolVersion".to_owned(), PROTOCOL_VERSION.into());
        object.insert("commandId".to_owned(), self.command_id.clone().into());
        Value::Object(object)
    }

    /// Validates an already parsed JSON value. Errors as [`parse_command`], minus bad JSON.
    pub fn from_value(value: Value) -> Result<Command, ProtocolError> {
        let Value::Object(mut object) = value else {
            return Err(ProtocolError::validation_failed());
        };
        // P7: a body that is an object but speaks another protocol version gets its own code, so a
        // future client learns why instead of seeing a generic schema failure.
        match object.remove("protocolVersion") {
            None => return Err(ProtocolError::validation_failed()),
            Some(version) if !is_protocol_version_one(&version) => {
                return Err(ProtocolError::protocol_version_unsupported());
            }
            Some(_) => {}
        }
        let command_id = match object.remove("commandId") {
            Some(Value::String(id)) if crate::ids::is_valid_identifier(&id) => id,
            _ => return Err(ProtocolError::validation_failed()),
        };
        // What remains must be exactly `type` and `data`. Checked here because serde's adjacently
        // tagged enums take a missing `data` as empty content for an all-optional schema, while
        // the protocol requires `data` even when empty.
        let exact_keys =
            object.len() == 2 && object.contains_key("type") && object.contains_key("data");
        if !exact_keys {
            return Err(ProtocolError::validation_failed());
        }
        let kind = decode_exact::<CommandKind>(Value::Object(object))
            .map_err(|_| ProtocolError::validation_failed())?;
        Ok(Command { command_id, kind })
    }
}

/// JavaScript's `=== 1`: the number one, however it is written (`1`, `1.0`, `1e0`).
fn is_protocol_version_one(value: &Value) -> bool {
    value.as_f64() == Some(PROTOCOL_VERSION as f64)
}

/// Parses a command body.
///
/// * not strict JSON (syntax, duplicate keys, non-finite numbers) → `INVALID_COMMAND` "Command
///   body is not valid JSON";
/// * a number that would not be kept exactly → `INVALID_COMMAND` "Command body has a number that
///   cannot be represented exactly";
/// * an object whose `protocolVersion` is present and not the number 1 →
///   `PROTOCOL_VERSION_UNSUPPORTED` (400);
/// * any other schema failure → `INVALID_COMMAND` "Command validation failed".
pub fn parse_command(body: &[u8]) -> Result<Command, ProtocolError> {
    let value = parse_strict(body).map_err(|error| match error {
        StrictJsonError::InexactNumber => ProtocolError::inexact_number(),
        StrictJsonError::Syntax(_) => ProtocolError::invalid_json(),
    })?;
    Command::from_value(value)
}

impl Serialize for Command {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Command::from_value(value).map_err(D::Error::custom)
    }
}

/// Lowercase SHA-256 hex of the canonical JSON of the whole parsed command (`protocolVersion`,
/// `commandId`, `type` and `data`).
pub fn command_fingerprint(command: &Command) -> String {
    sha256_hex(canonical_json(&command.to_value()).as_bytes())
}

#[cfg(test)]
mod tests;
