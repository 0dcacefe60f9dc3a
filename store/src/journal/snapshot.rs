//! A snapshot as the state lock hands it out. The JSONL store takes one under the lock to rewrite
//! its journal, so taking it must be cheap: retained events and durable events, most of any
//! state, are kept as the JSON text the store holds (a pointer copy each, not a record's clone);
//! the rest are entries. Encoding it, off the lock, writes the same lines as its entries would.

use std::sync::Arc;

use agent_runtime::protocol::EventEnvelope;

use super::{JOURNAL_VERSION, JournalEntry, encode_line};
use crate::frozen::Frozen;
use crate::memory::transcript_lines;
use crate::model::{DurableEvent, Transcript};

// `encode` writes the version as a literal.
const _: () = assert!(JOURNAL_VERSION == 1);

/// The state as journal lines, in snapshot order (docs/storage.md §9.1).
#[derive(Default)]
pub struct Snapshot {
    pub(crate) parts: Vec<Part>,
}

// Most parts are entries: boxing them would add an allocation each, under the lock.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Part {
    Entry(JournalEntry),
    /// A session's retained events, each as its stored JSON with its key: `event` lines.
    Events {
        tenant_id: String,
        session_id: String,
        events: Vec<(Arc<str>, Option<String>)>,
    },
    /// A session's transcript: a `transcript` line, and `transcript_change` lines if it outgrew
    /// one.
    Transcript {
        tenant_id: String,
        session_id: String,
        transcript: Transcript,
    },
    /// A session's durable journal: `durable_event` lines.
    Durable {
        tenant_id: String,
        events: Vec<Frozen<DurableEvent>>,
    },
}

impl Snapshot {
    /// Hands `each` every entry but events and durable events: the records a line replaces.
    pub fn for_each_record(&self, mut each: impl FnMut(&JournalEntry)) {
        for part in &self.parts {
            match part {
                Part::Entry(entry) => each(entry),
                Part::Transcript {
                    tenant_id,
                    session_id,
                    transcript,
                } => transcript_lines(tenant_id, session_id, transcript)
                    .iter()
                    .for_each(&mut each),
                Part::Events { .. } | Part::Durable { .. } => {}
            }
        }
    }

    /// One entry per line.
    pub fn into_entries(self) -> Vec<JournalEntry> {
        let mut entries = Vec::new();
        for part in self.parts {
            match part {
                Part::Entry(entry) => entries.push(entry),
                Part::Events {
                    tenant_id,
                    session_id,
                    events,
                } => entries.extend(events.into_iter().map(|(text, idempotency_key)| {
                    JournalEntry::Event {
                        tenant_id: tenant_id.clone(),
                        session_id: session_id.clone(),
                        event: EventEnvelope::from_stored_json(text)
                            .expect("an envelope this store rendered reads back"),
                        idempotency_key,
                    }
                })),
                Part::Transcript {
                    tenant_id,
                    session_id,
                    transcript,
                } => entries.extend(transcript_lines(&tenant_id, &session_id, &transcript)),
                Part::Durable { tenant_id, events } => {
                    entries.extend(events.into_iter().map(|event| JournalEntry::DurableEvent {
                        tenant_id: tenant_id.clone(),
                        event,
                    }));
                }
            }
        }
        entries
    }

