//! The recovery cursor of `session.read` (docs/protocol.md §7.3): the sequence after which a client
//! must replay events so that, together with the transcript snapshot it just read, nothing is
//! missed. It follows the newest reference cursor (`AgentRecoveryCursor`).
//!
//! The head is read *before* the snapshot so that an event appended while the snapshot loads is
//! always replayed (never assumed to be in the snapshot). The scan walks the retained log in
//! windows of `TAIL_EVENTS`, newest first, as far as it must: retention
//! (`server.max_events_per_session`) bounds it.

use agent_runtime::protocol::EventType;
use agent_runtime::protocol::session::{HistoryProgress, HistoryProgressState};
use agent_runtime_store::{EventRange, EventReader};

#[cfg(test)]
mod tests;

/// Events read per window of the backward scan.
pub const TAIL_EVENTS: u64 = 500;

/// Where a client should resume the event stream after reading a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryCursor {
    /// Resume with `after = last_event_sequence`; `None` when no safe cursor could be
    /// established.
    pub last_event_sequence: Option<u64>,
    /// The server cannot prove a safe resume point, or the transcript has a known gap.
    pub incomplete: bool,
}

/// Reads the head of the log; call it before loading the snapshot. Errors count as "unknown".
pub async fn head_before_read(
    log: &dyn EventReader,
    tenant_id: &str,
    session_id: &str,
) -> Option<u64> {
    let range = log
        .event_stream_range(tenant_id, session_id)
        .await
        .ok()
        .flatten();
    range.map(|r| r.head_sequence)
}

/// Resolves the cursor (docs/protocol.md §7.3). A store whose range read fails is treated like the
/// reference's store without the range capability.
pub async fn resolve(
    log: &dyn EventReader,
    tenant_id: &str,
    session_id: &str,
    head_before_read: Option<u64>,
    progress: Option<&HistoryProgress>,
) -> RecoveryCursor {
    let has_gap = progress.is_some_and(|p| p.state == HistoryProgressState::Failed);
    let range = match log.event_stream_range(tenant_id, session_id).await {
        Ok(Some(range)) => range,
        // 1. An empty log: resume from its start.
        Ok(None) => {
            return RecoveryCursor {
                last_event_sequence: Some(0),
                incomplete: has_gap,
            };
        }
        // 2. No range: probe the log.
        Err(_) => {
            return match log.read_events(tenant_id, session_id, 0, 1).await {
                Ok(_) => RecoveryCursor {
                    last_event_sequence: Some(0),
                    incomplete: false,
                },
                Err(_) => RecoveryCursor {
                    last_event_sequence: None,
                    incomplete: true,
                },
            };
        }
    };
    // 3. The newest event of the request the transcript fully covers when one is known, else the
    // newest completed request, at or below the head seen before the snapshot. A known gap keeps
    // that boundary and says recovery is incomplete.
    let limit = bounded_head(range, head_before_read);
    let found = match progress.and_then(|p| p.covered_request_id.as_deref()) {
        Some(covered) => {
            scan_backwards(log, tenant_id, session_id, range, limit, |event| {
                event.request_id.as_deref() == Some(covered)
            })
            .await
        }
        None => {
            scan_backwards(
                log,
                tenant_id,
                session_id,
                range,
                limit,
                is_completed_request,
            )
            .await
        }
    };
    match found {
        Some(sequence) => RecoveryCursor {
            last_event_sequence: Some(sequence),
            incomplete: has_gap,
        },
        // 4. Nothing found: replay the whole retained log.
        None => RecoveryCursor {
            last_event_sequence: Some(range.first_sequence - 1),
            incomplete: has_gap && range.first_sequence > 1,
        },
    }
}

fn bounded_head(range: EventRange, head_before_read: Option<u64>) -> u64 {
    match head_before_read {
        Some(head) => head.min(range.head_sequence),
        None => range.head_sequence,
    }
}

/// A `result` stream message: the terminal event of a request.
fn is_completed_request(event: &agent_runtime::protocol::EventEnvelope) -> bool {
    event.event_type == EventType::SessionStream
        && event.data.get("type").and_then(|t| t.as_str()) == Some("result")
}

/// The highest sequence ≤ `limit` whose event matches, scanning windows of `TAIL_EVENTS` from
/// `limit` back to the first retained event. Read errors end the scan (nothing found).
async fn scan_backwards(
    log: &dyn EventReader,
    tenant_id: &str,
    session_id: &str,
    range: EventRange,
    limit: u64,
    matches: impl Fn(&agent_runtime::protocol::EventEnvelope) -> bool,
) -> Option<u64> {
    let first = range.first_sequence;
    let mut window_end = limit;
    while window_end >= first {
        let window_start = first.max(window_end.saturating_sub(TAIL_EVENTS - 1));
        let page = log
            .read_events(tenant_id, session_id, window_start - 1, TAIL_EVENTS as u32)
            .await
            .ok()?;
        let found = page
            .events
            .iter()
            .filter(|event| event.sequence <= window_end && matches(event))
            .map(|event| event.sequence)
            .max();
        if found.is_some() || window_start <= first {
            return found;
        }
        window_end = window_start - 1;
    }
    None
}
