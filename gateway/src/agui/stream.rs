//! The SSE body of a projection: the store follower (replay, then the live tail by push) fed to a
//! [`Projector`], one `data:` frame per AG-UI event, LF-framed, `id:` on the last frame of each
//! stored event. Events up to the client's cursor are fed without being sent, so the projector
//! is in the state the first stream was in when it sent them.

use std::fmt::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::protocol::EventType;
use agent_runtime_store::StoreError;
use agent_runtime_store::follow::{Followed, follow};
use axum::body::Body;
use axum::http::HeaderMap;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use super::projection::{Frame, Projector};
use crate::http::events::{end_with_credential, sse_response};
use crate::sse::{ConnectionTelemetry, HEARTBEAT_FRAME, follow_options};
use crate::state::AppState;
use crate::stream_slots::StreamSlot;

/// Where a projected stream starts and what it sends first.
pub struct Plan {
    pub tenant: String,
    pub session: String,
    /// The follower starts after this sequence.
    pub scan_from: u64,
    /// Frames of events up to this sequence are not sent (the client has them).
    pub emit_after: u64,
    /// Sent before anything of the log (a `RUN_STARTED`, a snapshot).
    pub first: Vec<Frame>,
    /// The thread's stream ends with the session's close; a single run with its terminal event.
    pub projector: Projector,
}

/// Renders frames as SSE: `id:` where the frame has one, then its one `data:` line.
pub fn render(frames: &[Frame]) -> Bytes {
    let mut out = String::new();
    for frame in frames {
        if let Some(id) = frame.id {
            let _ = writeln!(out, "id: {id}");
        }
        out.push_str("data: ");
        out.push_str(&frame.event.to_string());
        out.push_str("\n\n");
    }
    Bytes::from(out)
}

struct Pump {
    events: Pin<Box<dyn Stream<Item = Result<Followed, StoreError>> + Send>>,
    projector: Projector,
    emit_after: u64,
    first: Option<Bytes>,
    done: bool,
    _held: (StreamSlot, ConnectionTelemetry, tokio_util::sync::DropGuard),
}

/// The `200` SSE response of a plan: the stream ends when the projection is over, on shutdown,
/// or when the credential expires.
pub fn respond(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    slot: StreamSlot,
    plan: Plan,
) -> axum::response::Response {
    state.tails.0.follow(&plan.tenant, &plan.session);
    let stop = state.lifecycle.streams_ending().child_token();
    if let Some(expiry_ms) = state.auth.credential_expiry_ms(headers) {
        let remaining = Duration::from_millis(expiry_ms.saturating_sub(state.clock.now_ms()));
        end_with_credential(&stop, remaining, Arc::clone(&state.auth), headers.clone());
    }
    let options = follow_options(
        state.config.heartbeat_interval,
        stop.clone(),
        state.lifecycle.streams_ending().clone(),
    );
    let connection =
        ConnectionTelemetry::open(state.telemetry.clone(), state.clock.clone(), &plan.tenant);
    let events = follow(
        state.tails.clone(),
        state.tails.clone(),
        plan.tenant,
        plan.session,
        plan.scan_from,
        options,
    );
    let pump = Pump {
        events: Box::pin(events),
        done: plan.projector.is_finished(),
        projector: plan.projector,
        emit_after: plan.emit_after,
        first: (!plan.first.is_empty()).then(|| render(&plan.first)),
        _held: (slot, connection, stop.drop_guard()),
    };
    sse_response(Body::from_stream(futures_util::stream::unfold(
        pump, next_chunk,
    )))
}

async fn next_chunk(mut pump: Pump) -> Option<(Result<Bytes, std::io::Error>, Pump)> {
    if let Some(first) = pump.first.take() {
        return Some((Ok(first), pump));
    }
    while !pump.done {
        match pump.events.next().await? {
            // Retention moved past the cursor: the stream ends, the client's reconnection is
            // answered with a snapshot.
            Err(StoreError::StaleCursor(_)) => return None,
            Err(error) => {
                tracing::warn!(error = %error, "AG-UI stream aborted by a store failure");
                pump.done = true;
                return Some((Err(std::io::Error::other("event stream aborted")), pump));
            }
            Ok(Followed::Idle) => {
                return Some((Ok(Bytes::from_static(HEARTBEAT_FRAME.as_bytes())), pump));
            }
            Ok(Followed::Event(event)) => {
                let frames = pump.projector.feed(&event);
                pump.done =
                    pump.projector.is_finished() || event.event_type == EventType::SessionClosed;
                if event.sequence > pump.emit_after && !frames.is_empty() {
                    return Some((Ok(render(&frames)), pump));
                }
            }
        }
    }
    None
}
