//! `POST {base}/commands` (docs/protocol.md §2.0 steps 1-2, then the pipeline).

use std::sync::Arc;

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::error::pseudo_command_id;
use agent_runtime::protocol::{ProtocolError, parse_command};
use agent_runtime::telemetry::{LimitKind, LimitMetric, TraceContext, best_effort};
use axum::Extension;
use axum::body::{Body, BodyDataStream};
use axum::extract::State;
use axum::http::{HeaderMap, Method, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;

use super::{ClientAddr, Route, authenticate, not_found};
use crate::pipeline::execute;
use crate::response::{command_response, failure_response};
use crate::state::AppState;

/// Response header on a command answered from its stored result (an idempotent replay).
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

// Stays whole: the route's steps in the order of docs/protocol.md §2.0 (authenticate, read the
// body, parse, run, answer).
pub async fn commands(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    body: Body,
) -> Response {
    let client = ClientAddr::of(client);
    if method != Method::POST {
        return not_found(&state, &headers, client);
    }
    let principal = match authenticate(&state, &headers, client, Route::Commands) {
        Ok(principal) => principal,
        Err(response) => return *response,
    };

    // One deadline for the whole request, body included; never for SSE (another route).
    let deadline = tokio::time::Instant::now() + state.config.request_timeout;
    let bytes = match read_request_body(&state, &headers, body, deadline).await {
        Ok(bytes) => bytes,
        Err(response) => return *response,
    };
    let command = match parse_command(&bytes) {
        Ok(command) => command,
        Err(error) => return invalid(&error),
    };
    if state.lifecycle.is_draining() {
        // Nothing was claimed: another instance (or this one, restarted) can run it.
        return failure_response(&command.command_id, &ProtocolError::shutting_down(), true);
    }

    // The client's trace, when it sent one (W3C trace context); the pipeline's command span
    // continues it.
    let trace = client_trace(&headers);
    let command_id = command.command_id.clone();
    let context = CommandContext {
        principal,
        command_id: command.command_id.clone(),
        trace,
        // Set by the pipeline once the command holds its receipt.
        execution_id: None,
        chosen_session_id: None,
    };
    // Past the deadline the client gets a retryable answer; a sealed command still runs to its
    // end in its own task (the pipeline's contract), so a retry with the same commandId gets
    // its stored result, and an unsealed claim is released for the retry.
    match tokio::time::timeout_at(deadline, execute(&state, context, command)).await {
        Ok(answer) => {
            let replayed = answer.is_replay();
            let mut response = command_response(answer);
            if replayed {
                // The body is the stored result, verbatim; the header (outside the body shapes
                // the reference client validates) says it is a replay (reliability IDEM-01).
                response.headers_mut().insert(
                    IDEMPOTENT_REPLAYED,
                    axum::http::HeaderValue::from_static("true"),
                );
            }
            response
        }
        Err(_) => {
            limit_hit(&state, LimitKind::RequestTimeout);
            failure_response(&command_id, &ProtocolError::request_timed_out(), true)
        }
    }
}

/// A request's body, whole, by `deadline` and at most `max_request_bytes`; the error is the
/// answer (`413` past the limit, `400` unreadable, `408` late). Shared with the other routes that
/// take a body (AG-UI, A2A).
pub(crate) async fn read_request_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    deadline: tokio::time::Instant,
) -> Result<Bytes, Box<Response>> {
    let limit = state.config.max_request_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let mut frames = body.into_data_stream();
    if let Some(length) = declared.filter(|length| *length > limit as u64) {
        // A client that waits for `100 Continue` has sent nothing: answer at once.
        let expects_continue = headers.contains_key(header::EXPECT);
        if !expects_continue && length <= DRAIN_MAX_BYTES as u64 {
            drain(&mut frames, deadline).await;
        }
        return Err(Box::new(too_large(state)));
    }
    match tokio::time::timeout_at(deadline, read_body(&mut frames, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(BodyFailure::TooLarge)) => {
            drain(&mut frames, deadline).await;
            Err(Box::new(too_large(state)))
        }
        Ok(Err(BodyFailure::Unreadable)) => {
            Err(Box::new(invalid(&ProtocolError::body_unreadable())))
        }
        Err(_) => {
            limit_hit(state, LimitKind::RequestTimeout);
            Err(Box::new(invalid(&ProtocolError::body_timed_out())))
        }
    }
}

/// The client's W3C trace context, when it sent one: the command spans continue it.
pub(crate) fn client_trace(headers: &HeaderMap) -> Option<TraceContext> {
    let traceparent = headers.get("traceparent")?.to_str().ok()?;
    let tracestate = headers
        .get("tracestate")
        .and_then(|value| value.to_str().ok());
    TraceContext::parse(traceparent, tracestate)
}

/// Why a command body was not read whole.
enum BodyFailure {
    /// It went past `max_request_bytes`: 413.
    TooLarge,
    /// Its framing was broken (a malformed chunk) or the connection ended inside it: 400, the
    /// body could not be read, which says nothing about its size.
    Unreadable,
}

/// The body, at most `limit` bytes of it, without buffering more than that.
async fn read_body(frames: &mut BodyDataStream, limit: usize) -> Result<Bytes, BodyFailure> {
    let mut collected = BytesMut::new();
    while let Some(frame) = frames.next().await {
        let data = frame.map_err(|_| BodyFailure::Unreadable)?;
        if collected.len().saturating_add(data.len()) > limit {
            return Err(BodyFailure::TooLarge);
        }
        collected.extend_from_slice(&data);
    }
    Ok(collected.freeze())
}

/// How much of a too-large body is read and thrown away before the 413. A client that writes its
/// whole body before reading (Python's `http.client`, many SDKs) would otherwise meet a reset
/// connection instead of the answer; past this much it does, so a huge upload costs bounded work.
const DRAIN_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Reads and discards the rest of a body, at most [`DRAIN_MAX_BYTES`] and until `deadline`.
async fn drain(frames: &mut BodyDataStream, deadline: tokio::time::Instant) {
    let discard = async {
        let mut read = 0usize;
        while let Some(Ok(data)) = frames.next().await {
            read = read.saturating_add(data.len());
            if read > DRAIN_MAX_BYTES {
                return;
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, discard).await;
}

/// `413`, and the connection closes after it: whatever of the body was not drained is not read.
fn too_large(state: &AppState) -> Response {
    limit_hit(state, LimitKind::BodyTooLarge);
    let mut response = invalid(&ProtocolError::body_too_large());
    response.headers_mut().insert(
        header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

fn limit_hit(state: &AppState, limit: LimitKind) {
    best_effort(|| state.telemetry.record_limit(&LimitMetric { limit }));
}

fn invalid(error: &ProtocolError) -> Response {
    failure_response(pseudo_command_id::INVALID, error, true)
}
