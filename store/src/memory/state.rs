//! The records of every port, and how they turn into journal entries and back.

use agent_runtime::sync::Locked;
use std::collections::{BTreeMap, HashMap, VecDeque};

use agent_runtime::protocol::EventEnvelope;
use tokio::sync::watch;

use super::dropped::{DroppedEvents, durable_line_bytes};
use crate::frozen::Frozen;
use crate::journal::{
    CommandLease, JournalEntry, Snapshot, SnapshotPart, StoredSession, TranscriptChange,
    encoded_len,
};
use crate::model::{
    DurableEvent, ExecutionLease, MemoryRecord, SessionRoute, Transcript, WorkerRecord,
};
use crate::transcript::new_transcript;

/// `(tenant id, id)`: every tenant-scoped record is keyed by it.
pub(crate) type Scope = (String, String);

pub(crate) fn scope(tenant_id: &str, id: &str) -> Scope {
    (tenant_id.to_owned(), id.to_owned())
}

/// The retained part of one session's agent event log.
#[derive(Debug)]
pub(crate) struct EventLogState {
    /// Sequence of the oldest retained event (or of the next one when none is retained).
    pub first_sequence: u64,
    pub next_sequence: u64,
    /// Retained events, ascending, each with the idempotency key it was appended with.
    pub events: VecDeque<(EventEnvelope, Option<String>)>,
}

impl EventLogState {
    fn starting_at(sequence: u64) -> Self {
        Self {
            first_sequence: sequence,
            next_sequence: sequence,
            events: VecDeque::new(),
        }
    }

    pub fn new() -> Self {
        Self::starting_at(1)
    }

    pub fn head(&self) -> Option<u64> {
        (self.next_sequence > self.first_sequence).then(|| self.next_sequence - 1)
    }

    /// Drops retained events below `first_sequence` (never the newest one).
    pub fn trim_to(&mut self, first_sequence: u64) -> DroppedEvents {
        let keep_from = first_sequence.min(self.next_sequence.saturating_sub(1));
        self.drop_front_while(|events| {
            events.len() > 1
                && events
                    .front()
                    .is_some_and(|(event, _)| event.sequence < keep_from)
        })
    }

    /// Drops the oldest events while `drop` says so, then notes where the log starts.
    fn drop_front_while(
        &mut self,
        drop: impl Fn(&VecDeque<(EventEnvelope, Option<String>)>) -> bool,
    ) -> DroppedEvents {
        let mut dropped = DroppedEvents::default();
        while drop(&self.events) {
            dropped.trimmed(self.events.pop_front());
        }
        self.first_sequence = self
            .events
            .front()
            .map_or(self.next_sequence, |(event, _)| event.sequence);
        dropped
    }

    /// Where a trim by age to `occurred_before` would start the log; `None` if it trims nothing.
    pub fn age_trim_point(&self, occurred_before: &str) -> Option<u64> {
        let newest = self.events.back()?.0.sequence;
        let old = self
            .events
            .iter()
            .take_while(|(event, _)| {
                event.sequence < newest && event.occurred_at.as_str() <= occurred_before
            })
            .last()?;
        Some(old.0.sequence + 1)
    }

    /// Whether this exact event (same sequence and id) is still retained.
    pub fn retains(&self, event: &EventEnvelope) -> bool {
        let Some(offset) = event.sequence.checked_sub(self.first_sequence) else {
            return false;
        };
        let index = usize::try_from(offset).unwrap_or(usize::MAX);
        self.events
            .get(index)
            .is_some_and(|(kept, _)| kept.event_id == event.event_id)
    }

    /// Appends a sequenced event and trims the front beyond `retention`.
    pub fn push(
        &mut self,
        event: EventEnvelope,
        key: Option<String>,
        retention: u64,
    ) -> DroppedEvents {
        self.next_sequence = event.sequence + 1;
        self.events.push_back((event, key));
        self.drop_front_while(|events| events.len() as u64 > retention)
    }
}

