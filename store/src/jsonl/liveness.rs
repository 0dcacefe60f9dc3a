//! How many bytes of the journal are dead: lines that no snapshot would write again, because a
//! later line replaced or deleted their record, or because the engine dropped what they held
//! (trimmed events, a purged session's events: `memory/dropped.rs`). Compaction starts on this
//! count, not on the journal's size alone (`JsonlBackend::compact_if_grown`).
//!
//! Keyed records are followed by a hash of their kind and key, each with the bytes of the lines
//! that hold it now; a later line for the same record makes those dead. The count is an estimate
//! (a hash collision, or a transcript's fields that each change writes again, are off by a few
//! bytes); each rewrite measures the real live size, and the count starts again from zero.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::journal::{JournalEntry, Snapshot, encoded_len};

/// The dead bytes of a journal and the lines that hold each keyed record.
#[derive(Default)]
pub(super) struct Liveness {
    /// Bytes of the lines holding each keyed record, by [`record`].
    records: HashMap<u64, u64>,
    /// Bytes of the journal that the next snapshot drops.
    pub dead: u64,
}

/// A record's identity: its kind and its key.
fn record(parts: &[&str]) -> u64 {
    let mut hasher = DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

impl Liveness {
    /// The liveness of a journal that is exactly `snapshot`, one entry per line.
    pub fn of_snapshot(snapshot: &Snapshot) -> Self {
        let mut liveness = Liveness::default();
        snapshot.for_each_record(|entry| {
            // `{"v":1,` for `{` and the newline.
            liveness.record(entry, || encoded_len(entry) + 7);
        });
        liveness.dead = 0;
        liveness
    }

    /// Accounts for one appended entry of `bytes()` bytes (asked only for the kinds it needs:
    /// events are counted by the engine, without a second serialisation). Stays whole: one arm
    /// per journal entry kind.
    pub fn record(&mut self, entry: &JournalEntry, bytes: impl FnOnce() -> u64) {
        match entry {
            JournalEntry::Event { .. }
            | JournalEntry::EventKey { .. }
            | JournalEntry::DurableEvent { .. } => {}
            JournalEntry::Session { record: stored } => {
                let session = &stored.record;
                self.replace(
                    &["session", &session.tenant_id, &session.session_id],
                    bytes(),
                );
            }
            JournalEntry::Lease {
                tenant_id,
                command_id,
                lease,
            } => {
                let key = ["lease", tenant_id, command_id];
                match lease {
                    Some(_) => self.replace(&key, bytes()),
                    None => self.delete(&key, bytes()),
                }
            }
            JournalEntry::Transcript {
                tenant_id,
                session_id,
                transcript,
            } => {
                let key = ["transcript", tenant_id, session_id];
                match transcript {
                    Some(_) => self.replace(&key, bytes()),
                    None => self.delete(&key, bytes()),
                }
            }
            JournalEntry::TranscriptChange {
                tenant_id,
                session_id,
                change,
            } => {
                // The appended entries and an enqueued input stay (until it is dequeued: then the
                // count is high until the next rewrite measures); the fields around them replace
                // the last change's.
                let line = bytes();
                let enqueued = change.enqueued.as_ref().map_or(0, encoded_len);
                let kept = (encoded_len(&change.appended) + enqueued).min(line);
                *self
                    .records
                    .entry(record(&["transcript", tenant_id, session_id]))
                    .or_default() += kept;
                self.dead += line - kept;
            }
            JournalEntry::ExecutionLease { tenant_id, lease } => {
                self.replace(&["execution_lease", tenant_id, &lease.session_id], bytes());
            }
            JournalEntry::Worker { worker } => {
                self.replace(&["worker", &worker.worker_id], bytes())
            }
            JournalEntry::Route { route } => {
                self.replace(&["route", &route.tenant_id, &route.session_id], bytes());
            }
            JournalEntry::Memory { tenant_id, record } => {
                self.replace(&["memory", tenant_id, &record.scope, &record.name], bytes());
            }
            JournalEntry::MemoryDeleted {
                tenant_id,
                scope,
                name,
            } => self.delete(&["memory", tenant_id, scope, name], bytes()),
            JournalEntry::SessionPurged {
                tenant_id,
                session_id,
            } => {
                // What `State::purge_session` removes besides events (counted by the engine).
                for kind in ["session", "transcript", "execution_lease", "route"] {
                    self.forget(&[kind, tenant_id, session_id]);
                }
                self.dead += bytes();
            }
            JournalEntry::WebhookEndpoint {
                tenant_id,
                endpoint_id,
                endpoint,
            } => {
                let key = ["webhook_endpoint", tenant_id, endpoint_id];
                match endpoint {
                    Some(_) => self.replace(&key, bytes()),
                    None => self.delete(&key, bytes()),
                }
            }
            JournalEntry::WebhookDelivery { position, delivery } => {
                let position = position.to_string();
                let key = ["webhook_delivery", &position];
                match delivery {
                    Some(_) => self.replace(&key, bytes()),
                    None => {
                        self.forget(&["webhook_attempt", &position]);
                        self.delete(&key, bytes());
                    }
                }
            }
            JournalEntry::WebhookAttempt { attempt } => {
                let position = attempt.position.to_string();
                self.replace(&["webhook_attempt", &position], bytes());
            }
            JournalEntry::TenantDeleted { .. } => {
                // The tenant's lines are dead; the next rewrite measures how many bytes they were.
                self.dead += bytes();
            }
            JournalEntry::EventsTrimmed { .. } | JournalEntry::EventLogReset { .. } => {
                self.dead += bytes();
            }
        }
    }

    /// A line that holds the whole record now: the lines before it are dead.
    fn replace(&mut self, key: &[&str], bytes: u64) {
        if let Some(before) = self.records.insert(record(key), bytes) {
            self.dead += before;
        }
    }

    /// A line that deletes the record: it and the record's lines are dead.
    fn delete(&mut self, key: &[&str], bytes: u64) {
        self.forget(key);
        self.dead += bytes;
    }

    fn forget(&mut self, key: &[&str]) {
        if let Some(before) = self.records.remove(&record(key)) {
            self.dead += before;
        }
    }
}
