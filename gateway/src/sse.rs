//! The per-session SSE stream (docs/protocol.md §5): the store follower (replay, then live by push,
//! decision P9) rendered as SSE frames, with heartbeats while idle and the end of the stream after
//! `session.closed`.
//!
//! Backpressure: the body is a pull-based stream that holds at most one page of events; nothing is
//! produced until the client has taken the previous chunk, so a slow client never makes the server
//! buffer without bound.
//!
//! Frames that are ready together (a replayed page, a burst of live events) leave as one body
//! chunk: one HTTP chunk, one write and one wake-up of the reader instead of one per event. A
//! frame is never held back waiting for another.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime::protocol::EventEnvelope;
use agent_runtime::telemetry::{DeliveryMetric, SharedTelemetry, SseConnectionMetric, best_effort};
use agent_runtime::timefmt::parse_iso_ms;
use agent_runtime_store::follow::{FOLLOW_PAGE, FollowOptions, Followed, LiveSignal, follow};
use agent_runtime_store::{EventReader, StoreError};
use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

/// The comment frame sent after `heartbeat` of silence.
pub const HEARTBEAT_FRAME: &str = ": heartbeat\n\n";

/// Longest wait for a live signal before the store is read anyway (safety net only).
const RECHECK: Duration = Duration::from_secs(5);