/// Every record of every port.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub sessions: BTreeMap<Scope, StoredSession>,
    /// Keyed by `(tenant, command id)`.
    pub commands: BTreeMap<Scope, CommandLease>,
    pub event_logs: BTreeMap<Scope, EventLogState>,
    /// Idempotency keys per `(tenant, session)`: never trimmed with the log.
    pub event_keys: BTreeMap<Scope, BTreeMap<String, EventEnvelope>>,
    pub transcripts: BTreeMap<Scope, Transcript>,
    /// Durable journal per `(tenant, session)`, contiguous from sequence 1 (so event n is at
    /// index n - 1). Kept as text: it is read only when a session is loaded.
    pub durable: BTreeMap<Scope, Vec<Frozen<DurableEvent>>>,
    pub execution_leases: BTreeMap<Scope, ExecutionLease>,
    pub workers: BTreeMap<String, WorkerRecord>,
    pub routes: BTreeMap<Scope, SessionRoute>,
    /// Keyed by `(tenant, scope, name)`.
    pub memories: BTreeMap<(String, String, String), MemoryRecord>,
    /// Webhook endpoints by `(tenant, endpoint id)`.
    pub webhook_endpoints: BTreeMap<Scope, crate::outbox::WebhookEndpoint>,
    /// Webhook deliveries by position (enqueue order), with their indexes (`webhooks.rs`).
    pub webhook_deliveries: super::webhooks::Deliveries,
    /// Delivery claims by position: `(claim id, expiry)`. Not journaled: one process holds the
    /// store, and a restart voids them.
    pub webhook_claims: HashMap<u64, (String, u64)>,
    /// Live-tail wake-ups per `(tenant, session)`: the sender carries the head sequence. Not state
    /// proper: never journaled or snapshotted.
    pub waiters: HashMap<Scope, watch::Sender<u64>>,
    /// A journal write failed: mutations are refused until restart.
    pub failed: bool,
    /// A journal write failed and the durable state could not be reloaded: reads are refused too.
    pub unreadable: bool,
    pub closed: bool,
    /// What each closed session retains, in bytes of JSON, with the `updatedAt` it was measured
    /// at: measured once, by the closed-session budget sweep (a closed session no longer grows).
    /// Derived, never journaled.
    pub closed_sizes: std::sync::Mutex<HashMap<Scope, (String, u64)>>,
}

impl State {
    /// What the closed session `key` retains (record, events and their keys, transcript,
    /// durable journal), in bytes of JSON; measured once per close.
    pub fn closed_session_bytes(&self, key: &Scope) -> u64 {
        let updated_at = self
            .sessions
            .get(key)
            .map(|stored| stored.record.updated_at.clone())
            .unwrap_or_default();
        let mut sizes = self.closed_sizes.locked();
        if let Some((measured_at, bytes)) = sizes.get(key)
            && *measured_at == updated_at
        {
            return *bytes;
        }
        let bytes = self.retained_bytes(key);
        sizes.insert(key.clone(), (updated_at, bytes));
        bytes
    }

    fn retained_bytes(&self, key: &Scope) -> u64 {
        use crate::journal::encoded_len;
        let record = self.sessions.get(key).map_or(0, |stored| {
            let metadata = stored.metadata.as_ref().map_or(0, Frozen::len);
            encoded_len(&stored.record) + metadata as u64
        });
        let events: u64 = self.event_logs.get(key).map_or(0, |log| {
            log.events.iter().map(|(event, _)| encoded_len(event)).sum()
        });
        let keys: u64 = self
            .event_keys
            .get(key)
            .map_or(0, |keys| keys.values().map(encoded_len).sum());
        let transcript = self.transcripts.get(key).map_or(0, encoded_len);
        let durable: u64 = self
            .durable
            .get(key)
            .map_or(0, |events| events.iter().map(|e| e.len() as u64).sum());
        record + events + keys + transcript + durable
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
            && self.commands.is_empty()
            && self.event_logs.is_empty()
            && self.event_keys.is_empty()
            && self.transcripts.is_empty()
            && self.durable.is_empty()
            && self.execution_leases.is_empty()
            && self.workers.is_empty()
            && self.routes.is_empty()
            && self.memories.is_empty()
            && self.webhook_endpoints.is_empty()
            && self.webhook_deliveries.is_empty()
    }

    pub fn snapshot(&self) -> Vec<JournalEntry> {
        self.snapshot_parts().into_entries()
    }

