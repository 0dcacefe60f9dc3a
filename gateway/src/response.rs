//! HTTP responses of command answers and of failures outside a command (docs/protocol.md §1.3, §2.0,
//! §4.2).

use agent_runtime::protocol::{CommandResult, ProtocolError};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::answer::Answer;

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

/// The response to a command: status from the answer's code, `retry-after` when it has a delay.
pub fn command_response(answer: Answer) -> Response {
    let status =
        StatusCode::from_u16(answer.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let retry_after = answer.retry_after_seconds();
    json_response(status, &answer.into_body(), retry_after)
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
    let body = CommandResult::failure(command_id, error.clone()).into_value();
    json_response(status, &body, retry_after)
}
