//! The agent event log (docs/storage.md §1.4, §3.3).
//!
//! Sequence assignment: every append locks the session's `stream_heads` row (`FOR UPDATE`, created
//! on first use), numbers the whole batch from `next_sequence`, inserts it in one statement,
//! advances the head and trims below the retention, all in one transaction. Appenders of one
//! session therefore queue on that row and commit in sequence order: no gap, no duplicate. The
//! idempotency key check happens under the same lock, so concurrent appends with one key yield
//! one event; keys live in `event_keys`, which retention never touches. A batch appended from the
//! head this process last left takes all of that in one statement (`append.rs`, migration 0007).

use agent_runtime::protocol::EventEnvelope;
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{FromRow, Row};

use super::append::{Attempt, Numbered};
use super::notify::POLL_FALLBACK;
use super::rows::LeaseRow;
use super::{PostgresStore, Tx, check_fence_row, db_error, to_i64, to_u64};
use crate::error::{StoreError, StoreResult};
use crate::model::{EventPage, EventRange, ExecutionFence, ExecutionLease, NewEvent};
use crate::ports::{EventLog, EventReader};
use crate::rules::{
    check_batch_session, check_event_ids, check_event_limit, cursor_ahead_of_head, cursor_stale,
};

pub(super) const AGENT: &str = "agent";
pub(super) const DURABLE: &str = "durable";

pub(super) use super::rows::Head;

/// The stream head without locking: `(first, next)` or `None` before the first append.
pub(super) async fn read_head(
    store: &PostgresStore,
    tenant_id: &str,
    session_id: &str,
    stream: &str,
) -> StoreResult<Option<Head>> {
    store.ensure_open()?;
    store
        .reading(|| {
            sqlx::query_as(
                "SELECT first_sequence, next_sequence FROM stream_heads \
                 WHERE tenant_id = $1 AND session_id = $2 AND stream_name = $3",
            )
            .bind(tenant_id)
            .bind(session_id)
            .bind(stream)
            .fetch_optional(store.pool())
        })
        .await
}

/// `(first_sequence, next_sequence)` of a page row.
fn head_of_row(row: &PgRow) -> StoreResult<Head> {
    Ok((
        row.try_get(0).map_err(db_error)?,
        row.try_get(1).map_err(db_error)?,
    ))
}

/// A stored envelope that does not parse (a database edited by hand). Only the position is
/// reported: serde's messages may quote values, and events carry prompts and tool arguments.
fn stored_event_error(error: serde_json::Error) -> StoreError {
    super::rows::corrupt(
        "stored event (not an event envelope at column)",
        &error.column().to_string(),
    )
}

/// The execution lock, the lease row (read, not locked: migration 16), then the stream head
/// (created at `(1, 1)` on first use, locked), in one round trip (`lock_session_stream`); the
/// lock order of docs/storage.md §3.5.
pub(super) async fn lock_session_stream(
    tx: &mut Tx,
    tenant_id: &str,
    session_id: &str,
    stream: &str,
) -> StoreResult<(Option<ExecutionLease>, Head)> {
    let row = sqlx::query("SELECT * FROM lock_session_stream($1, $2, $3)")
        .bind(tenant_id)
        .bind(session_id)
        .bind(stream)
        .fetch_one(&mut **tx)
        .await
        .map_err(db_error)?;
    let lease_id: Option<String> = row.try_get("lease_id").map_err(db_error)?;
    let lease = match lease_id {
        Some(_) => Some(LeaseRow::from_row(&row).map_err(db_error)?.into()),
        None => None,
    };
    let head = (
        row.try_get("first_sequence").map_err(db_error)?,
        row.try_get("next_sequence").map_err(db_error)?,
    );
    Ok((lease, head))
}

impl PostgresStore {
    /// Inserts a batch numbered from the locked head, advances the head and trims below the
    /// retention in one statement (the `NOTIFY` follows the commit: `notify.rs`).
    pub(super) async fn insert_events(
        &self,
        tx: &mut Tx,
        tenant_id: &str,
        session_id: &str,
        numbered: &Numbered,
    ) -> StoreResult<()> {
        let (first, _) = numbered.from;
        let (new_first, new_next) = numbered.to;
        sqlx::query(
            "WITH inserted AS ( \
               INSERT INTO agent_events (tenant_id, session_id, sequence, envelope) \
               SELECT $1, $2, t.sequence, t.envelope::json \
                 FROM UNNEST($3::bigint[], $4::text[]) AS t(sequence, envelope)), \
             advanced AS ( \
               UPDATE stream_heads SET first_sequence = $5, next_sequence = $6 \
                WHERE tenant_id = $1 AND session_id = $2 AND stream_name = 'agent'), \
             trimmed AS ( \
               DELETE FROM agent_events \
                WHERE $7 AND tenant_id = $1 AND session_id = $2 \
                  AND sequence >= $8 AND sequence < $5) \
             SELECT 1",
        )
        .bind(tenant_id)
        .bind(session_id)
        .bind(&numbered.sequences)
        .bind(numbered.envelopes())
        .bind(new_first)
        .bind(new_next)
        // Only a batch that passes the retention trims; otherwise the DELETE is skipped whole.
        .bind(new_first > first)
        // From the old first: the index entries below it are earlier trims' dead rows, which a
        // scan from the session's start would walk on every trim until a vacuum removes them.
        .bind(first)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
        Ok(())
    }

