//! The durable execution journal (docs/storage.md §7.1, §3.3) in `durable_events`: contiguous
//! batches from sequence 1 under the locked `durable` stream head, a compare-and-set on the head, a
//! quota, no retention. Fence check, append and the history-coverage update of the transcript
//! commit in one transaction (the reference did the latter best-effort afterwards; here it cannot
//! be lost).

use async_trait::async_trait;
use sqlx::types::Json;

use super::events::{DURABLE, lock_session_stream, read_head};
use super::transcripts::Writer;
use super::{PostgresStore, Tx, check_fence_row, db_error, json_text, to_i64, to_u64};
use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::model::{
    DurableAppendOutcome, DurableEvent, DurableEventDraft, DurablePage, ExecutionFence,
    ExpectedSequence, RequestStep, RequestStepWritten, TranscriptEntry, TranscriptMutation,
};
use crate::ports::DurableJournal;
use crate::rules::{
    build_durable_events, check_durable_append, check_durable_head, check_durable_limit,
    coverage_update, durable_cursor_ahead,
};

fn head_of((_, next): (i64, i64)) -> Option<u64> {
    (next > 1).then(|| to_u64(next - 1))
}

/// The transcript after a journal batch: `change` (a request step's own change) and, after a
/// batch with `request_completed`, the coverage of that request, in one write (the caller
/// checked `writer`'s fence). Coverage alone of a session without a transcript marks nothing.
/// Returns the entries `change` appended.
async fn change_transcript_after(
    store: &PostgresStore,
    tx: &mut Tx,
    writer: &Writer<'_>,
    (events, change): (&[DurableEvent], Option<TranscriptMutation>),
    now: u64,
) -> StoreResult<Vec<TranscriptEntry>> {
    let coverage_only = change.is_none();
    let mutations: Vec<TranscriptMutation> = change
        .into_iter()
        .chain(coverage_update(events, now))
        .collect();
    if mutations.is_empty() {
        return Ok(Vec::new());
    }
    match super::transcripts::mutate_in(store, tx, writer, &mutations, now).await {
        Err(StoreError::Runtime {
            code: RuntimeErrorCode::TranscriptNotFound,
            ..
        }) if coverage_only => Ok(Vec::new()),
        other => other,
    }
}

#[async_trait]
impl DurableJournal for PostgresStore {
    async fn append_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<DurableAppendOutcome> {
        self.retrying_conflicts(|| {
            let drafts = drafts.clone();
            self.append_durable_once(tenant_id, session_id, drafts, expected, fence)
        })
        .await
    }

    fn writes_steps_atomically(&self) -> bool {
        true
    }

    async fn write_request_step(
        &self,
        tenant_id: &str,
        session_id: &str,
        step: RequestStep,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<RequestStepWritten> {
        self.write_step_in_one_commit(tenant_id, session_id, step, fence)
            .await
    }

    async fn read_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<DurablePage> {
        check_durable_limit(limit)?;
        self.ensure_open()?;
        // One statement: the head and the page come from one snapshot.
        let rows: Vec<(Option<i64>, Option<Json<DurableEvent>>)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT h.next_sequence, e.event FROM (SELECT 1) one \
             LEFT JOIN stream_heads h ON h.tenant_id = $1 AND h.session_id = $2 \
               AND h.stream_name = 'durable' \
             LEFT JOIN LATERAL (SELECT event, sequence FROM durable_events \
               WHERE tenant_id = $1 AND session_id = $2 AND sequence > $3 \
               ORDER BY sequence LIMIT $4) e ON TRUE \
             ORDER BY e.sequence",
                )
                .bind(tenant_id)
                .bind(session_id)
                .bind(to_i64(after))
                .bind(i64::from(limit) + 1)
                .fetch_all(self.pool())
            })
            .await?;
        let head = rows
            .first()
            .and_then(|(next, _)| *next)
            .and_then(|next| head_of((1, next)));
        if after > head.unwrap_or(0) {
            return Err(durable_cursor_ahead(after, session_id));
        }
        let mut events: Vec<DurableEvent> = rows
            .into_iter()
            .filter_map(|(_, event)| event.map(|json| json.0))
            .collect();
        let has_more = events.len() > limit as usize;
        events.truncate(limit as usize);
        Ok(DurablePage {
            events,
            head_sequence: head,
            has_more,
        })
    }

    async fn durable_head(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<u64>> {
        let head = read_head(self, tenant_id, session_id, DURABLE).await?;
        Ok(head.and_then(head_of))
    }
}

