//! `POST {base}/commands` (protocol.md §2.0 steps 1-2, then the pipeline).

use std::sync::Arc;

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::error::pseudo_command_id;
use agent_runtime::protocol::{ProtocolError, parse_command};
use agent_runtime::telemetry::TraceContext;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, header};
use axum::response::Response;

use super::{authenticate, not_found};
use crate::pipeline::execute;
use crate::response::{command_response, failure_response};
use crate::state::AppState;

pub async fn commands(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if method != Method::POST {
        return not_found(&state, &headers);
    }
    let principal = match authenticate(&state, &headers) {
        Ok(principal) => principal,
        Err(response) => return *response,
    };

    let limit = state.config.max_request_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return invalid(&ProtocolError::body_too_large());
    }
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return invalid(&ProtocolError::body_too_large());
    };
    let command = match parse_command(&bytes) {
        Ok(command) => command,
        Err(error) => return invalid(&error),
    };

    // The client's trace, when it sent one (W3C trace context); the pipeline's command span
    // continues it.
    let trace = headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .and_then(|traceparent| {
            let tracestate = headers
                .get("tracestate")
                .and_then(|value| value.to_str().ok());
            TraceContext::parse(traceparent, tracestate)
        });
    let context = CommandContext {
        principal,
        command_id: command.command_id.clone(),
        trace,
    };
    let result = execute(&state, context, command).await;
    command_response(&result)
}

fn invalid(error: &ProtocolError) -> Response {
    failure_response(pseudo_command_id::INVALID, error, true)
}
