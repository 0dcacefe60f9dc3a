//! Journal lines a change leaves without a record: events trimmed from a log, and the events and
//! durable events of a purged session or a reset log. The JSONL store counts their bytes as dead,
//! towards its next compaction (`Backend::compact_if_grown`); lines of keyed records (sessions,
//! receipts, transcripts, ...) it counts itself, from the lines that replace or delete them.
//!
//! Each line is counted as the entry inside a `batch` line, the shortest form it is written in,
//! so the count stays at or below the bytes the journal really holds.

use agent_runtime::protocol::EventEnvelope;

use crate::journal::encoded_len;

/// A session's tenant and session ids.
type Scope = (String, String);

/// An `event` entry's JSON around its ids and envelope, with its separator.
const EVENT_ENTRY: &str = r#"{"kind":"event","tenantId":,"sessionId":,"event":},"#;
/// What a key adds to an `event` entry, around the key's JSON.
const EVENT_KEY: &str = r#","idempotencyKey":"#;
/// A `durable_event` entry's JSON around its tenant and event, with its separator.
const DURABLE_ENTRY: &str = r#"{"kind":"durable_event","tenantId":,"event":},"#;

/// The JSON of a session's tenant and session ids, as quoted strings. Counted without escapes
/// (on every trimmed event, so without a serialisation): an id that needs them is counted a
/// little short, which only delays a rewrite.
fn ids_len((tenant, session): &Scope) -> u64 {
    (tenant.len() + session.len() + 4) as u64
}

/// Events a log dropped: how many, and the bytes of their JSON (with their keys, if any).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DroppedEvents {
    count: u64,
    bytes: u64,
}

impl DroppedEvents {
    /// An event whose line is dead, with its idempotency key if it has one.
    pub fn add(&mut self, event: &EventEnvelope, key: Option<&str>) {
        self.count += 1;
        // Stored events keep their rendering: this is a length, not a serialisation.
        self.bytes += event.json().len() as u64;
        if let Some(key) = key {
            self.bytes += EVENT_KEY.len() as u64 + encoded_len(key);
        }
    }

    /// An event trimmed from the front of its log. A keyed one is not dead: the next snapshot
    /// writes it again, as the `event_key` line that keeps its key.
    pub fn trimmed(&mut self, popped: Option<(EventEnvelope, Option<String>)>) {
        if let Some((event, None)) = popped {
            self.add(&event, None);
        }
    }

    /// The journal bytes of the dropped events' lines in session `key`.
    pub fn line_bytes(self, key: &Scope) -> u64 {
        if self.count == 0 {
            return 0;
        }
        self.bytes + self.count * (EVENT_ENTRY.len() as u64 + ids_len(key))
    }
}

/// The journal bytes of `tenant_id`'s durable event lines of these lengths.
pub(crate) fn durable_line_bytes(tenant_id: &str, events: impl Iterator<Item = usize>) -> u64 {
    let entry = DURABLE_ENTRY.len() as u64 + encoded_len(tenant_id);
    events.map(|event| event as u64 + entry).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{JournalEntry, encode_line};
    use crate::memory::state::kept_as_text;

    fn event(sequence: u64) -> EventEnvelope {
        let envelope: EventEnvelope = serde_json::from_value(serde_json::json!({
            "protocolVersion": 1,
            "eventId": format!("evt_{sequence}"),
            "sequence": sequence,
            "sessionId": "sess_1",
            "occurredAt": "2026-01-01T00:00:00.000Z",
            "type": "session.stream",
            "data": {"type": "content", "delta": "hello"},
        }))
        .unwrap();
        kept_as_text(&envelope)
    }

    /// Counted as batch entries: a line's JSON without `"v":1,` and its newline, plus a comma.
    #[test]
    fn dropped_events_count_the_bytes_of_their_batch_entries() {
        let key = ("tenant-1".to_owned(), "sess_1".to_owned());
        let entry = |sequence, idempotency_key: Option<&str>| JournalEntry::Event {
            tenant_id: key.0.clone(),
            session_id: key.1.clone(),
            event: event(sequence),
            idempotency_key: idempotency_key.map(str::to_owned),
        };
        let entry_bytes = |entry| encode_line(&[entry]).unwrap().len() as u64 - 6;
        let mut dropped = DroppedEvents::default();
        dropped.add(&event(1), None);
        dropped.add(&event(2), Some("k-2"));
        assert_eq!(
            dropped.line_bytes(&key),
            entry_bytes(entry(1, None)) + entry_bytes(entry(2, Some("k-2")))
        );
    }
}
