//! Building command results and their HTTP responses (docs/protocol.md §1.3, §2.0, §4.2).

use agent_runtime::protocol::{ErrorCode, JsonObject, PROTOCOL_VERSION, ProtocolError};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A command result as stored and sent: `{protocolVersion, commandId, ok, data | error}`.
pub fn success_value(command_id: &str, data: JsonObject) -> Value {
    agent_runtime::protocol::success_value(command_id, data)
}

pub fn failure_value(command_id: &str, error: &ProtocolError) -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "commandId": command_id,
        "ok": false,
        "error": error,
    })
}

/// The HTTP status and `retry-after` of a result value, derived from the error code alone (a
/// replayed failure gets the same status as the original).
fn status_of(result: &Value) -> (StatusCode, Option<u64>) {
    let Some(error) = result.get("error") else {
        return (StatusCode::OK, None);
    };
    let code = error
        .get("code")
        .and_then(Value::as_str)
        .and_then(ErrorCode::parse)
        .unwrap_or(ErrorCode::InternalError);
    let retry_after = error
        .get("retryAfterMs")
        .and_then(Value::as_u64)
        .filter(|&ms| ms > 0)
        .map(|ms| ms.div_ceil(1000));
    let status =
        StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, retry_after)
}

/// A JSON response with the protocol's headers.
pub fn json_response(status: StatusCode, body: &Value, retry_after: Option<u64>) -> Response {
    let bytes = serde_json::to_vec(body).expect("JSON values always serialise");
    let mut response = (status, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The response to a command: status from the result's code, `retry-after` when it has a delay.
pub fn command_response(result: &Value) -> Response {
    let (status, retry_after) = status_of(result);
    json_response(status, result, retry_after)
}

/// A failure outside a command's normal execution (authentication, routing, SSE set-up), with a
/// pseudo command id. `retry-after` is only ever sent on the command route (`with_retry_after`),
/// when the failure has a delay.
pub fn failure_response(
    command_id: &str,
    error: &ProtocolError,
    with_retry_after: bool,
) -> Response {
    let status =
        StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let retry_after = if with_retry_after {
        error.retry_after_seconds()
    } else {
        None
    };
    json_response(status, &failure_value(command_id, error), retry_after)
}