    /// Commits an append transaction that left `head` after `events`, then announces them.
    async fn commit_append(
        &self,
        tx: Tx,
        tenant_id: &str,
        session_id: &str,
        head: Head,
        events: &[EventEnvelope],
    ) -> StoreResult<()> {
        if let Err(error) = self.commit(tx).await {
            self.inner.heads.forget(tenant_id, session_id);
            return Err(error);
        }
        self.announce_appended(tenant_id, session_id, head, events);
        Ok(())
    }
}

#[async_trait]
impl EventReader for PostgresStore {
    async fn get_event_by_idempotency_key(
        &self,
        tenant_id: &str,
        session_id: &str,
        idempotency_key: &str,
    ) -> StoreResult<Option<EventEnvelope>> {
        self.ensure_open()?;
        let row: Option<(Json<EventEnvelope>,)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT envelope FROM event_keys WHERE tenant_id = $1 AND session_id = $2 \
             AND idempotency_key = $3",
                )
                .bind(tenant_id)
                .bind(session_id)
                .bind(idempotency_key)
                .fetch_optional(self.pool())
            })
            .await?;
        Ok(row.map(|(envelope,)| envelope.0))
    }

    async fn read_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<EventPage> {
        check_event_limit(limit)?;
        self.ensure_open()?;
        // A follower checking that it caught up, at the head every commit would have moved: a
        // read of the database could only say the same (its next wait sleeps without asking).
        if self
            .inner
            .waiters
            .at_known_head(tenant_id, session_id, after)
        {
            return Ok(EventPage {
                events: Vec::new(),
                has_more: false,
            });
        }
        // One statement, so the head and the page come from one snapshot even while an append
        // trims the log.
        let rows: Vec<PgRow> = self
            .reading(|| {
                sqlx::query(
            "SELECT h.first_sequence, h.next_sequence, e.envelope::text FROM stream_heads h \
             LEFT JOIN LATERAL (SELECT envelope, sequence FROM agent_events \
               WHERE tenant_id = h.tenant_id AND session_id = h.session_id AND sequence > $3 \
               ORDER BY sequence LIMIT $4) e ON TRUE \
             WHERE h.tenant_id = $1 AND h.session_id = $2 AND h.stream_name = 'agent' \
             ORDER BY e.sequence",
        )
        .bind(tenant_id)
        .bind(session_id)
        .bind(to_i64(after))
        .bind(i64::from(limit) + 1)
        .fetch_all(self.pool())
            })
            .await?;
        let Some((first, next)) = rows.first().map(head_of_row).transpose()? else {
            return if after > 0 {
                Err(cursor_ahead_of_head())
            } else {
                Ok(EventPage {
                    events: Vec::new(),
                    has_more: false,
                })
            };
        };
        if after.saturating_add(1) < to_u64(first) {
            return Err(cursor_stale());
        }
        if after > to_u64(next).saturating_sub(1) {
            return Err(cursor_ahead_of_head());
        }
        let has_more = rows.len() > limit as usize;
        let mut events = Vec::with_capacity(rows.len().min(limit as usize));
        for row in rows.iter().take(limit as usize) {
            // Borrowed from the row and copied once, into the envelope's shared rendering.
            let Some(text) = row.try_get::<Option<&str>, _>(2).map_err(db_error)? else {
                continue;
            };
            events.push(EventEnvelope::from_stored_json(text.into()).map_err(stored_event_error)?);
        }
        Ok(EventPage { events, has_more })
    }

    async fn latest_event_sequence(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<u64>> {
        let range = self.event_stream_range(tenant_id, session_id).await?;
        Ok(range.map(|range| range.head_sequence))
    }

    async fn event_stream_range(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<EventRange>> {
        let head = read_head(self, tenant_id, session_id, AGENT).await?;
        Ok(head
            .filter(|(first, next)| next > first)
            .map(|(first, next)| EventRange {
                first_sequence: to_u64(first),
                head_sequence: to_u64(next - 1),
            }))
    }

    async fn wait_for_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
    ) -> StoreResult<()> {
        // Other processes announce their appends only to registered followers.
        self.inner
            .follower
            .register(&self.inner.pool, &self.inner.waiters)
            .await;
        // Subscribe before reading the head: an append committed after the read wakes the
        // receiver (locally, or through NOTIFY from another process), so nothing slips between.
        let mut receiver = self.inner.waiters.subscribe(tenant_id, session_id);
        let known = *receiver.borrow_and_update();
        if known > after {
            return Ok(());
        }
        // At the newest committed head this process knows, with notifications arriving: whatever
        // comes next wakes the receiver, no need to ask (see `notify::Waiters`).
        let current = known == after && known > 0 && self.inner.waiters.listening();
        if !current {
            let range = self.event_stream_range(tenant_id, session_id).await?;
            if range.is_some_and(|range| range.head_sequence > after) {
                return Ok(());
            }
        }
        // The safety net (decision S2): a lost notification delays a reader by at most this
        // much; callers re-read either way.
        let _woken_or_timed_out = tokio::time::timeout(POLL_FALLBACK, receiver.changed()).await;
        Ok(())
    }
}

