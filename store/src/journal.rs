//! The journal hook of the memory store (docs/storage.md §9.1) and the JSONL line format.
//!
//! Every state change of the memory store is described by one or more [`JournalEntry`]s. The store
//! applies a change in memory first, then hands its entries to the journal before the call
//! returns; the JSONL backend writes them as lines of `server-store.jsonl`, and `snapshot()` /
//! `restore()` speak the same entries, so a replayed journal and a restored snapshot rebuild the
//! same state.

use agent_runtime::protocol::{EventEnvelope, JsonObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod snapshot;
mod stored_session;
pub(crate) use snapshot::Part as SnapshotPart;
pub use snapshot::Snapshot;
pub use stored_session::StoredSession;

use crate::error::StoreResult;
use crate::frozen::Frozen;
use crate::model::{
    CommandTarget, DurableEvent, ExecutionLease, HistoryProgress, MemoryRecord, SessionRoute,
    Transcript, TranscriptEntry, WorkerRecord,
};
use crate::outbox::{DeliveryState, WebhookDelivery, WebhookEndpoint};

/// The only journal line version this store reads and writes.
pub const JOURNAL_VERSION: u64 = 1;

/// The `kind` of a line that groups the entries of one state change, so a change that touches
/// several records (a batch of events, a route claim with its lease) commits as one line.
pub const BATCH_KIND: &str = "batch";

/// A command receipt as the memory store keeps it (the reference's in-memory lease record).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandLease {
    pub lease_id: String,
    pub command_fingerprint: String,
    /// Epoch ms; `None` means never (sealed or completed).
    pub expires_at: Option<u64>,
    pub sealed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Kept as text: a tenant's stored answers cost their size in memory (see [`Frozen`]).
    pub result: Option<Frozen<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandon_reason: Option<String>,
    /// When the command was sealed; the abandonment window of `recover_expired_work` runs from
    /// here (the reference's `updated_at` set by seal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_at: Option<u64>,
    /// When the command got its result or was abandoned; receipts are reaped a retention period
    /// after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
    /// What the command acts on, recorded by the seal. Boxed: a tenant's receipts are held in
    /// memory, and the pointer keeps each one small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Box<CommandTarget>>,
    /// The size of `result`'s JSON text, for the per-tenant budget of stored results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_bytes: Option<u64>,
}