    /// Appends the snapshot to `out`, one entry per line (as [`encode_line`] writes each).
    pub fn encode(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        for part in &self.parts {
            match part {
                Part::Entry(entry) => {
                    out.extend_from_slice(&encode_line(std::slice::from_ref(entry))?)
                }
                Part::Events {
                    tenant_id,
                    session_id,
                    events,
                } => {
                    for (text, key) in events {
                        // `JournalEntry::Event`'s fields, in its order.
                        out.extend_from_slice(br#"{"v":1,"kind":"event","tenantId":"#);
                        serde_json::to_writer(&mut *out, tenant_id)?;
                        out.extend_from_slice(br#","sessionId":"#);
                        serde_json::to_writer(&mut *out, session_id)?;
                        out.extend_from_slice(br#","event":"#);
                        out.extend_from_slice(text.as_bytes());
                        if let Some(key) = key {
                            out.extend_from_slice(br#","idempotencyKey":"#);
                            serde_json::to_writer(&mut *out, key)?;
                        }
                        out.extend_from_slice(b"}\n");
                    }
                }
                Part::Transcript {
                    tenant_id,
                    session_id,
                    transcript,
                } => {
                    for entry in transcript_lines(tenant_id, session_id, transcript) {
                        out.extend_from_slice(&encode_line(std::slice::from_ref(&entry))?);
                    }
                }
                Part::Durable { tenant_id, events } => {
                    for event in events {
                        out.extend_from_slice(br#"{"v":1,"kind":"durable_event","tenantId":"#);
                        serde_json::to_writer(&mut *out, tenant_id)?;
                        out.extend_from_slice(br#","event":"#);
                        serde_json::to_writer(&mut *out, event)?;
                        out.extend_from_slice(b"}\n");
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use agent_runtime::protocol::{EventType, JsonObject};

    use crate::conformance::support::{CREATED_AT, active_session};
    use crate::journal::encode_line;
    use crate::model::{DurableEventDraft, ExpectedSequence, NewEvent, TranscriptMutation};
    use crate::options::StoreOptions;
    use crate::ports::{DurableJournal, EventLog, SessionRecords, TranscriptStore};

    fn event(text: &str) -> NewEvent {
        let mut data = JsonObject::new();
        data.insert("text".into(), text.into());
        NewEvent {
            session_id: "s".into(),
            request_id: Some("r \"1\"".into()),
            occurred_at: String::new(),
            event_type: EventType::SessionStream,
            data,
        }
    }

    /// The lines written from the kept text are the lines of the snapshot's entries, byte for
    /// byte: retained events with and without keys, a key whose event was trimmed, a transcript,
    /// durable events.
    #[tokio::test]
    async fn a_snapshot_encodes_as_its_entries_would() {
        let options = StoreOptions {
            max_events_per_session: 2,
            ..StoreOptions::default()
        };
        let store = crate::MemoryStore::new(options);
        store
            .put_session(&active_session("t", "s", CREATED_AT))
            .await
            .unwrap();
        store
            .append_event("t", event("a"), Some("key-a"))
            .await
            .unwrap();
        for text in ["b", "c ü \n"] {
            store.append_event("t", event(text), None).await.unwrap();
        }
        store
            .append_event("t", event("d"), Some("key-d"))
            .await
            .unwrap();
        let draft = DurableEventDraft {
            event_type: "request_accepted".into(),
            data: JsonObject::new(),
            occurred_at: None,
            correlation: Default::default(),
        };
        store
            .append_durable(
                "t",
                "s",
                vec![draft.clone(), draft],
                ExpectedSequence::Any,
                None,
            )
            .await
            .unwrap();

        store.create_transcript("t", "s", None).await.unwrap();
        let message = serde_json::json!({ "role": "user", "content": "hi" });
        let turn = TranscriptMutation::AppendMessages(vec![message.as_object().cloned().unwrap()]);
        store.mutate_transcript("t", "s", turn, None).await.unwrap();

        let parts = store.read(|state, _| Ok(state.snapshot_parts())).unwrap();
        let mut encoded = Vec::new();
        parts.encode(&mut encoded).unwrap();
        let entries = parts.into_entries();
        let kinds: Vec<&str> = entries.iter().map(|entry| entry.kind()).collect();
        assert_eq!(
            kinds,
            [
                "session",
                "event",
                "event",
                "event_key",
                "transcript",
                "durable_event",
                "durable_event"
            ]
        );
        let lines: Vec<u8> = entries
            .iter()
            .flat_map(|entry| encode_line(std::slice::from_ref(entry)).unwrap())
            .collect();
        assert_eq!(
            String::from_utf8(encoded).unwrap(),
            String::from_utf8(lines).unwrap()
        );
    }
}
