//! Command results as JSON objects: what `dispatch` and `read` build before the pipeline stores
//! and answers them. A result that does not serialise to an object is an internal failure whose
//! effect is uncertain (the command may have run).

use agent_runtime::protocol::{JsonObject, ProtocolError};
use serde::Serialize;
use serde_json::Value;

pub(crate) fn to_value<T: Serialize>(value: &T) -> Result<Value, ProtocolError> {
    serde_json::to_value(value).map_err(|error| {
        tracing::error!(error = %error, "serialising a result failed");
        ProtocolError::command_effect_uncertain()
    })
}

pub(crate) fn object(value: Value) -> Result<JsonObject, ProtocolError> {
    match value {
        Value::Object(map) => Ok(map),
        _ => {
            tracing::error!("a command result was not a JSON object");
            Err(ProtocolError::command_effect_uncertain())
        }
    }
}