/// One journal entry: a full snapshot of one record after a change (or its deletion).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum JournalEntry {
    /// A session record, as stored after `put_session`.
    Session { record: StoredSession },
    /// One appended agent event (with its key when it was appended with one).
    #[serde(rename_all = "camelCase")]
    Event {
        tenant_id: String,
        session_id: String,
        event: EventEnvelope,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idempotency_key: Option<String>,
    },
    /// Snapshots only: an idempotency key whose event is no longer retained.
    #[serde(rename_all = "camelCase")]
    EventKey {
        tenant_id: String,
        session_id: String,
        idempotency_key: String,
        event: EventEnvelope,
    },
    /// The retained agent event log of a session was dropped (test hook); keys survive and the
    /// next append restarts at sequence 1.
    #[serde(rename_all = "camelCase")]
    EventLogReset {
        tenant_id: String,
        session_id: String,
    },
    /// A command receipt, or `None` when it was released.
    #[serde(rename_all = "camelCase")]
    Lease {
        tenant_id: String,
        command_id: String,
        lease: Option<CommandLease>,
    },
    /// A whole transcript document after a change, or `None` when it was deleted.
    #[serde(rename_all = "camelCase")]
    Transcript {
        tenant_id: String,
        session_id: String,
        transcript: Option<Transcript>,
    },
    /// What one mutation changed in an existing transcript (a whole document per change would
    /// make every turn of a long session write the whole transcript again).
    #[serde(rename_all = "camelCase")]
    TranscriptChange {
        tenant_id: String,
        session_id: String,
        change: TranscriptChange,
    },
    /// One durable journal event (sequences contiguous from 1).
    #[serde(rename_all = "camelCase")]
    DurableEvent {
        tenant_id: String,
        event: Frozen<DurableEvent>,
    },
    /// The execution lease row of a session after a change.
    #[serde(rename_all = "camelCase")]
    ExecutionLease {
        tenant_id: String,
        lease: ExecutionLease,
    },
    /// A worker record after a change.
    Worker { worker: WorkerRecord },
    /// A session route after a change.
    Route { route: SessionRoute },
    /// Retention by age trimmed a session's agent event log up to `first_sequence`.
    #[serde(rename_all = "camelCase")]
    EventsTrimmed {
        tenant_id: String,
        session_id: String,
        first_sequence: u64,
    },
    /// A closed session was purged with everything it owned.
    #[serde(rename_all = "camelCase")]
    SessionPurged {
        tenant_id: String,
        session_id: String,
    },
    /// A memory as saved.
    #[serde(rename_all = "camelCase")]
    Memory {
        tenant_id: String,
        record: MemoryRecord,
    },
    /// A memory was deleted.
    #[serde(rename_all = "camelCase")]
    MemoryDeleted {
        tenant_id: String,
        scope: String,
        name: String,
    },
    /// Everything of a tenant was deleted.
    #[serde(rename_all = "camelCase")]
    TenantDeleted { tenant_id: String },
    /// A webhook endpoint after a change, or `None` when it was deleted.
    #[serde(rename_all = "camelCase")]
    WebhookEndpoint {
        tenant_id: String,
        endpoint_id: String,
        endpoint: Option<WebhookEndpoint>,
    },
    /// A webhook delivery's state after an attempt or a redelivery (what changes; its cause stays
    /// on the delivery's own line).
    WebhookAttempt { attempt: DeliveryState },
    /// A webhook delivery after a change, or `None` when it was deleted. Enqueued on the line of
    /// the change that caused it.
    #[serde(rename_all = "camelCase")]
    WebhookDelivery {
        position: u64,
        delivery: Option<Box<WebhookDelivery>>,
    },
}

impl JournalEntry {
    /// The `kind` field of the entry's line.
    pub fn kind(&self) -> &'static str {
        match self {
            JournalEntry::Session { .. } => "session",
            JournalEntry::Event { .. } => "event",
            JournalEntry::EventKey { .. } => "event_key",
            JournalEntry::EventLogReset { .. } => "event_log_reset",
            JournalEntry::Lease { .. } => "lease",
            JournalEntry::Transcript { .. } => "transcript",
            JournalEntry::TranscriptChange { .. } => "transcript_change",
            JournalEntry::DurableEvent { .. } => "durable_event",
            JournalEntry::ExecutionLease { .. } => "execution_lease",
            JournalEntry::Worker { .. } => "worker",
            JournalEntry::Route { .. } => "route",
            JournalEntry::EventsTrimmed { .. } => "events_trimmed",
            JournalEntry::SessionPurged { .. } => "session_purged",
            JournalEntry::Memory { .. } => "memory",
            JournalEntry::MemoryDeleted { .. } => "memory_deleted",
            JournalEntry::TenantDeleted { .. } => "tenant_deleted",
            JournalEntry::WebhookEndpoint { .. } => "webhook_endpoint",
            JournalEntry::WebhookDelivery { .. } => "webhook_delivery",
            JournalEntry::WebhookAttempt { .. } => "webhook_attempt",
        }
    }
}

/// A transcript mutation's effect: the entries it appended (with the ids the store gave them,
/// so a replay rebuilds the same document), what it did to the pending inputs, and the small
/// fields as they are after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TranscriptChange {
    pub appended: Vec<TranscriptEntry>,
    /// The whole pending list after the change, as journals written before `dequeued` and
    /// `enqueued` existed hold it (then it replaces the list); never written now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_inputs: Option<Vec<JsonObject>>,
    /// The pending input the change removed, by `inputId` (applied or cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dequeued: Option<String>,
    /// The pending input the change added, or replaced in place by its `inputId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_progress: Option<Box<HistoryProgress>>,
    pub last_activity_ms: u64,
}

