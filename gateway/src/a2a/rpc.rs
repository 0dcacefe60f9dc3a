//! The A2A 1.0 JSON-RPC binding's envelope (docs/protocols.md §2.1): requests, results, and
//! errors with the specification's codes and a `google.rpc.ErrorInfo` detail.

use agent_runtime::protocol::{ErrorCode, ProtocolError};
use serde_json::{Value, json};

/// A JSON-RPC error: its code, message and `ErrorInfo` reason.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub reason: &'static str,
    /// More of the error, in the `ErrorInfo`'s `metadata`.
    pub metadata: Option<Value>,
}

impl RpcError {
    fn new(code: i64, reason: &'static str, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            reason,
            metadata: None,
        }
    }

    pub fn parse_error() -> RpcError {
        RpcError::new(-32700, "PARSE_ERROR", "The body is not JSON")
    }

    pub fn invalid_request(message: impl Into<String>) -> RpcError {
        RpcError::new(-32600, "INVALID_REQUEST", message)
    }

    pub fn method_not_found(method: &str) -> RpcError {
        let method = shown(method);
        RpcError::new(-32601, "METHOD_NOT_FOUND", format!("No method {method:?}"))
    }

    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(-32602, "INVALID_PARAMS", message)
    }

    pub fn task_not_found() -> RpcError {
        RpcError::new(-32001, "TASK_NOT_FOUND", "Task not found")
    }

    pub fn task_not_cancelable() -> RpcError {
        RpcError::new(
            -32002,
            "TASK_NOT_CANCELABLE",
            "The task has ended and cannot be canceled",
        )
    }

    pub fn push_not_supported() -> RpcError {
        RpcError::new(
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            "Push notifications are not supported (this server's webhooks are configured by the operator)",
        )
    }

    pub fn unsupported(message: impl Into<String>) -> RpcError {
        RpcError::new(-32004, "UNSUPPORTED_OPERATION", message)
    }

    pub fn content_not_supported() -> RpcError {
        RpcError::new(
            -32005,
            "CONTENT_TYPE_NOT_SUPPORTED",
            "The message has no text, data or image part",
        )
    }

    pub fn version_not_supported(asked: &str) -> RpcError {
        let asked = shown(asked);
        let mut error = RpcError::new(
            -32009,
            "VERSION_NOT_SUPPORTED",
            format!("A2A version {asked:?} is not supported; send the header A2A-Version: 1.0"),
        );
        error.metadata = Some(json!({"supportedVersions": "1.0"}));
        error
    }

    /// A refusal of the server's own protocol (scopes, admission, a missing session), kept with
    /// its code: a missing session or approval is the task the client named not being found.
    pub fn from_protocol(error: &ProtocolError) -> RpcError {
        let (code, reason) = match error.code {
            ErrorCode::SessionNotFound | ErrorCode::PermissionNotFound => {
                return RpcError::task_not_found();
            }
            ErrorCode::InvalidCommand => (-32602, "INVALID_PARAMS"),
            ErrorCode::InternalError => (-32603, "INTERNAL_ERROR"),
            other => (-32000, other.as_str()),
        };
        let mut rpc = RpcError::new(code, reason, error.message.clone());
        let mut metadata = json!({"retryable": error.retryable.to_string()});
        if let Some(after) = error.retry_after_ms {
            metadata["retryAfterMs"] = Value::String(after.to_string());
        }
        rpc.metadata = Some(metadata);
        rpc
    }

    /// The `error` member of a JSON-RPC response.
    pub fn to_json(&self) -> Value {
        let mut info = json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.reason,
            "domain": "a2a-protocol.org",
        });
        if let Some(metadata) = &self.metadata {
            info["metadata"] = metadata.clone();
        }
        json!({"code": self.code, "message": self.message, "data": [info]})
    }
}

/// What a client sent, as an error message repeats it: at most 64 characters.
fn shown(text: &str) -> String {
    const MAX: usize = 64;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// A successful JSON-RPC response.
pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A failed JSON-RPC response.
pub fn error(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()})
}

/// The longest string `id` a request may have: it is repeated on every frame of its answer.
const MAX_ID_BYTES: usize = 128;

/// One JSON-RPC request.
pub struct Request {
    pub id: Value,
    pub method: String,
    pub params: Value,
}

/// Reads a JSON-RPC 2.0 request; the error comes with the id it could read.
pub fn parse(body: &[u8]) -> Result<Request, (Value, RpcError)> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| (Value::Null, RpcError::parse_error()))?;
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let id_ok = match &id {
        Value::String(id) => id.len() <= MAX_ID_BYTES,
        Value::Number(_) => true,
        _ => false,
    };
    if !id_ok {
        // Repeated on every answer and streamed frame: an id that is not one is not echoed.
        let message = format!(
            "Not a JSON-RPC 2.0 request with an id (a number, or a string of at most {MAX_ID_BYTES} bytes)"
        );
        return Err((Value::Null, RpcError::invalid_request(message)));
    }
    if value.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, RpcError::invalid_request("Not a JSON-RPC 2.0 request")));
    }
    let Some(method) = value.get("method").and_then(Value::as_str) else {
        return Err((id, RpcError::invalid_request("The request has no method")));
    };
    let params = value.get("params").cloned().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return Err((id, RpcError::invalid_params("params must be an object")));
    }
    Ok(Request {
        id,
        method: method.to_owned(),
        params,
    })
}
