//! The agent event log (docs/storage.md §1.4): per-session sequences from 1, retention from the
//! front, idempotency keys that outlive retention, and live-tail wake-ups.

use agent_runtime::protocol::EventEnvelope;
use async_trait::async_trait;
use tokio::sync::watch;

use super::state::{EventLogState, Scope, State, kept_as_text, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::StoreResult;
use crate::journal::JournalEntry;
use crate::model::{EventPage, EventRange, ExecutionFence, NewEvent};
use crate::ports::{EventLog, EventReader};
use crate::rules::{
    check_batch_session, check_event_ids, check_event_limit, cursor_ahead_of_head, cursor_stale,
    sequence_events,
};

impl State {
    /// Sequences and stores one event, records its key, journals it. Callers wake waiters.
    fn append_one(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        event: NewEvent,
        idempotency_key: Option<&str>,
    ) -> EventEnvelope {
        let log = self
            .event_logs
            .entry(key.clone())
            .or_insert_with(EventLogState::new);
        let envelope = sequence_events(vec![event], log.next_sequence, cx.now).remove(0);
        let stored = kept_as_text(&envelope);
        let idempotency_key = idempotency_key.map(str::to_owned);
        let dropped = log.push(
            stored.clone(),
            idempotency_key.clone(),
            cx.options.retention(),
        );
        cx.dropped += dropped.line_bytes(key);
        if let Some(idempotency_key) = &idempotency_key {
            self.event_keys
                .entry(key.clone())
                .or_default()
                .insert(idempotency_key.clone(), stored.clone());
        }
        cx.record(JournalEntry::Event {
            tenant_id: key.0.clone(),
            session_id: key.1.clone(),
            event: stored,
            idempotency_key,
        });
        if let Some(kind) = crate::outbox::webhook_type_of_event(&envelope) {
            self.enqueue_webhooks(
                cx,
                &key.0,
                &key.1,
                kind,
                || serde_json::json!({ "event": envelope }),
            );
        }
        envelope
    }

    /// Wakes every `wait_for_events` of the session (even if the journal write then fails, like
    /// the reference), dropping the channel once nobody listens.
    fn wake_waiters(&mut self, key: &Scope) {
        let head = self.event_logs.get(key).and_then(EventLogState::head);
        if let Some(sender) = self.waiters.get(key) {
            if sender.receiver_count() == 0 {
                self.waiters.remove(key);
            } else {
                sender.send_replace(head.unwrap_or(0));
            }
        }
    }

    #[cfg(any(test, feature = "testing"))]
    pub(super) fn reset_event_log(&mut self, cx: &mut Ctx<'_>, tenant_id: &str, session_id: &str) {
        let key = scope(tenant_id, session_id);
        cx.dropped += self.reset_line_bytes(&key);
        if self.event_logs.remove(&key).is_some() {
            cx.record(JournalEntry::EventLogReset {
                tenant_id: key.0,
                session_id: key.1,
            });
        }
    }

    fn read_events(&self, key: &Scope, after: u64, limit: u32) -> StoreResult<EventPage> {
        let Some(log) = self.event_logs.get(key) else {
            return if after > 0 {
                Err(cursor_ahead_of_head())
            } else {
                Ok(EventPage {
                    events: Vec::new(),
                    has_more: false,
                })
            };
        };
        if after.saturating_add(1) < log.first_sequence {
            return Err(cursor_stale());
        }
        if after > log.next_sequence.saturating_sub(1) {
            return Err(cursor_ahead_of_head());
        }
        let skip =
            usize::try_from(after.saturating_add(1) - log.first_sequence).unwrap_or(usize::MAX);
        let limit = limit as usize;
        let events: Vec<EventEnvelope> = log
            .events
            .iter()
            .skip(skip)
            .take(limit)
            .map(|(event, _)| event.clone())
            .collect();
        let has_more = log.events.len() > skip.saturating_add(limit);
        Ok(EventPage { events, has_more })
    }
}

#[async_trait]
impl<B: Backend> EventReader for StoreEngine<B> {
    async fn get_event_by_idempotency_key(
        &self,
        tenant_id: &str,
        session_id: &str,
        idempotency_key: &str,
    ) -> StoreResult<Option<EventEnvelope>> {
        self.read(|state, _| {
            Ok(state
                .event_keys
                .get(&scope(tenant_id, session_id))
                .and_then(|keys| keys.get(idempotency_key))
                .cloned())
        })
    }

    async fn read_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<EventPage> {
        check_event_limit(limit)?;
        self.read(|state, _| state.read_events(&scope(tenant_id, session_id), after, limit))
    }

    async fn latest_event_sequence(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<u64>> {
        self.read(|state, _| {
            let log = state.event_logs.get(&scope(tenant_id, session_id));
            Ok(log
                .filter(|log| !log.events.is_empty())
                .and_then(EventLogState::head))
        })
    }

    async fn event_stream_range(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<EventRange>> {
        self.read(|state, _| {
            let log = state.event_logs.get(&scope(tenant_id, session_id));
            Ok(log.and_then(|log| {
                log.head().map(|head_sequence| EventRange {
                    first_sequence: log.first_sequence,
                    head_sequence,
                })
            }))
        })
    }

    async fn wait_for_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
    ) -> StoreResult<()> {
        // Subscribe under the same lock that appends take, so no append can slip between the
        // check and the subscription.
        let receiver: Option<watch::Receiver<u64>> = self.with_state_mut(|state, _| {
            let key = scope(tenant_id, session_id);
            let head = state.event_logs.get(&key).and_then(EventLogState::head);
            if head.is_some_and(|head| head > after) {
                return Ok(None);
            }
            let sender = state
                .waiters
                .entry(key)
                .or_insert_with(|| watch::channel(0).0);
            Ok(Some(sender.subscribe()))
        })?;
        if let Some(mut receiver) = receiver {
            // An error means the store closed and dropped the sender: resolve, callers re-read.
            let _closed = receiver.changed().await;
        }
        Ok(())
    }
}

#[async_trait]
impl<B: Backend> EventLog for StoreEngine<B> {
    async fn append_event(
        &self,
        tenant_id: &str,
        event: NewEvent,
        idempotency_key: Option<&str>,
    ) -> StoreResult<EventEnvelope> {
        check_event_ids(tenant_id, &event.session_id)?;
        self.write(|state, cx| {
            let key = scope(tenant_id, &event.session_id);
            if let Some(idempotency_key) = idempotency_key {
                let known = state
                    .event_keys
                    .get(&key)
                    .and_then(|k| k.get(idempotency_key));
                if let Some(stored) = known {
                    return Ok(stored.clone());
                }
            }
            // The unfenced path: only for sessions that never had an execution lease.
            state.check_fence(&key, None, cx.now)?;
            let stored = state.append_one(cx, &key, event, idempotency_key);
            state.wake_waiters(&key);
            Ok(stored)
        })
    }

    async fn append_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<EventEnvelope>> {
        check_event_ids(tenant_id, session_id)?;
        check_batch_session(&events, session_id)?;
        self.write(|state, cx| {
            let key = scope(tenant_id, session_id);
            state.check_fence(&key, fence, cx.now)?;
            let stored: Vec<EventEnvelope> = events
                .into_iter()
                .map(|event| state.append_one(cx, &key, event, None))
                .collect();
            if !stored.is_empty() {
                state.wake_waiters(&key);
            }
            Ok(stored)
        })
    }

    async fn trim_events_by_age(&self, occurred_before: &str, limit: u32) -> StoreResult<u64> {
        self.write(|state, cx| {
            let due: Vec<(Scope, u64)> = state
                .event_logs
                .iter()
                .filter_map(|(key, log)| Some((key.clone(), log.age_trim_point(occurred_before)?)))
                .take(limit as usize)
                .collect();
            for (key, first_sequence) in &due {
                if let Some(log) = state.event_logs.get_mut(key) {
                    cx.dropped += log.trim_to(*first_sequence).line_bytes(key);
                }
                cx.record(JournalEntry::EventsTrimmed {
                    tenant_id: key.0.clone(),
                    session_id: key.1.clone(),
                    first_sequence: *first_sequence,
                });
            }
            Ok(due.len() as u64)
        })
    }
}
