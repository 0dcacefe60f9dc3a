//! The durable execution journal (storage.md §7.1, §3.3): contiguous batches from sequence 1, a
//! compare-and-set on the head, a per-session quota, no retention, fenced in the same atomic step.

use agent_runtime::ids::nanoid;
use agent_runtime::timefmt::format_iso_ms;
use async_trait::async_trait;

use super::state::{Scope, State, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::journal::JournalEntry;
use crate::model::{
    DURABLE_SCHEMA_VERSION, DurableAppendOutcome, DurableEvent, DurableEventDraft, DurablePage,
    ExecutionFence, ExpectedSequence, HistoryProgress, HistoryState, MAX_EVENT_PAGE,
    TranscriptMutation,
};
use crate::ports::DurableJournal;

fn validate_drafts(drafts: &[DurableEventDraft]) -> StoreResult<()> {
    if drafts.is_empty() {
        return Err(StoreError::runtime(
            RuntimeErrorCode::DurableInvalidAppend,
            "A durable append requires at least one event",
        ));
    }
    if let Some(index) = drafts.iter().position(|d| d.event_type.trim().is_empty()) {
        return Err(StoreError::runtime(
            RuntimeErrorCode::DurableInvalidAppend,
            format!("Invalid durable event draft at index {index}"),
        ));
    }
    Ok(())
}

fn describe(head: Option<u64>) -> String {
    head.map_or_else(|| "an empty stream".to_owned(), |h| format!("head {h}"))
}

impl State {
    fn append_durable(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
    ) -> StoreResult<DurableAppendOutcome> {
        let head = self
            .durable
            .get(key)
            .and_then(|events| events.last())
            .map(|event| event.sequence);
        let expected_head = match expected {
            ExpectedSequence::Any => head,
            ExpectedSequence::Empty => None,
            ExpectedSequence::At(sequence) => Some(sequence),
        };
        if expected_head != head {
            return Err(StoreError::runtime(
                RuntimeErrorCode::DurableSequenceConflict,
                format!(
                    "Durable append for Session {} expected {} but found {}",
                    key.1,
                    describe(expected_head),
                    describe(head)
                ),
            ));
        }
        let base = head.unwrap_or(0);
        let quota = cx.options.max_durable_events_per_session;
        if base.saturating_add(drafts.len() as u64) > quota {
            return Err(StoreError::runtime(
                RuntimeErrorCode::QuotaExceeded,
                format!(
                    "Session {} exceeded its quota of {quota} durable events",
                    key.1
                ),
            ));
        }
        // One shared commit time for the whole batch, like the reference's `recordedAt`.
        let recorded_at = format_iso_ms(cx.now);
        let events: Vec<DurableEvent> = drafts
            .into_iter()
            .zip(base + 1..)
            .map(|(draft, sequence)| DurableEvent {
                schema_version: DURABLE_SCHEMA_VERSION,
                event_id: nanoid(),
                sequence,
                session_id: key.1.clone(),
                event_type: draft.event_type,
                data: draft.data,
                recorded_at: recorded_at.clone(),
                occurred_at: draft.occurred_at.unwrap_or_else(|| recorded_at.clone()),
                correlation: draft.correlation,
            })
            .collect();
        let stream = self.durable.entry(key.clone()).or_default();
        stream.extend(events.iter().cloned());
        for event in &events {
            cx.record(JournalEntry::DurableEvent {
                tenant_id: key.0.clone(),
                event: event.clone(),
            });
        }
        self.mark_requests_covered(cx, key, &events);
        let last_sequence = base + events.len() as u64;
        Ok(DurableAppendOutcome {
            events,
            previous_sequence: head,
            last_sequence,
        })
    }

    /// After a batch with `request_completed`, the transcript covers that request (the
    /// PostgreSQL store's best-effort history update, done here in the same atomic step).
    fn mark_requests_covered(&mut self, cx: &mut Ctx<'_>, key: &Scope, events: &[DurableEvent]) {
        let completed = events
            .iter()
            .rev()
            .filter(|event| event.event_type == "request_completed")
            .find_map(|event| event.correlation.request_id.clone());
        let Some(request_id) = completed else {
            return;
        };
        if !self.transcripts.contains_key(key) {
            return;
        }
        let progress = HistoryProgress {
            state: HistoryState::Complete,
            request_id: Some(request_id.clone()),
            turn_id: None,
            message_id: None,
            covered_request_id: Some(request_id),
            updated_at_ms: cx.now,
            detail: None,
            repaired_messages: None,
        };
        let mutation = TranscriptMutation::SaveHistoryProgress(progress);
        // Cannot fail: the transcript exists and a history merge has no validation.
        if let Err(error) = self.mutate_transcript(cx, key, mutation) {
            tracing::warn!(%error, session_id = %key.1, "history progress update failed");
        }
    }

    fn read_durable(&self, key: &Scope, after: u64, limit: u32) -> StoreResult<DurablePage> {
        let events = self.durable.get(key).map(Vec::as_slice).unwrap_or_default();
        let head = events.last().map(|event| event.sequence);
        if after > head.unwrap_or(0) {
            return Err(StoreError::runtime(
                RuntimeErrorCode::DurableInvalidCursor,
                format!(
                    "Durable cursor {after} is ahead of the head of Session {}",
                    key.1
                ),
            ));
        }
        // Sequences are contiguous from 1, so sequence n sits at index n - 1.
        let start = usize::try_from(after).unwrap_or(usize::MAX);
        let page: Vec<DurableEvent> = events
            .iter()
            .skip(start)
            .take(limit as usize)
            .cloned()
            .collect();
        let has_more = events.len() > start.saturating_add(page.len());
        Ok(DurablePage {
            events: page,
            head_sequence: head,
            has_more,
        })
    }
}

#[async_trait]
impl<B: Backend> DurableJournal for StoreEngine<B> {
    async fn append_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<DurableAppendOutcome> {
        if tenant_id.trim().is_empty() || session_id.trim().is_empty() {
            return Err(StoreError::runtime(
                RuntimeErrorCode::DurableInvalidAppend,
                "Durable append tenant and session ids must not be blank",
            ));
        }
        validate_drafts(&drafts)?;
        self.write(|state, cx| {
            let key = scope(tenant_id, session_id);
            // Fence first, then the head (the reference's lock order: execution, then stream).
            state.check_fence(&key, fence, cx.now)?;
            state.append_durable(cx, &key, drafts, expected)
        })
    }

    async fn read_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<DurablePage> {
        if !(1..=MAX_EVENT_PAGE).contains(&limit) {
            return Err(StoreError::runtime(
                RuntimeErrorCode::DurableInvalidCursor,
                "Durable page limit must be between 1 and 1000",
            ));
        }
        self.read(|state, _| state.read_durable(&scope(tenant_id, session_id), after, limit))
    }

    async fn durable_head(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<u64>> {
        self.read(|state, _| {
            Ok(state
                .durable
                .get(&scope(tenant_id, session_id))
                .and_then(|events| events.last())
                .map(|event| event.sequence))
        })
    }
}