/// Appends one event's SSE frame to `out`: `id` is the sequence, `event` the type, `data` the
/// envelope.
pub fn write_frame(out: &mut BytesMut, event: &EventEnvelope) {
    // Rendered once per stored event, however many subscribers and replays send it.
    let data = event.json();
    let event_type = event.event_type.as_str();
    out.reserve(data.len() + event_type.len() + 40);
    let _ = write!(out, "id: {}\nevent: ", event.sequence);
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// Parses an SSE cursor (decision P8): empty means 0; otherwise only plain decimal digits that fit
/// a JavaScript safe integer are accepted.
pub fn parse_cursor(raw: &str) -> Option<u64> {
    const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
    if raw.is_empty() {
        return Some(0);
    }
    if !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    raw.parse::<u64>().ok().filter(|&n| n <= MAX_SAFE_INTEGER)
}

/// The telemetry of one SSE connection: counted as open while it lives, and every event written
/// with its live-tail lag.
pub struct ConnectionTelemetry {
    telemetry: SharedTelemetry,
    clock: SharedClock,
    tenant_id: String,
    opened_ms: u64,
}

impl ConnectionTelemetry {
    /// Records the opening; the closing is recorded when this is dropped with the stream.
    pub fn open(telemetry: SharedTelemetry, clock: SharedClock, tenant_id: &str) -> Self {
        let metric = SseConnectionMetric {
            tenant_id,
            opened: true,
        };
        best_effort(|| telemetry.record_sse_connection(&metric));
        Self {
            opened_ms: clock.now_ms(),
            telemetry,
            clock,
            tenant_id: tenant_id.to_owned(),
        }
    }

    /// An event was written. Events that occurred after the connection opened are the live tail:
    /// their lag runs from `occurredAt` (stamped when stored) to now. Older ones are replay.
    fn delivered(&self, event: &EventEnvelope) {
        let occurred_ms = parse_iso_ms(&event.occurred_at)
            .and_then(|ms| u64::try_from(ms).ok())
            .filter(|&ms| ms >= self.opened_ms);
        let live_lag =
            occurred_ms.map(|ms| Duration::from_millis(self.clock.now_ms().saturating_sub(ms)));
        let metric = DeliveryMetric {
            tenant_id: &self.tenant_id,
            event_type: event.event_type,
            live_lag,
        };
        best_effort(|| self.telemetry.record_delivery(&metric));
    }
}

impl Drop for ConnectionTelemetry {
    fn drop(&mut self) {
        let metric = SseConnectionMetric {
            tenant_id: &self.tenant_id,
            opened: false,
        };
        best_effort(|| self.telemetry.record_sse_connection(&metric));
    }
}

/// How an SSE stream follows the log: `Idle` after `heartbeat` of silence, ended by `shutdown`,
/// and flushed first when `flush_on_stop` fired before it (a drain).
pub fn follow_options(
    heartbeat: Duration,
    shutdown: CancellationToken,
    flush_on_stop: CancellationToken,
) -> FollowOptions {
    FollowOptions {
        flush_on_stop: Some(flush_on_stop),
        idle: heartbeat,
        recheck: RECHECK.min(heartbeat),
        stop: shutdown,
    }
}

/// The SSE body of one connection, starting after `after`. A store failure aborts the connection
/// (no error frame: the client reconnects and gets the pre-stream answer). Retention moving past
/// the cursor is not a failure: the stream ends normally (a complete body), and the client's
/// reconnection is answered `409 STALE_CURSOR`.
/// When `shutdown` fires after `flush_on_stop` did (a drain), what is stored by then is sent
/// first; a revoked credential fires `shutdown` alone and ends the stream at once.
#[allow(clippy::too_many_arguments)]
pub fn event_stream(
    log: Arc<dyn EventReader>,
    signal: Arc<dyn LiveSignal>,
    tenant_id: String,
    session_id: String,
    after: u64,
    heartbeat: Duration,
    shutdown: CancellationToken,
    flush_on_stop: CancellationToken,
    connection: ConnectionTelemetry,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let options = follow_options(heartbeat, shutdown, flush_on_stop);
    let stale_session = session_id.clone();
    follow(log, signal, tenant_id, session_id.clone(), after, options)
        .take_while(move |item| {
            let stale = matches!(item, Err(StoreError::StaleCursor(_)));
            if stale {
                tracing::info!(session_id = %stale_session, "event stream ended: retention moved past its cursor");
            }
            std::future::ready(!stale)
        })
        .map(move |item| {
            if let Ok(Followed::Event(event)) = &item {
                connection.delivered(event);
            }
            item.map_err(|error| {
                tracing::warn!(session_id = %session_id, error = %error, "event stream aborted by a store failure");
                std::io::Error::other("event stream aborted")
            })
        })
        .ready_chunks(FOLLOW_PAGE as usize)
        .flat_map(|ready| futures_util::stream::iter(coalesce(ready)))
}

/// Writes the frames of what is ready into one chunk; an error ends the list (the stream aborts
/// there).
fn coalesce(ready: Vec<Result<Followed, std::io::Error>>) -> Vec<Result<Bytes, std::io::Error>> {
    let mut chunk = BytesMut::new();
    let mut out = Vec::with_capacity(2);
    for item in ready {
        match item {
            Ok(Followed::Event(event)) => write_frame(&mut chunk, &event),
            Ok(Followed::Idle) => chunk.extend_from_slice(HEARTBEAT_FRAME.as_bytes()),
            Err(error) => {
                if !chunk.is_empty() {
                    out.push(Ok(chunk.split().freeze()));
                }
                out.push(Err(error));
                return out;
            }
        }
    }
    if !chunk.is_empty() {
        out.push(Ok(chunk.freeze()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: u64) -> Followed {
        let envelope: EventEnvelope = serde_json::from_value(serde_json::json!({
            "protocolVersion": 1,
            "eventId": format!("event-{sequence}"),
            "sequence": sequence,
            "sessionId": "session-1",
            "occurredAt": "2026-01-01T00:00:00.000Z",
            "type": "session.closed",
            "data": { "sessionId": "session-1" }
        }))
        .unwrap();
        Followed::Event(envelope)
    }

    fn text(chunk: &Result<Bytes, std::io::Error>) -> &str {
        std::str::from_utf8(chunk.as_ref().unwrap()).unwrap()
    }

    #[test]
    fn ready_frames_leave_as_one_chunk_up_to_an_error() {
        let joined = coalesce(vec![Ok(event(1)), Ok(Followed::Idle), Ok(event(2))]);
        assert_eq!(joined.len(), 1);
        let frames: Vec<&str> = text(&joined[0]).split_inclusive("\n\n").collect();
        assert_eq!(frames.len(), 3);
        assert!(frames[0].starts_with("id: 1\nevent: session.closed\ndata: {"));
        assert!(frames[0].ends_with("}\n\n"));
        assert_eq!(frames[1], HEARTBEAT_FRAME);
        assert!(frames[2].starts_with("id: 2\n"));

        let store = || Err(std::io::Error::other("store"));
        let cut = coalesce(vec![Ok(event(1)), Ok(event(2)), store(), Ok(event(3))]);
        assert_eq!(cut.len(), 2);
        assert_eq!(text(&cut[0]).matches("\n\n").count(), 2);
        assert!(cut[1].is_err());

        assert!(coalesce(vec![store()])[0].is_err());
    }

    #[test]
    fn cursor_accepts_only_plain_decimal_integers() {
        assert_eq!(parse_cursor(""), Some(0));
        assert_eq!(parse_cursor("0"), Some(0));
        assert_eq!(parse_cursor("42"), Some(42));
        assert_eq!(
            parse_cursor("9007199254740991"),
            Some(9_007_199_254_740_991)
        );
        for bad in [
            "abc",
            "1e3",
            "0x10",
            "-1",
            " 1",
            "1.0",
            "9007199254740992",
            "+1",
        ] {
            assert_eq!(parse_cursor(bad), None, "{bad:?} must be rejected");
        }
    }
}