#[async_trait]
impl EventLog for PostgresStore {
    async fn append_event(
        &self,
        tenant_id: &str,
        event: NewEvent,
        idempotency_key: Option<&str>,
    ) -> StoreResult<EventEnvelope> {
        let _appending = self
            .inner
            .waiters
            .appending_to(tenant_id, &event.session_id);
        self.retrying_conflicts(|| {
            self.append_event_once(tenant_id, event.clone(), idempotency_key)
        })
        .await
    }

    async fn append_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<EventEnvelope>> {
        let _appending = self.inner.waiters.appending_to(tenant_id, session_id);
        self.retrying_conflicts(|| {
            self.append_events_once(tenant_id, session_id, events.clone(), fence)
        })
        .await
    }

    async fn trim_events_by_age(&self, occurred_before: &str, limit: u32) -> StoreResult<u64> {
        self.ensure_open()?;
        let due: Vec<(String, String, i64)> = self
            .reading(|| {
                sqlx::query_as(
                    // Never the newest event: a session left with only that is not listed
                    // again and again ahead of those that can be trimmed.
                    "SELECT e.tenant_id, e.session_id, max(e.sequence) FROM agent_events e \
                     JOIN stream_heads h ON h.tenant_id = e.tenant_id \
                     AND h.session_id = e.session_id AND h.stream_name = 'agent' \
                     WHERE e.occurred_at <= $1 AND e.sequence < h.next_sequence - 1 \
                     GROUP BY e.tenant_id, e.session_id LIMIT $2",
                )
                .bind(occurred_before)
                .bind(i64::from(limit))
                .fetch_all(self.pool())
            })
            .await?;
        let mut trimmed = 0;
        for (tenant_id, session_id, newest_old) in &due {
            let moved = self
                .retrying_conflicts(|| self.trim_through(tenant_id, session_id, *newest_old))
                .await?;
            if moved {
                trimmed += 1;
            }
        }
        Ok(trimmed)
    }
}

impl PostgresStore {
    /// Moves the session's first retained sequence past `newest_old`, keeping its newest event;
    /// whether it moved. Under the head row's lock, like an append's own trim.
    async fn trim_through(
        &self,
        tenant_id: &str,
        session_id: &str,
        newest_old: i64,
    ) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let head: Option<(i64, i64)> = sqlx::query_as(
            "SELECT first_sequence, next_sequence FROM stream_heads WHERE tenant_id = $1 \
             AND session_id = $2 AND stream_name = 'agent' FOR UPDATE",
        )
        .bind(tenant_id)
        .bind(session_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let Some((first, next)) = head else {
            self.commit(tx).await?;
            return Ok(false);
        };
        let new_first = (newest_old + 1).min(next - 1);
        if new_first <= first {
            self.commit(tx).await?;
            return Ok(false);
        }
        sqlx::query(
            "UPDATE stream_heads SET first_sequence = $3 WHERE tenant_id = $1 AND session_id = $2 \
             AND stream_name = 'agent'",
        )
        .bind(tenant_id)
        .bind(session_id)
        .bind(new_first)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        sqlx::query(
            "DELETE FROM agent_events WHERE tenant_id = $1 AND session_id = $2 \
             AND sequence >= $3 AND sequence < $4",
        )
        .bind(tenant_id)
        .bind(session_id)
        .bind(first)
        .bind(new_first)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        self.commit(tx).await?;
        Ok(true)
    }