    /// The snapshot, cheap to take under the state lock (see [`Snapshot`]).
    pub fn snapshot_parts(&self) -> Snapshot {
        let mut entries: Vec<JournalEntry> = self
            .sessions
            .values()
            .map(|record| JournalEntry::Session {
                record: record.clone(),
            })
            .collect();
        let mut parts = Vec::new();
        self.snapshot_events(&mut entries, &mut parts);
        entries.extend(self.commands.iter().map(|((tenant, command), lease)| {
            JournalEntry::Lease {
                tenant_id: tenant.clone(),
                command_id: command.clone(),
                lease: Some(lease.clone()),
            }
        }));
        flush(&mut parts, &mut entries);
        // Split into lines when encoded, off the lock: that measures every entry.
        parts.extend(
            self.transcripts
                .iter()
                .map(|((tenant, session), transcript)| SnapshotPart::Transcript {
                    tenant_id: tenant.clone(),
                    session_id: session.clone(),
                    transcript: transcript.clone(),
                }),
        );
        for ((tenant, _), events) in &self.durable {
            parts.push(SnapshotPart::Durable {
                tenant_id: tenant.clone(),
                events: events.clone(),
            });
        }
        entries.extend(self.execution_leases.iter().map(|((tenant, _), lease)| {
            JournalEntry::ExecutionLease {
                tenant_id: tenant.clone(),
                lease: lease.clone(),
            }
        }));
        entries.extend(self.workers.values().map(|worker| JournalEntry::Worker {
            worker: worker.clone(),
        }));
        entries.extend(self.routes.values().map(|route| JournalEntry::Route {
            route: route.clone(),
        }));
        entries.extend(
            self.memories
                .iter()
                .map(|((tenant, _, _), record)| JournalEntry::Memory {
                    tenant_id: tenant.clone(),
                    record: record.clone(),
                }),
        );
        entries.extend(self.webhook_endpoints.values().map(|endpoint| {
            JournalEntry::WebhookEndpoint {
                tenant_id: endpoint.tenant_id.clone(),
                endpoint_id: endpoint.endpoint_id.clone(),
                endpoint: Some(endpoint.clone()),
            }
        }));
        entries.extend(self.webhook_deliveries.all().map(|delivery| {
            JournalEntry::WebhookDelivery {
                position: delivery.position,
                delivery: Some(Box::new(delivery.clone())),
            }
        }));
        flush(&mut parts, &mut entries);
        Snapshot { parts }
    }

    /// Per session: retained events (with their keys), then keys whose event was trimmed.
    /// `entries` are the entries since the last part, which go before these.
    fn snapshot_events(&self, entries: &mut Vec<JournalEntry>, parts: &mut Vec<SnapshotPart>) {
        let mut scopes: Vec<&Scope> = self.event_logs.keys().collect();
        scopes.extend(self.event_keys.keys());
        scopes.sort();
        scopes.dedup();
        for scope @ (tenant, session) in scopes {
            let log = self.event_logs.get(scope);
            let retained = log.map(|log| &log.events);
            flush(parts, entries);
            parts.push(SnapshotPart::Events {
                tenant_id: tenant.clone(),
                session_id: session.clone(),
                events: retained
                    .into_iter()
                    .flatten()
                    .map(|(event, key)| (event.json(), key.clone()))
                    .collect(),
            });
            let orphaned = self.event_keys.get(scope).into_iter().flatten();
            for (key, event) in orphaned {
                if !log.is_some_and(|log| log.retains(event)) {
                    entries.push(JournalEntry::EventKey {
                        tenant_id: tenant.clone(),
                        session_id: session.clone(),
                        idempotency_key: key.clone(),
                        event: event.clone(),
                    });
                }
            }
        }
    }

