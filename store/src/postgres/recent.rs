//! The events this process has just appended to sessions that are being read, kept for their
//! followers' next read.
//!
//! A live follower (an SSE tail, a `Subscribe` stream) is woken by an append and reads the new
//! events at once: on PostgreSQL that read was a round trip on the path of every live event,
//! fetching what this process had in hand a moment earlier. Events are immutable once committed,
//! so a contiguous run of them, with their sequences, answers a read that starts inside it as the
//! database would. What the run cannot know, it leaves to the database:
//!
//! * a read that starts before the run or at its end (the caught-up check) goes to the database;
//! * a page ends with the run and says "no more" even if another process appended after it; the
//!   follower learns of that append as of any later one (PostgreSQL's own wait asks the database
//!   for the head before it sleeps, so it reads again at once).
//!
//! Only sessions read lately are kept (a read that the run cannot answer marks its session), each
//! at most [`KEEP`] events and never more than the retention (so nothing the database would call
//! trimmed is served); past [`SESSIONS`] sessions the memory starts over.

use agent_runtime::sync::Locked;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use agent_runtime::protocol::EventEnvelope;

use crate::model::EventPage;

/// Events kept per session: a few wake-ups' worth of deltas.
const KEEP: usize = 64;
/// Sessions kept at most.
const SESSIONS: usize = 1024;

type Key = (String, String);

#[derive(Default)]
pub(super) struct RecentAppends(Mutex<HashMap<Key, VecDeque<EventEnvelope>>>);

impl RecentAppends {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, VecDeque<EventEnvelope>>> {
        self.0.locked()
    }

    /// Keeps `events`, just committed, if their session was read lately (at most `retention` of
    /// the newest). Events that do not continue the kept run replace it.
    pub fn record(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: &[EventEnvelope],
        retention: usize,
    ) {
        let keep = KEEP.min(retention.max(1));
        let events = &events[events.len().saturating_sub(keep)..];
        let Some(first) = events.first() else {
            return;
        };
        let mut sessions = self.lock();
        let Some(run) = sessions.get_mut(&(tenant_id.to_owned(), session_id.to_owned())) else {
            return;
        };
        if run
            .back()
            .is_none_or(|last| last.sequence + 1 != first.sequence)
        {
            run.clear();
        }
        run.extend(events.iter().cloned());
        while run.len() > keep {
            run.pop_front();
        }
    }

    /// Up to `limit` events after `after`, if the kept run holds the one right after it;
    /// otherwise `None`, and the session's next appends are kept.
    pub fn page(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Option<EventPage> {
        let mut sessions = self.lock();
        let key = (tenant_id.to_owned(), session_id.to_owned());
        if !sessions.contains_key(&key) && sessions.len() >= SESSIONS {
            sessions.clear();
        }
        let run = sessions.entry(key).or_default();
        let first = run.front()?.sequence;
        let last = run.back()?.sequence;
        if after + 1 < first || after >= last {
            return None;
        }
        let skip = usize::try_from(after + 1 - first).ok()?;
        let events: Vec<EventEnvelope> = run.iter().skip(skip).take(limit).cloned().collect();
        let has_more = run.len() > skip.saturating_add(limit);
        Some(EventPage { events, has_more })
    }

    /// Forgets a session (its log was rewritten behind the appends).
    pub fn forget(&self, tenant_id: &str, session_id: &str) {
        self.lock()
            .remove(&(tenant_id.to_owned(), session_id.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: u64) -> EventEnvelope {
        serde_json::from_value(serde_json::json!({
            "protocolVersion": 1,
            "eventId": format!("event-{sequence}"),
            "sequence": sequence,
            "sessionId": "s",
            "occurredAt": "2026-01-01T00:00:00.000Z",
            "type": "session.stream",
            "data": { "type": "content", "sessionId": "s", "delta": "x" }
        }))
        .unwrap()
    }

    fn sequences(page: Option<EventPage>) -> Option<(Vec<u64>, bool)> {
        page.map(|page| {
            (
                page.events.iter().map(|e| e.sequence).collect(),
                page.has_more,
            )
        })
    }

    #[test]
    fn answers_only_reads_that_start_inside_the_contiguous_run() {
        let recent = RecentAppends::default();
        recent.record("t", "s", &[event(1)], 1000);
        assert_eq!(
            sequences(recent.page("t", "s", 0, 10)),
            None,
            "nobody read it before"
        );
        recent.record("t", "s", &[event(5), event(6)], 1000);
        recent.record("t", "s", &[event(7)], 1000);
        assert_eq!(
            sequences(recent.page("t", "s", 4, 10)),
            Some((vec![5, 6, 7], false))
        );
        assert_eq!(
            sequences(recent.page("t", "s", 5, 1)),
            Some((vec![6], true))
        );
        // Before the run, at its end, another session: the database answers.
        assert_eq!(sequences(recent.page("t", "s", 3, 10)), None);
        assert_eq!(sequences(recent.page("t", "s", 7, 10)), None);
        assert_eq!(sequences(recent.page("t", "other", 4, 10)), None);

        // A batch that does not continue the run (another writer came between) replaces it.
        recent.record("t", "s", &[event(10)], 1000);
        assert_eq!(sequences(recent.page("t", "s", 6, 10)), None);
        assert_eq!(
            sequences(recent.page("t", "s", 9, 10)),
            Some((vec![10], false))
        );

        recent.forget("t", "s");
        assert_eq!(sequences(recent.page("t", "s", 9, 10)), None);
    }

    #[test]
    fn keeps_no_more_than_the_retention_or_its_own_bound() {
        let recent = RecentAppends::default();
        assert_eq!(sequences(recent.page("t", "s", 0, 10)), None);
        recent.record("t", "s", &[event(1), event(2), event(3)], 2);
        assert_eq!(
            sequences(recent.page("t", "s", 0, 10)),
            None,
            "1 is past the retention"
        );
        assert_eq!(
            sequences(recent.page("t", "s", 1, 10)),
            Some((vec![2, 3], false))
        );

        let many: Vec<EventEnvelope> = (1..=200).map(event).collect();
        recent.record("t", "s", &many, 10_000);
        let first_kept = 200 - KEEP as u64 + 1;
        assert_eq!(sequences(recent.page("t", "s", first_kept - 2, 1)), None);
        assert_eq!(
            sequences(recent.page("t", "s", first_kept - 1, 1)),
            Some((vec![first_kept], true))
        );
    }
}
