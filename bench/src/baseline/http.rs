//! The baseline's two routes, shaped like the product's (`{base}/commands`,
//! `{base}/sessions/{id}/events`), and its SSE body: one chunk per event, a heartbeat comment
//! after silence, exactly like the gateway's.

use std::collections::HashMap;
use std::sync::Arc;

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::result::{
    InitializeResult, ReadSessionResult, SessionResult, SubmitOutcome, SubmitResult,
};
use agent_runtime::protocol::{
    CommandResult, ErrorCode, ProtocolError, RecoveryObject, SessionDescriptor, SessionStatus,
};
use agent_runtime::timefmt::format_iso_ms;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State as Extract};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use futures_util::stream;
use serde_json::Value;

use super::emulate::{now_ms, start_request};
use super::{Log, State};

pub(crate) const BASE_PATH: &str = "/v1/agent";
const HEARTBEAT_FRAME: &str = ": heartbeat\n\n";
/// Frames taken from the log per read while catching up (the gateway's page size).
const PAGE: usize = 100;

pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route(&format!("{BASE_PATH}/commands"), post(commands))
        .route(
            &format!("{BASE_PATH}/sessions/{{session_id}}/events"),
            get(events),
        )
        .with_state(state)
}

async fn commands(Extract(state): Extract<Arc<State>>, body: Bytes) -> Response {
    let Ok(command) = serde_json::from_slice::<Value>(&body) else {
        return json(
            StatusCode::BAD_REQUEST,
            &serde_json::json!({"ok": false, "error": {"code": "INVALID_COMMAND", "message": "not JSON"}}),
        );
    };
    let command_id = command["commandId"]
        .as_str()
        .unwrap_or("unknown")
        .to_owned();
    let data = &command["data"];
    let result = answer(
        &state,
        &command_id,
        command["type"].as_str().unwrap_or(""),
        data,
    );
    let status = StatusCode::from_u16(result.http_status()).unwrap_or(StatusCode::OK);
    json(status, &result.to_value())
}

fn answer(state: &State, command_id: &str, command_type: &str, data: &Value) -> CommandResult {
    let now = format_iso_ms(now_ms());
    let session_of = |data: &Value| {
        let session_id = data["sessionId"].as_str().unwrap_or("");
        state
            .session(session_id)
            .ok_or_else(|| ProtocolError::new(ErrorCode::SessionNotFound, "Session not found"))
    };
    let descriptor = |session_id: &str| SessionDescriptor {
        session_id: session_id.to_owned(),
        status: SessionStatus::Active,
        created_at: now.clone(),
        updated_at: now.clone(),
        metadata: None,
    };
    match command_type {
        "initialize" => {
            CommandResult::success_with(command_id, &InitializeResult::new(now.clone()))
        }
        "session.create" => {
            let session_id = nanoid();
            state.create(&session_id);
            let session = descriptor(&session_id);
            CommandResult::success_with(command_id, &SessionResult { session })
        }
        "session.read" => match session_of(data) {
            Ok(log) => CommandResult::success_with(
                command_id,
                &ReadSessionResult {
                    session: descriptor(&log.session_id),
                    messages: Vec::new(),
                    pending_inputs: Vec::new(),
                    loaded: true,
                    history_progress: None,
                    recovery: RecoveryObject {
                        session_loaded: true,
                        last_event_sequence: Some(log.last_sequence()),
                        ..RecoveryObject::default()
                    },
                },
            ),
            Err(error) => CommandResult::failure(command_id, error),
        },
        "input.submit" => match session_of(data) {
            Ok(log) => {
                let request_id = nanoid();
                let input = data["input"].as_str().unwrap_or("").to_owned();
                start_request(log, request_id.clone(), input);
                let result = SubmitResult {
                    session_id: data["sessionId"].as_str().unwrap_or("").to_owned(),
                    input_id: nanoid(),
                    outcome: SubmitOutcome::Started { request_id },
                };
                CommandResult::success_with(command_id, &result)
            }
            Err(error) => CommandResult::failure(command_id, error),
        },
        other => CommandResult::failure(
            command_id,
            ProtocolError::new(
                ErrorCode::InvalidCommand,
                format!("the baseline does not serve {other:?}"),
            ),
        ),
    }
}

fn json(status: StatusCode, value: &Value) -> Response {
    let mut response = Response::new(Body::from(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn events(
    Extract(state): Extract<Arc<State>>,
    Path(session_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(log) = state.session(&session_id) else {
        return json(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"ok": false, "commandId": "events", "error": {"code": "SESSION_NOT_FOUND", "message": "Session not found", "retryable": false}}),
        );
    };
    let after: usize = query
        .get("after")
        .and_then(|after| after.parse().ok())
        .unwrap_or(0);
    let follower = Follower {
        log,
        next: after,
        state: Arc::clone(&state),
    };
    let body = stream::unfold(follower, |mut follower| async move {
        let frame = follower.next().await?;
        Some((Ok::<_, std::io::Error>(frame), follower))
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// One SSE connection's position in a session's log.
struct Follower {
    log: Arc<Log>,
    /// Index of the next frame to send.
    next: usize,
    state: Arc<State>,
}

impl Follower {
    /// The frames available now (at most a page, as one chunk), a heartbeat after silence, or
    /// `None` at shutdown.
    async fn next(&mut self) -> Option<Bytes> {
        let mut head = self.log.head.subscribe();
        let idle = tokio::time::sleep(self.state.heartbeat);
        tokio::pin!(idle);
        loop {
            let page = self.log.read(self.next, PAGE);
            if !page.is_empty() {
                self.next += page.len();
                return Some(page.concat().into());
            }
            tokio::select! {
                changed = head.changed() => changed.ok()?,
                () = &mut idle => return Some(Bytes::from_static(HEARTBEAT_FRAME.as_bytes())),
                () = self.state.shutdown.cancelled() => return None,
            }
        }
    }
}
