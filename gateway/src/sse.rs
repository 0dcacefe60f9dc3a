//! The per-session SSE stream (protocol.md §5): replay from the store in pages, then the live tail
//! by push (`wait_for_events` wakes on every append; decision P9), heartbeats while idle, and the
//! end of the stream after `session.closed`.
//!
//! Backpressure: the body is a pull-based stream that holds at most one page of events; nothing is
//! produced until the client has taken the previous frame, so a slow client never makes the server
//! buffer without bound.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::protocol::{EventEnvelope, EventType};
use agent_runtime_store::{EventLog, StoreError};
use bytes::Bytes;
use futures_util::Stream;
use tokio_util::sync::CancellationToken;

/// Events read from the store per page while replaying.
pub const REPLAY_PAGE: u32 = 100;

/// The comment frame sent after `heartbeat` of silence.
pub const HEARTBEAT_FRAME: &str = ": heartbeat\n\n";

/// Formats one event as an SSE frame: `id` is the sequence, `event` the type, `data` the envelope.
pub fn frame(event: &EventEnvelope) -> Bytes {
    let data = serde_json::to_string(event).expect("an event envelope always serialises");
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {}\n\n",
        event.sequence,
        event.event_type.as_str(),
        data
    ))
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

struct StreamState {
    log: Arc<dyn EventLog>,
    tenant_id: String,
    session_id: String,
    after: u64,
    buffered: VecDeque<EventEnvelope>,
    heartbeat: Duration,
    shutdown: CancellationToken,
    finished: bool,
}

enum Step {
    Frame(Bytes),
    End,
    Fail(StoreError),
}

/// The SSE body of one connection, starting after `after`. The stream ends after `session.closed`
/// or on shutdown; a store failure aborts the connection (no error frame: the client reconnects
/// and gets the pre-stream answer).
pub fn event_stream(
    log: Arc<dyn EventLog>,
    tenant_id: String,
    session_id: String,
    after: u64,
    heartbeat: Duration,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let state = StreamState {
        log,
        tenant_id,
        session_id,
        after,
        buffered: VecDeque::new(),
        heartbeat,
        shutdown,
        finished: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        if state.finished {
            return None;
        }
        match next_step(&mut state).await {
            Step::Frame(bytes) => Some((Ok(bytes), state)),
            Step::End => None,
            Step::Fail(error) => {
                tracing::warn!(session_id = %state.session_id, error = %error, "event stream aborted by a store failure");
                state.finished = true;
                Some((Err(std::io::Error::other("event stream aborted")), state))
            }
        }
    })
}

async fn next_step(state: &mut StreamState) -> Step {
    loop {
        if let Some(event) = state.buffered.pop_front() {
            state.after = event.sequence;
            if event.event_type == EventType::SessionClosed {
                state.finished = true;
            }
            return Step::Frame(frame(&event));
        }
        if state.shutdown.is_cancelled() {
            return Step::End;
        }
        let page = match state
            .log
            .read_events(
                &state.tenant_id,
                &state.session_id,
                state.after,
                REPLAY_PAGE,
            )
            .await
        {
            Ok(page) => page,
            Err(error) => return Step::Fail(error),
        };
        if !page.events.is_empty() {
            state.buffered.extend(page.events);
            continue;
        }
        let wait = state
            .log
            .wait_for_events(&state.tenant_id, &state.session_id, state.after);
        tokio::select! {
            woken = wait => {
                if let Err(error) = woken {
                    return Step::Fail(error);
                }
            }
            () = tokio::time::sleep(state.heartbeat) => {
                return Step::Frame(Bytes::from_static(HEARTBEAT_FRAME.as_bytes()));
            }
            () = state.shutdown.cancelled() => return Step::End,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