impl TranscriptChange {
    /// The change that appends `doc`'s entries in `appended`, leaves the pending inputs alone and
    /// its other fields as they are in `doc`.
    pub fn of(doc: &Transcript, appended: std::ops::Range<usize>) -> TranscriptChange {
        TranscriptChange {
            appended: doc.entries[appended].to_vec(),
            pending_inputs: None,
            dequeued: None,
            enqueued: None,
            summary: doc.summary.clone(),
            history_progress: doc.history_progress.clone(),
            last_activity_ms: doc.last_activity_ms,
        }
    }

    pub fn apply_to(self, doc: &mut Transcript) {
        doc.entries.extend(self.appended);
        if let Some(pending) = self.pending_inputs {
            doc.pending_inputs = pending;
        }
        if let Some(id) = &self.dequeued {
            crate::transcript::remove_pending(&mut doc.pending_inputs, id);
        }
        if let Some(input) = self.enqueued {
            crate::transcript::enqueue_pending(&mut doc.pending_inputs, input);
        }
        doc.summary = self.summary;
        doc.history_progress = self.history_progress;
        doc.last_activity_ms = self.last_activity_ms;
    }
}

/// Where the memory store sends its entries. Called with the store's state lock held, so entries
/// arrive in exactly the order the changes were applied; an implementation must not call back
/// into the store.
pub trait Journal: Send + Sync {
    /// Persists the entries of one state change, all or nothing as far as the journal can tell.
    /// An error fails the mutating call with that error and puts the store in the failed state.
    fn append(&self, entries: &[JournalEntry]) -> StoreResult<()>;
}

/// Encodes the entries of one state change as one newline-terminated line: the entry itself, or
/// a `batch` line when the change has several. `v` and `kind` come first, so a line reads
/// `{"v":1,"kind":...}`.
pub fn encode_line(entries: &[JournalEntry]) -> serde_json::Result<Vec<u8>> {
    let body = match entries {
        // Serialising the entry directly puts the `kind` tag first.
        [single] => serde_json::to_vec(single)?,
        _ => {
            let mut body = format!(r#"{{"kind":"{BATCH_KIND}","entries":"#).into_bytes();
            serde_json::to_writer(&mut body, entries)?;
            body.push(b'}');
            body
        }
    };
    let mut line = format!(r#"{{"v":{JOURNAL_VERSION},"#).into_bytes();
    // `body` is a JSON object: splice its members after `v`.
    line.extend_from_slice(&body[1..]);
    line.push(b'\n');
    Ok(line)
}

/// The length of a value's JSON, without keeping it.
pub fn encoded_len<T: Serialize + ?Sized>(value: &T) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len() as u64;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serialising plain data into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Decodes one parsed line into the entries of its state change. `None` when the line is valid
/// JSON but not a known journal entry (wrong `v`, unknown `kind`, wrong shape).
pub fn decode_line(line: Value) -> Option<Vec<JournalEntry>> {
    let Value::Object(mut object) = line else {
        return None;
    };
    if object.remove("v")?.as_u64()? != JOURNAL_VERSION {
        return None;
    }
    if object.get("kind").and_then(Value::as_str) == Some(BATCH_KIND) {
        if object.len() != 2 {
            return None;
        }
        let entries = object.remove("entries")?;
        let entries: Vec<JournalEntry> = serde_json::from_value(entries).ok()?;
        return (!entries.is_empty()).then_some(entries);
    }
    let entry: JournalEntry = serde_json::from_value(Value::Object(object)).ok()?;
    Some(vec![entry])
}

#[cfg(test)]
mod tests;