    /// Applies one journal entry during replay or restore. The error text says what is wrong.
    /// Stays whole: one arm per journal entry kind, the whole replay in one match.
    pub fn apply(&mut self, entry: JournalEntry, retention: u64) -> Result<(), String> {
        match entry {
            JournalEntry::Session { record: stored } => {
                let record = &stored.record;
                let key = scope(&record.tenant_id, &record.session_id);
                self.sessions.insert(key, stored);
            }
            JournalEntry::Event {
                tenant_id,
                session_id,
                event,
                idempotency_key,
            } => self.replay_event(&tenant_id, &session_id, event, idempotency_key, retention)?,
            JournalEntry::EventKey {
                tenant_id,
                session_id,
                idempotency_key,
                event,
            } => self.replay_event_key(&tenant_id, &session_id, idempotency_key, event)?,
            JournalEntry::EventLogReset {
                tenant_id,
                session_id,
            } => {
                self.event_logs.remove(&scope(&tenant_id, &session_id));
            }
            JournalEntry::Lease {
                tenant_id,
                command_id,
                lease,
            } => {
                let key = scope(&tenant_id, &command_id);
                match lease {
                    Some(lease) => self.commands.insert(key, lease),
                    None => self.commands.remove(&key),
                };
            }
            JournalEntry::Transcript {
                tenant_id,
                session_id,
                transcript,
            } => self.replay_transcript(&tenant_id, &session_id, transcript)?,
            JournalEntry::TranscriptChange {
                tenant_id,
                session_id,
                change,
            } => {
                let Some(doc) = self.transcripts.get_mut(&scope(&tenant_id, &session_id)) else {
                    return Err(format!(
                        "Journal transcript change for {session_id}, which has no transcript"
                    ));
                };
                let entries_before = doc.entries.len();
                change.apply_to(doc);
                freeze_entries(doc, entries_before);
            }
            JournalEntry::DurableEvent {
                tenant_id,
                event: frozen,
            } => self.replay_durable_event(&tenant_id, frozen)?,
            JournalEntry::ExecutionLease { tenant_id, lease } => {
                self.execution_leases
                    .insert(scope(&tenant_id, &lease.session_id), lease);
            }
            JournalEntry::Worker { worker } => {
                self.workers.insert(worker.worker_id.clone(), worker);
            }
            JournalEntry::Route { route } => {
                let key = scope(&route.tenant_id, &route.session_id);
                self.routes.insert(key, route);
            }
            JournalEntry::Memory { tenant_id, record } => {
                let key = (tenant_id, record.scope.clone(), record.name.clone());
                self.memories.insert(key, record);
            }
            JournalEntry::MemoryDeleted {
                tenant_id,
                scope,
                name,
            } => {
                self.memories.remove(&(tenant_id, scope, name));
            }
            JournalEntry::TenantDeleted { tenant_id } => {
                self.delete_tenant(&tenant_id);
            }
            JournalEntry::WebhookEndpoint {
                tenant_id,
                endpoint_id,
                endpoint,
            } => {
                let key = scope(&tenant_id, &endpoint_id);
                match endpoint {
                    Some(endpoint) => self.webhook_endpoints.insert(key, endpoint),
                    None => self.webhook_endpoints.remove(&key),
                };
            }
            JournalEntry::WebhookAttempt { attempt } => {
                self.webhook_deliveries.apply_attempt(&attempt);
            }
            JournalEntry::WebhookDelivery { position, delivery } => match delivery {
                Some(delivery) => self.webhook_deliveries.put(*delivery),
                None => self.webhook_deliveries.remove(position),
            },
            JournalEntry::EventsTrimmed {
                tenant_id,
                session_id,
                first_sequence,
            } => {
                if let Some(log) = self.event_logs.get_mut(&scope(&tenant_id, &session_id)) {
                    log.trim_to(first_sequence);
                }
            }
            JournalEntry::SessionPurged {
                tenant_id,
                session_id,
            } => self.purge_session(&scope(&tenant_id, &session_id)),
        }
        Ok(())
    }

    fn replay_event(
        &mut self,
        tenant_id: &str,
        session_id: &str,
        event: EventEnvelope,
        idempotency_key: Option<String>,
        retention: u64,
    ) -> Result<(), String> {
        if event.session_id != session_id {
            return Err(format!(
                "Journal event {} does not belong to {session_id}",
                event.event_id
            ));
        }
        let key = scope(tenant_id, session_id);
        let log = self
            .event_logs
            .entry(key.clone())
            .or_insert_with(|| EventLogState::starting_at(event.sequence));
        // Sequences within a log are contiguous; anything else is a damaged journal.
        if event.sequence == 0 || event.sequence != log.next_sequence {
            return Err(format!(
                "Journal event {} is out of order for {session_id}",
                event.event_id
            ));
        }
        let event = kept_as_text(&event);
        if let Some(idempotency_key) = &idempotency_key {
            self.event_keys
                .entry(key)
                .or_default()
                .insert(idempotency_key.clone(), event.clone());
        }
        log.push(event, idempotency_key, retention);
        Ok(())
    }

