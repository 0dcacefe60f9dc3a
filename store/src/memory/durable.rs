//! The durable execution journal (docs/storage.md §7.1, §3.3): contiguous batches from sequence 1,
//! a compare-and-set on the head, a per-session quota, no retention, fenced in the same atomic
//! step.

use async_trait::async_trait;

use super::state::{Scope, State, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::StoreResult;
use crate::frozen::Frozen;
use crate::journal::JournalEntry;
use crate::model::{
    DurableAppendOutcome, DurableEvent, DurableEventDraft, DurablePage, ExecutionFence,
    ExpectedSequence,
};
use crate::ports::DurableJournal;
use crate::rules::{
    build_durable_events, check_durable_append, check_durable_head, check_durable_limit,
    coverage_update, durable_cursor_ahead,
};

impl State {
    fn append_durable(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
    ) -> StoreResult<DurableAppendOutcome> {
        let head = self.durable_head(key);
        let quota = cx.options.max_durable_events_per_session;
        check_durable_head(&key.1, head, expected, drafts.len(), quota)?;
        let events = build_durable_events(&key.1, drafts, head, cx.now);
        let stream = self.durable.entry(key.clone()).or_default();
        for event in &events {
            let frozen = Frozen::new(event);
            stream.push(frozen.clone());
            cx.record(JournalEntry::DurableEvent {
                tenant_id: key.0.clone(),
                event: frozen,
            });
        }
        for event in &events {
            if let Some(kind) = crate::outbox::webhook_type_of_durable(event) {
                self.enqueue_webhooks(
                    cx,
                    &key.0,
                    &key.1,
                    kind,
                    || serde_json::json!({ "journal": event }),
                );
            }
        }
        self.mark_requests_covered(cx, key, &events);
        let last_sequence = head.unwrap_or(0) + events.len() as u64;
        Ok(DurableAppendOutcome {
            events,
            previous_sequence: head,
            last_sequence,
        })
    }

    /// After a batch with `request_completed`, the transcript covers that request (the
    /// PostgreSQL store's best-effort history update, done here in the same atomic step).
    fn mark_requests_covered(&mut self, cx: &mut Ctx<'_>, key: &Scope, events: &[DurableEvent]) {
        let Some(mutation) = coverage_update(events, cx.now) else {
            return;
        };
        if !self.transcripts.contains_key(key) {
            return;
        }
        // Cannot fail: the transcript exists and a history merge has no validation.
        if let Err(error) = self.mutate_transcript(cx, key, mutation) {
            tracing::warn!(%error, session_id = %key.1, "history progress update failed");
        }
    }

    fn read_durable(&self, key: &Scope, after: u64, limit: u32) -> StoreResult<DurablePage> {
        let events = self.durable.get(key).map(Vec::as_slice).unwrap_or_default();
        let head = self.durable_head(key);
        if after > head.unwrap_or(0) {
            return Err(durable_cursor_ahead(after, &key.1));
        }
        // Sequences are contiguous from 1, so sequence n sits at index n - 1.
        let start = usize::try_from(after).unwrap_or(usize::MAX);
        let page: Vec<DurableEvent> = events
            .iter()
            .skip(start)
            .take(limit as usize)
            .map(Frozen::thaw)
            .collect();
        let has_more = events.len() > start.saturating_add(page.len());
        Ok(DurablePage {
            events: page,
            head_sequence: head,
            has_more,
        })
    }

    /// Sequences are contiguous from 1, so the head is the count.
    fn durable_head(&self, key: &Scope) -> Option<u64> {
        let count = self.durable.get(key).map_or(0, Vec::len);
        (count > 0).then_some(count as u64)
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
        check_durable_append(tenant_id, session_id, &drafts)?;
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
        check_durable_limit(limit)?;
        self.read(|state, _| state.read_durable(&scope(tenant_id, session_id), after, limit))
    }

    async fn durable_head(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<u64>> {
        self.read(|state, _| Ok(state.durable_head(&scope(tenant_id, session_id))))
    }
}