    /// One attempt of the transaction of `append_event` (re-run whole on a deadlock).
    async fn append_event_once(
        &self,
        tenant_id: &str,
        event: NewEvent,
        idempotency_key: Option<&str>,
    ) -> StoreResult<EventEnvelope> {
        check_event_ids(tenant_id, &event.session_id)?;
        let session_id = event.session_id.clone();
        let mut tx = self.begin().await?;
        let now = self.now();
        let (lease_row, head) = lock_session_stream(&mut tx, tenant_id, &session_id, AGENT).await?;
        if let Some(key) = idempotency_key {
            let known: Option<(Json<EventEnvelope>,)> = sqlx::query_as(
                "SELECT envelope FROM event_keys WHERE tenant_id = $1 AND session_id = $2 \
                 AND idempotency_key = $3",
            )
            .bind(tenant_id)
            .bind(&session_id)
            .bind(key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
            if let Some((stored,)) = known {
                return Ok(stored.0);
            }
        }
        // The unfenced path: only for sessions that never had an execution lease.
        crate::rules::check_fence(lease_row.as_ref(), None, &session_id, now)?;
        let numbered = Numbered::new(self, head, vec![event]);
        self.insert_events(&mut tx, tenant_id, &session_id, &numbered)
            .await?;
        let stored = numbered.stored[0].clone();
        if let Some(key) = idempotency_key {
            sqlx::query(
                "INSERT INTO event_keys (tenant_id, session_id, idempotency_key, envelope) \
                 VALUES ($1, $2, $3, $4::json)",
            )
            .bind(tenant_id)
            .bind(&session_id)
            .bind(key)
            .bind(stored.json().as_ref())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        self.commit_append(tx, tenant_id, &session_id, numbered.to, &numbered.stored)
            .await?;
        Ok(stored)
    }
}

impl PostgresStore {
    /// One attempt of `append_events` (re-run whole on a deadlock): in one statement from the
    /// head this process knows, else in the full transaction (`append.rs`).
    async fn append_events_once(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<EventEnvelope>> {
        check_event_ids(tenant_id, session_id)?;
        check_batch_session(&events, session_id)?;
        self.ensure_open()?;
        let mut unknown = None;
        if let Some(head) = self.inner.heads.get(tenant_id, session_id)
            && !events.is_empty()
        {
            match self
                .append_in_one_statement(tenant_id, session_id, head, events.clone(), fence)
                .await?
            {
                Attempt::Stored(stored) => return Ok(stored),
                Attempt::Declined => {}
                Attempt::Unknown(numbered) => unknown = Some(numbered),
            }
        }
        let appended = self
            .append_events_in_transaction(tenant_id, session_id, events, fence, unknown.as_ref())
            .await;
        match appended {
            Err(error) if unknown.is_some() => Err(unknown_outcome(&error)),
            appended => appended,
        }
    }

    /// The full transaction of `append_events`. `unknown` is a batch a broken statement may
    /// have stored: if the log holds it, that is the answer.
    async fn append_events_in_transaction(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
        unknown: Option<&Numbered>,
    ) -> StoreResult<Vec<EventEnvelope>> {
        let mut tx = self.begin().await?;
        let now = self.now();
        if events.is_empty() {
            // Still a fence check: an empty batch under a lost lease is refused all the same.
            super::check_fence_in(self, &mut tx, tenant_id, session_id, fence, now).await?;
            return Ok(Vec::new());
        }
        let (lease_row, head) = lock_session_stream(&mut tx, tenant_id, session_id, AGENT).await?;
        if let Some(unknown) = unknown
            && unknown.is_stored(&mut tx, tenant_id, session_id).await?
        {
            self.commit_append(tx, tenant_id, session_id, head, &unknown.stored)
                .await?;
            return Ok(unknown.stored.clone());
        }
        check_fence_row(self, lease_row.as_ref(), session_id, fence, now)?;
        let numbered = Numbered::new(self, head, events);
        self.insert_events(&mut tx, tenant_id, session_id, &numbered)
            .await?;
        self.commit_append(tx, tenant_id, session_id, numbered.to, &numbered.stored)
            .await?;
        Ok(numbered.stored)
    }
}

/// An append whose first statement broke and whose outcome could not be checked: it may be
/// stored, so a retry could store it twice.
fn unknown_outcome(error: &StoreError) -> StoreError {
    match error {
        StoreError::Backend { message, .. } | StoreError::Conflict(message) => {
            StoreError::Backend {
                message: format!("PostgreSQL append outcome is unknown ({message})"),
                retry_safe: false,
            }
        }
        other => other.clone(),
    }
}
