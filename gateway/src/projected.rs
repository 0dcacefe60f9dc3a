//! The SSE body of a projection of the event log into another protocol (AG-UI, A2A): the store
//! follower (replay, then the live tail by push) fed to a [`Projection`], one `data:` line per
//! frame, LF-framed, every frame with an `id:` [`Cursor`]: our event sequence on the last frame
//! made from a stored event, `SEQ:K` on the K-th of the ones before it. Events up to the
//! client's cursor are fed without being sent, so the projection is in the state the first
//! stream was in when it sent them, and a reconnection repeats no frame and loses none.

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

use crate::http::events::{end_with_credential, sse_response};
use crate::sse::{ConnectionTelemetry, HEARTBEAT_FRAME, follow_options};
use crate::state::AppState;
use crate::stream_slots::StreamSlot;

/// A position in a projected stream: every frame of the events up to `after`, and the first
/// `frames` frames made from the event after it. Written `SEQ` or `SEQ:K`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub after: u64,
    pub frames: usize,
}

impl Cursor {
    /// Every frame of the events up to `after`.
    pub fn at(after: u64) -> Cursor {
        Cursor { after, frames: 0 }
    }

    /// `SEQ` or `SEQ:K` (K ≥ 1), decimal; `None` for anything else.
    pub fn parse(text: &str) -> Option<Cursor> {
        let (after, frames) = match text.split_once(':') {
            None => (text, None),
            Some((after, frames)) => (after, Some(frames)),
        };
        let after = crate::sse::parse_cursor(after).filter(|_| !after.is_empty())?;
        let frames = match frames {
            None => 0,
            Some(frames) if !frames.is_empty() && frames.bytes().all(|b| b.is_ascii_digit()) => {
                frames.parse::<usize>().ok().filter(|&frames| frames > 0)?
            }
            Some(_) => return None,
        };
        Some(Cursor { after, frames })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.frames {
            0 => write!(f, "{}", self.after),
            frames => write!(f, "{}:{frames}", self.after),
        }
    }
}

/// One frame of a projected stream: its JSON, and the SSE `id:` it carries, if any.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub event: serde_json::Value,
    pub id: Option<Cursor>,
}

/// Stored events as another protocol's frames.
pub trait Projection: Send + 'static {
    /// The frames of one stored event, in order (the last carries its sequence).
    fn feed(&mut self, event: &agent_runtime::protocol::EventEnvelope) -> Vec<Frame>;
    /// Nothing more belongs to the stream.
    fn is_finished(&self) -> bool;
}

/// Frames made from one stored event, each with its cursor: the last carries the sequence.
pub fn frames_of(events: Vec<serde_json::Value>, sequence: u64) -> Vec<Frame> {
    let count = events.len();
    events
        .into_iter()
        .enumerate()
        .map(|(index, event)| {
            let id = if index + 1 == count {
                Cursor::at(sequence)
            } else {
                Cursor {
                    after: sequence - 1,
                    frames: index + 1,
                }
            };
            Frame {
                event,
                id: Some(id),
            }
        })
        .collect()
}

/// Where a projected stream starts and what it sends first.
pub struct Plan<P> {
    pub tenant: String,
    pub session: String,
    /// The follower starts after this sequence.
    pub scan_from: u64,
    /// The frames up to this cursor are not sent (the client has them).
    pub resume: Cursor,
    /// Sent before anything of the log (a run's start, a snapshot).
    pub first: Vec<Frame>,
    /// The stream ends when it is finished, or with the session's close.
    pub projector: P,
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

struct Pump<P> {
    events: Pin<Box<dyn Stream<Item = Result<Followed, StoreError>> + Send>>,
    projector: P,
    resume: Cursor,
    first: Option<Bytes>,
    done: bool,
    _held: (StreamSlot, ConnectionTelemetry, tokio_util::sync::DropGuard),
}

/// The `200` SSE response of a plan: the stream ends when the projection is over, on shutdown,
/// or when the credential expires.
pub fn respond<P: Projection>(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    slot: StreamSlot,
    plan: Plan<P>,
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
        resume: plan.resume,
        first: (!plan.first.is_empty()).then(|| render(&plan.first)),
        _held: (slot, connection, stop.drop_guard()),
    };
    sse_response(Body::from_stream(futures_util::stream::unfold(
        pump, next_chunk,
    )))
}

async fn next_chunk<P: Projection>(
    mut pump: Pump<P>,
) -> Option<(Result<Bytes, std::io::Error>, Pump<P>)> {
    if let Some(first) = pump.first.take() {
        return Some((Ok(first), pump));
    }
    while !pump.done {
        match pump.events.next().await? {
            // Retention moved past the cursor: the stream ends, the client's reconnection is
            // answered with a snapshot.
            Err(StoreError::StaleCursor(_)) => return None,
            Err(error) => {
                tracing::warn!(error = %error, "a projected stream aborted by a store failure");
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
                let sent = match event.sequence.cmp(&pump.resume.after.saturating_add(1)) {
                    std::cmp::Ordering::Less => &[][..],
                    std::cmp::Ordering::Equal => frames.get(pump.resume.frames..).unwrap_or(&[]),
                    std::cmp::Ordering::Greater => &frames[..],
                };
                if !sent.is_empty() {
                    return Some((Ok(render(sent)), pump));
                }
            }
        }
    }
    None
}

/// The text of a transcript message's content: the string, or its text parts joined.
pub fn message_text(content: Option<&serde_json::Value>) -> String {
    use serde_json::Value;
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}