    fn replay_event_key(
        &mut self,
        tenant_id: &str,
        session_id: &str,
        idempotency_key: String,
        event: EventEnvelope,
    ) -> Result<(), String> {
        if event.session_id != session_id || event.sequence == 0 {
            return Err(format!(
                "Journal event key {idempotency_key} names event {} of another session \
                 than {session_id}",
                event.event_id
            ));
        }
        self.event_keys
            .entry(scope(tenant_id, session_id))
            .or_default()
            .insert(idempotency_key, kept_as_text(&event));
        Ok(())
    }

    fn replay_transcript(
        &mut self,
        tenant_id: &str,
        session_id: &str,
        transcript: Option<Transcript>,
    ) -> Result<(), String> {
        if let Some(transcript) = &transcript
            && transcript.session_id != session_id
        {
            return Err(format!(
                "Journal transcript of {} does not belong to {session_id}",
                transcript.session_id
            ));
        }
        let key = scope(tenant_id, session_id);
        match transcript {
            Some(mut transcript) => {
                freeze_entries(&mut transcript, 0);
                self.transcripts.insert(key, transcript)
            }
            None => self.transcripts.remove(&key),
        };
        Ok(())
    }

    fn replay_durable_event(
        &mut self,
        tenant_id: &str,
        frozen: Frozen<DurableEvent>,
    ) -> Result<(), String> {
        let event = frozen.thaw();
        let stream = self
            .durable
            .entry(scope(tenant_id, &event.session_id))
            .or_default();
        if event.sequence != stream.len() as u64 + 1 {
            return Err(format!(
                "Durable event {} is out of order for {}",
                event.event_id, event.session_id
            ));
        }
        stream.push(frozen);
        Ok(())
    }

    /// Removes a session and every record it owns.
    /// Removes every record of `tenant`; returns how many.
    pub fn delete_tenant(&mut self, tenant: &str) -> u64 {
        fn drop_scoped<V>(map: &mut BTreeMap<Scope, V>, tenant: &str) -> u64 {
            let before = map.len();
            map.retain(|(owner, _), _| owner != tenant);
            (before - map.len()) as u64
        }
        let sessions: Vec<Scope> = self
            .sessions
            .keys()
            .filter(|(owner, _)| owner == tenant)
            .cloned()
            .collect();
        for key in &sessions {
            self.waiters.remove(key);
            self.closed_sizes
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
        }
        let mut deleted = drop_scoped(&mut self.sessions, tenant)
            + drop_scoped(&mut self.commands, tenant)
            + drop_scoped(&mut self.event_logs, tenant)
            + drop_scoped(&mut self.event_keys, tenant)
            + drop_scoped(&mut self.transcripts, tenant)
            + drop_scoped(&mut self.durable, tenant)
            + drop_scoped(&mut self.execution_leases, tenant)
            + drop_scoped(&mut self.routes, tenant)
            + drop_scoped(&mut self.webhook_endpoints, tenant);
        let memories = self.memories.len();
        self.memories.retain(|(owner, _, _), _| owner != tenant);
        let deliveries = self.webhook_deliveries.len();
        self.webhook_deliveries.retain(|d| d.tenant_id != tenant);
        deleted += (memories - self.memories.len()) as u64;
        deleted += (deliveries - self.webhook_deliveries.len()) as u64;
        deleted
    }

    pub fn purge_session(&mut self, key: &Scope) {
        self.closed_sizes
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.sessions.remove(key);
        self.event_logs.remove(key);
        self.event_keys.remove(key);
        self.transcripts.remove(key);
        self.durable.remove(key);
        self.execution_leases.remove(key);
        self.routes.remove(key);
        self.waiters.remove(key);
    }
}

/// Moves the entries gathered so far into `parts`, keeping their order.
fn flush(parts: &mut Vec<SnapshotPart>, entries: &mut Vec<JournalEntry>) {
    parts.extend(entries.drain(..).map(SnapshotPart::Entry));
}

