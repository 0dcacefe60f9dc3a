//! Agent event appends in one round trip (migration 0007), sent through the commit queue that
//! lets appends of many sessions share one statement and one commit (`append_queue.rs`).
//!
//! A streaming request appends once per batch of deltas, and every round trip of that append is
//! on the path of every live event: the transaction took four (BEGIN, the session's locks, the
//! insert, COMMIT). The store remembers the head each of its appends left ([`KnownHeads`]) and
//! numbers the next batch from it; `append_agent_events` then takes the locks, checks that head
//! and the fence, writes and commits in one statement. When it cannot prove both it changes
//! nothing, and the full transaction runs instead (`events.rs`), deciding with the store's own
//! rules.
//!
//! A statement that fails without an answer from the server (the connection broke) may or may
//! not have committed. The full transaction then first looks whether the batch is stored: its
//! first event, under its sequence, with its id ([`Attempt::Unknown`]).

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_runtime::protocol::EventEnvelope;

use super::append_queue::{QueuedAppend, Sent};
use super::{PostgresStore, Tx, db_error, to_i64, to_u64};
use crate::error::StoreResult;
use crate::model::{ExecutionFence, NewEvent};
use crate::rules::sequence_events;

use super::rows::Head;

/// Heads remembered; past this many the memory starts over (a forgotten head costs one full
/// transaction, which remembers it again).
const KNOWN_HEADS: usize = 4096;

/// The agent stream head each session's last append in this process left.
#[derive(Default)]
pub(super) struct KnownHeads(Mutex<HashMap<(String, String), Head>>);

impl KnownHeads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Head>> {
        self.0.locked()
    }

    pub fn get(&self, tenant_id: &str, session_id: &str) -> Option<Head> {
        self.lock()
            .get(&(tenant_id.to_owned(), session_id.to_owned()))
            .copied()
    }

    pub fn remember(&self, tenant_id: &str, session_id: &str, head: Head) {
        let mut heads = self.lock();
        if heads.len() >= KNOWN_HEADS {
            heads.clear();
        }
        heads.insert((tenant_id.to_owned(), session_id.to_owned()), head);
    }

    pub fn forget(&self, tenant_id: &str, session_id: &str) {
        self.lock()
            .remove(&(tenant_id.to_owned(), session_id.to_owned()));
    }
}

/// A batch numbered from a head: what either way of appending writes.
pub(super) struct Numbered {
    /// Every event of the batch, with its sequence and id.
    pub stored: Vec<EventEnvelope>,
    /// The head it was numbered from.
    pub from: Head,
    /// The head after it: a batch that passes the retention moves `first` too.
    pub to: Head,
    /// Sequences and stored texts of the events the retention keeps (a batch longer than the
    /// retention keeps only its tail).
    pub sequences: Vec<i64>,
    pub rendered: Vec<Arc<str>>,
}

impl Numbered {
    pub fn new(store: &PostgresStore, from: Head, events: Vec<NewEvent>) -> Self {
        let (first, next) = from;
        let stored = sequence_events(events, to_u64(next), store.now());
        let new_next = next + stored.len() as i64;
        let retention = to_i64(store.options().max_events_per_session.max(1));
        let new_first = first.max(new_next - retention);
        let kept = stored
            .iter()
            .filter(|event| to_i64(event.sequence) >= new_first);
        let (sequences, rendered) = kept
            .map(|event| (to_i64(event.sequence), EventEnvelope::json(event)))
            .unzip();
        Numbered {
            stored,
            from,
            to: (new_first, new_next),
            sequences,
            rendered,
        }
    }

    /// The batch as `append_agent_events` takes it.
    pub fn queued(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
    ) -> QueuedAppend {
        QueuedAppend {
            tenant_id: tenant_id.to_owned(),
            session_id: session_id.to_owned(),
            from: self.from,
            to: self.to,
            sequences: self.sequences.clone(),
            envelopes: self.rendered.clone(),
            fence: fence.cloned(),
        }
    }

    pub fn envelopes(&self) -> Vec<&str> {
        self.rendered.iter().map(|json| &**json).collect()
    }

    /// Whether this batch is what the log holds (its first kept event, by sequence and id):
    /// under the session's locks, after a statement whose outcome is unknown.
    pub async fn is_stored(
        &self,
        tx: &mut Tx,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<bool> {
        let Some(&sequence) = self.sequences.first() else {
            return Ok(false);
        };
        let Some(event) = self
            .stored
            .iter()
            .find(|event| to_i64(event.sequence) == sequence)
        else {
            return Ok(false);
        };
        let text: Option<(String,)> = sqlx::query_as(
            "SELECT envelope::text FROM agent_events \
             WHERE tenant_id = $1 AND session_id = $2 AND sequence = $3",
        )
        .bind(tenant_id)
        .bind(session_id)
        .bind(sequence)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
        Ok(text.is_some_and(|(text,)| {
            EventEnvelope::from_stored_json(text.into())
                .is_ok_and(|stored| stored.event_id == event.event_id)
        }))
    }
}

/// How the one-statement append went.
pub(super) enum Attempt {
    /// Stored and committed.
    Stored(Vec<EventEnvelope>),
    /// Nothing changed: the head moved, or the fence is for the full transaction to judge.
    Declined,
    /// The connection broke under the statement: it may have committed `Numbered`.
    Unknown(Numbered),
}

impl PostgresStore {
    /// Appends `events` in one statement if `from` is still the session's head and the fence
    /// holds (see the module docs).
    pub(super) async fn append_in_one_statement(
        &self,
        tenant_id: &str,
        session_id: &str,
        from: Head,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Attempt> {
        let numbered = Numbered::new(self, from, events);
        match self
            .send_queued(numbered.queued(tenant_id, session_id, fence))
            .await
        {
            Sent::Answered(true) => {
                self.announce_appended(tenant_id, session_id, numbered.to, &numbered.stored);
                Ok(Attempt::Stored(numbered.stored))
            }
            Sent::Answered(false) => Ok(Attempt::Declined),
            // The server answered with an error, or the statement never left: nothing happened.
            Sent::Refused(error) => Err(db_error(error)),
            Sent::Broken(error) => {
                tracing::debug!(error = %super::brief(&error), "an append's connection broke; its outcome is checked");
                Ok(Attempt::Unknown(numbered))
            }
        }
    }
}