impl PostgresStore {
    /// One attempt of `append_durable` (re-run whole on a deadlock), in the shared transaction
    /// of the next batch (`shared_commit.rs`).
    async fn append_durable_once(
        &self,
        tenant_id: &str,
        session_id: &str,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<DurableAppendOutcome> {
        check_durable_append(tenant_id, session_id, &drafts)?;
        let write = (
            self.clone(),
            (tenant_id.to_owned(), session_id.to_owned()),
            drafts,
            fence.cloned(),
        );
        self.shared_write(tenant_id, session_id, write, move |tx, write| {
            let (store, (tenant, session), drafts, fence) = write;
            let drafts = drafts.clone();
            Box::pin(store.append_durable_in(tx, tenant, session, drafts, expected, fence.as_ref()))
        })
        .await
    }

    /// `append_durable_in` for a request step: from the durable head this process's last step
    /// of the session left, in one statement (`append_durable_events`, migration 19) when that is
    /// still the head and the fence holds; otherwise (or with no head known) on the locked head.
    /// `change` is the step's transcript change, written with the journal's coverage.
    pub(super) async fn append_durable_known_in(
        &self,
        tx: &mut Tx,
        writer: &Writer<'_>,
        drafts: Vec<DurableEventDraft>,
        change: Option<TranscriptMutation>,
    ) -> StoreResult<(DurableAppendOutcome, Vec<TranscriptEntry>)> {
        let (tenant_id, session_id, fence) = (writer.tenant_id, writer.session_id, writer.fence);
        let quota = self.options().max_durable_events_per_session;
        let known = self.inner.durable_heads.get(tenant_id, session_id);
        if let Some((_, next)) = known {
            let head = head_of((1, next));
            let any = ExpectedSequence::Any;
            if check_durable_head(session_id, head, any, drafts.len(), quota).is_ok() {
                let now = self.now();
                let events = build_durable_events(session_id, drafts.clone(), head, now);
                let sequences: Vec<i64> = events.iter().map(|e| to_i64(e.sequence)).collect();
                let documents: Vec<String> = events.iter().map(json_text).collect();
                let (made,): (bool,) =
                    sqlx::query_as("SELECT append_durable_events($1, $2, $3, $4, $5, $6, $7, $8)")
                        .bind(tenant_id)
                        .bind(session_id)
                        .bind(next)
                        .bind(&sequences)
                        .bind(&documents)
                        .bind(fence.map(|fence| fence.lease_id.as_str()))
                        .bind(fence.map(|fence| to_i64(fence.fencing_token)))
                        .bind(to_i64(now))
                        .fetch_one(&mut **tx)
                        .await
                        .map_err(db_error)?;
                if made {
                    let entries =
                        change_transcript_after(self, tx, writer, (&events, change), now).await?;
                    let counter = &self.inner.known_head_journal_writes;
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let appended = DurableAppendOutcome {
                        last_sequence: head.unwrap_or(0) + events.len() as u64,
                        events,
                        previous_sequence: head,
                    };
                    return Ok((appended, entries));
                }
            }
        }
        let fenced = (tenant_id, session_id, fence);
        self.append_durable_locked_in(tx, fenced, drafts, ExpectedSequence::Any, change)
            .await
    }

    /// Remembers the durable head a committed step left (`None`: forgets it).
    pub(super) fn durable_head_after(
        &self,
        tenant_id: &str,
        session_id: &str,
        written: Option<&DurableAppendOutcome>,
    ) {
        let heads = &self.inner.durable_heads;
        match written {
            Some(outcome) => {
                let next = to_i64(outcome.last_sequence) + 1;
                heads.remember(tenant_id, session_id, (1, next));
            }
            None => heads.forget(tenant_id, session_id),
        }
    }

    /// The statements of `append_durable`, on `tx`.
    pub(super) async fn append_durable_in(
        &self,
        tx: &mut Tx,
        tenant_id: &str,
        session_id: &str,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<DurableAppendOutcome> {
        let fenced = (tenant_id, session_id, fence);
        let (appended, _) = self
            .append_durable_locked_in(tx, fenced, drafts, expected, None)
            .await?;
        Ok(appended)
    }

    /// The journal append on the head read under its lock, then `change` and the coverage.
    async fn append_durable_locked_in(
        &self,
        tx: &mut Tx,
        (tenant_id, session_id, fence): (&str, &str, Option<&ExecutionFence>),
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
        change: Option<TranscriptMutation>,
    ) -> StoreResult<(DurableAppendOutcome, Vec<TranscriptEntry>)> {
        let now = self.now();
        // Fence first, then the head (lock order: execution, then stream).
        let (lease_row, (first, next)) =
            lock_session_stream(tx, tenant_id, session_id, DURABLE).await?;
        check_fence_row(self, lease_row.as_ref(), session_id, fence, now)?;
        let head = head_of((first, next));
        let quota = self.options().max_durable_events_per_session;
        check_durable_head(session_id, head, expected, drafts.len(), quota)?;
        let events = build_durable_events(session_id, drafts, head, now);
        let sequences: Vec<i64> = events.iter().map(|e| to_i64(e.sequence)).collect();
        let documents: Vec<String> = events.iter().map(json_text).collect();
        let last_sequence = head.unwrap_or(0) + events.len() as u64;
        sqlx::query(
            "WITH inserted AS ( \
               INSERT INTO durable_events (tenant_id, session_id, sequence, event) \
               SELECT $1, $2, t.sequence, t.event::json \
                 FROM UNNEST($3::bigint[], $4::text[]) AS t(sequence, event)) \
             UPDATE stream_heads SET first_sequence = $5, next_sequence = $6 \
              WHERE tenant_id = $1 AND session_id = $2 AND stream_name = 'durable'",
        )
        .bind(tenant_id)
        .bind(session_id)
        .bind(&sequences)
        .bind(&documents)
        .bind(first)
        .bind(to_i64(last_sequence) + 1)
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
        let writer = Writer {
            tenant_id,
            session_id,
            fence,
            fence_checked: true,
        };
        let entries = change_transcript_after(self, tx, &writer, (&events, change), now).await?;
        let appended = DurableAppendOutcome {
            events,
            previous_sequence: head,
            last_sequence,
        };
        Ok((appended, entries))
    }
}
