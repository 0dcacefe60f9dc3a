//! `GET {base}/sessions/{id}/events`: every check answers JSON before the first stream byte
//! (decisions P2, P8), then the SSE stream.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime::ids::is_valid_identifier;
use agent_runtime::protocol::error::pseudo_command_id;
use agent_runtime::protocol::{ProtocolError, Scope};
use agent_runtime::telemetry::{LimitKind, LimitMetric, best_effort};
use axum::Extension;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use tokio_util::sync::CancellationToken;

use super::{ClientAddr, Route, authenticate, not_found};
use crate::auth::Authenticator;
use crate::response::failure_response;
use crate::sse::{ConnectionTelemetry, event_stream, parse_cursor};
use crate::state::AppState;
use crate::store_errors::to_protocol;
use crate::stream_slots::{StreamRefusal, StreamSlot};

// Stays whole: the route's checks in the order of docs/protocol.md §5 (authenticate, scope, cursor,
// stream slot) before the first byte.
pub async fn events(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let client = ClientAddr::of(client);
    if method != Method::GET {
        return not_found(&state, &headers, client);
    }
    let principal = match authenticate(&state, &headers, client, Route::Other) {
        Ok(principal) => principal,
        Err(response) => return *response,
    };
    let fail = |error: ProtocolError| failure_response(pseudo_command_id::EVENTS, &error, false);

    let session_id = match path {
        Ok(Path(session_id)) => session_id,
        Err(_) => return fail(ProtocolError::invalid_session_route_encoding()),
    };
    if !is_valid_identifier(&session_id) {
        return fail(ProtocolError::invalid_session_route_id());
    }
    if let Err(error) = principal.require_scopes(&[Scope::SessionRead]) {
        return fail(error);
    }

    let Some(after) = cursor(query, &headers) else {
        return fail(ProtocolError::invalid_event_cursor());
    };

    if state.lifecycle.is_draining() {
        return fail(ProtocolError::shutting_down());
    }
    let tenant = principal.tenant_id.clone();
    // The slot is taken before the store is touched, so a tenant at its cap costs nothing more,
    // and it lives as long as the stream body (released however the stream ends).
    let slot = match stream_slot(&state, &tenant) {
        Ok(slot) => slot,
        Err(error) => return fail(error),
    };
    match state.store.get_session(&tenant, &session_id).await {
        Ok(Some(_)) => {}
        Ok(None) => return fail(ProtocolError::session_not_found(&session_id)),
        Err(error) => return fail(to_protocol(&error)),
    }
    // Probe the cursor so that a stale or future cursor is answered before any stream byte.
    if let Err(error) = state
        .store
        .read_events(&tenant, &session_id, after, 1)
        .await
    {
        return fail(to_protocol(&error));
    }

    // Followed before the response head goes out, so nothing appended after it is missed.
    state.tails.0.follow(&tenant, &session_id);
    let stop = state.lifecycle.streams_ending().child_token();
    let stop_on_drop = stop.clone().drop_guard();
    if let Some(expiry_ms) = state.auth.credential_expiry_ms(&headers) {
        let remaining = Duration::from_millis(expiry_ms.saturating_sub(state.clock.now_ms()));
        end_with_credential(&stop, remaining, Arc::clone(&state.auth), headers);
    }
    let connection =
        ConnectionTelemetry::open(state.telemetry.clone(), state.clock.clone(), &tenant);
    let stream = event_stream(
        state.tails.clone(),
        state.tails.clone(),
        tenant,
        session_id,
        after,
        state.config.heartbeat_interval,
        stop,
        state.lifecycle.streams_ending().clone(),
        connection,
    );
    // Dropped with the body: frees the slot and wakes the expiry timer so it does not linger.
    let ended = stop_on_drop;
    let stream = futures_util::StreamExt::map(stream, move |frame| {
        let _held = (&slot, &ended);
        frame
    });
    sse_response(Body::from_stream(stream))
}

/// The cursor to resume after. The query parameter wins, even when empty (decision P8);
/// repeated, it is refused like a repeated `Last-Event-ID` (which one did the client mean?).
pub(crate) fn cursor(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: &HeaderMap,
) -> Option<u64> {
    let Ok(Query(query)) = query else {
        return None;
    };
    let mut afters = query
        .into_iter()
        .filter_map(|(name, value)| (name == "after").then_some(value));
    let raw_cursor = match (afters.next(), afters.next()) {
        (Some(_), Some(_)) => None,
        (Some(after), None) => Some(after),
        (None, _) => last_event_id(headers),
    };
    raw_cursor.as_deref().and_then(parse_cursor)
}

/// A stream slot of `tenant`, or the refusal of a tenant or the process at its cap (counted).
pub(crate) fn stream_slot(state: &AppState, tenant: &str) -> Result<StreamSlot, ProtocolError> {
    let refusal = match state.streams.acquire(tenant) {
        Ok(slot) => return Ok(slot),
        Err(refusal) => refusal,
    };
    let (error, limit) = match refusal {
        StreamRefusal::Tenant => (
            ProtocolError::tenant_stream_limit(),
            LimitKind::SseTenantCap,
        ),
        StreamRefusal::Process => (
            ProtocolError::server_stream_limit(),
            LimitKind::SseProcessCap,
        ),
    };
    best_effort(|| state.telemetry.record_limit(&LimitMetric { limit }));
    Err(error)
}

/// The `200` that starts an SSE stream: no caching, no proxy buffering.
pub(crate) fn sse_response(body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The `Last-Event-ID` cursor: "0" when absent; `None` (an invalid cursor, never a silent
/// replay from the start) when it is repeated or is not visible ASCII.
fn last_event_id(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all("last-event-id").iter();
    match (values.next(), values.next()) {
        (None, _) => Some("0".to_owned()),
        (Some(value), None) => value.to_str().ok().map(str::to_owned),
        (Some(_), Some(_)) => None,
    }
}

/// How often a stream whose credential can be revoked (its signing key removed) looks whether
/// the keys changed; the key file itself is checked at most once per `auth.jwt.key_refresh`.
const KEY_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Ends the stream (cleanly, as on a drain) once its credential has expired, or once the keys
/// changed and no longer accept it (catalogue AUTH-13): the client's reconnection must
/// authenticate again.
pub(crate) fn end_with_credential(
    stop: &CancellationToken,
    remaining: Duration,
    auth: Arc<dyn Authenticator>,
    headers: HeaderMap,
) {
    let stop = stop.clone();
    tokio::spawn(async move {
        let expired = tokio::time::sleep(remaining);
        tokio::pin!(expired);
        let mut generation = auth.key_generation();
        let mut check = tokio::time::interval(KEY_CHECK_INTERVAL);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut expired => return stop.cancel(),
                () = stop.cancelled() => return,
                _ = check.tick(), if generation.is_some() => {
                    let now = auth.key_generation();
                    if now != generation {
                        generation = now;
                        if !matches!(auth.authenticate(&headers), Ok(Some(_))) {
                            return stop.cancel();
                        }
                    }
                }
            }
        }
    });
}