/// What one snapshot line of a transcript holds at most (its entries' JSON), well under the
/// JSONL record limit (64 MiB).
const SNAPSHOT_LINE_BYTES: usize = 16 << 20;

/// A transcript's snapshot entries (see [`snapshot_transcript`]).
pub(crate) fn transcript_lines(
    tenant: &str,
    session: &str,
    transcript: &Transcript,
) -> Vec<JournalEntry> {
    let mut lines = Vec::new();
    snapshot_transcript(&mut lines, tenant, session, transcript, SNAPSHOT_LINE_BYTES);
    lines
}

/// A transcript as snapshot entries: the document with as many entries as fit `line_bytes`,
/// then `transcript_change` entries with the rest. A transcript grows by changes that each fit a
/// record, so it may outgrow one; written whole, its snapshot line would be refused on the next
/// start.
pub(super) fn snapshot_transcript(
    out: &mut Vec<JournalEntry>,
    tenant: &str,
    session: &str,
    transcript: &Transcript,
    line_bytes: usize,
) {
    // Where each line's entries start: a new line when the next entry would overflow this one.
    let mut starts = vec![0];
    let mut bytes = 0;
    for (index, entry) in transcript.entries.iter().enumerate() {
        let size = encoded_len(entry) as usize;
        if index > *starts.last().unwrap_or(&0) && bytes + size > line_bytes {
            starts.push(index);
            bytes = 0;
        }
        bytes += size;
    }
    starts.push(transcript.entries.len());
    // The document line: the empty transcript with the first line's change applied.
    let mut doc = new_transcript(&transcript.session_id, transcript.created_at_ms);
    TranscriptChange::of(transcript, starts[0]..starts[1]).apply_to(&mut doc);
    doc.pending_inputs = transcript.pending_inputs.clone();
    out.push(JournalEntry::Transcript {
        tenant_id: tenant.to_owned(),
        session_id: session.to_owned(),
        transcript: Some(doc),
    });
    for line in starts[1..].windows(2) {
        out.push(JournalEntry::TranscriptChange {
            tenant_id: tenant.to_owned(),
            session_id: session.to_owned(),
            change: TranscriptChange::of(transcript, line[0]..line[1]),
        });
    }
}

/// An event as the store keeps it: its rendered text (which SSE sends as it is), its data parsed
/// only if a reader looks inside, so a retained event costs its size (see `crate::frozen`).
pub(super) fn kept_as_text(envelope: &EventEnvelope) -> EventEnvelope {
    EventEnvelope::from_stored_json(envelope.json())
        .expect("an envelope this store rendered reads back")
}

/// Keeps the document's messages from entry `from` on as text only.
pub(super) fn freeze_entries(doc: &mut Transcript, from: usize) {
    for entry in &mut doc.entries[from..] {
        entry.message = entry.message.frozen();
    }
}

impl State {
    /// The journal bytes of the event and durable event lines that purging session `key` drops:
    /// its retained events, the events its orphaned keys hold, and its durable journal.
    pub(super) fn purged_line_bytes(&self, key: &Scope) -> u64 {
        let mut events = DroppedEvents::default();
        let log = self.event_logs.get(key);
        for (event, event_key) in log.map(|log| &log.events).into_iter().flatten() {
            events.add(event, event_key.as_deref());
        }
        for (event_key, event) in self.event_keys.get(key).into_iter().flatten() {
            if !log.is_some_and(|log| log.retains(event)) {
                events.add(event, Some(event_key));
            }
        }
        let durable = self.durable.get(key).map_or(0, |stream| {
            durable_line_bytes(&key.0, stream.iter().map(|event| event.len()))
        });
        events.line_bytes(key) + durable
    }

    /// The journal bytes of the lines that dropping session `key`'s retained log makes dead (its
    /// keyed events live on as `event_key` lines).
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn reset_line_bytes(&self, key: &Scope) -> u64 {
        let mut events = DroppedEvents::default();
        for (event, event_key) in self
            .event_logs
            .get(key)
            .map(|log| &log.events)
            .into_iter()
            .flatten()
        {
            if event_key.is_none() {
                events.add(event, None);
            }
        }
        events.line_bytes(key)
    }
}
