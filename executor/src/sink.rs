//! Where a session's events go. Invariant 1: an event is visible to clients only after the store
//! has it with its sequence, so the sink appends first and only then wakes followers.

use std::sync::Arc;

use agent_runtime::protocol::EventEnvelope;
use agent_runtime::telemetry::{EventMetric, SharedTelemetry, best_effort};
use agent_runtime_store::follow::{HandOff, LocalSignals};
use agent_runtime_store::{
    ExecutionFence, NewEvent, RequestStep, RequestStepWritten, Store, StoreError,
};
use async_trait::async_trait;

#[async_trait]
pub trait EventSink: Send + Sync + std::fmt::Debug {
    /// Appends the event (under the session's fence, when it has one) and returns it with its
    /// sequence and id.
    async fn publish(
        &self,
        tenant_id: &str,
        event: NewEvent,
        fence: Option<&ExecutionFence>,
    ) -> Result<EventEnvelope, StoreError>;

    /// Appends events of one session in one atomic step (group commit of streaming deltas:
    /// contiguous sequences, one transaction, one wake-up).
    async fn publish_batch(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> Result<Vec<EventEnvelope>, StoreError>;

    /// Whether [`EventSink::write_step`] stores a step in one commit.
    fn writes_steps_atomically(&self) -> bool;

    /// Writes one step of a request (`DurableJournal::write_request_step`) and announces its
    /// events once stored.
    async fn write_step(
        &self,
        tenant_id: &str,
        session_id: &str,
        step: RequestStep,
        fence: Option<&ExecutionFence>,
    ) -> Result<RequestStepWritten, StoreError>;
}

/// Appends to the shared store, then wakes this process's followers (`Subscribe` streams); SSE
/// streams of the same process are woken by the store itself.
#[derive(Clone)]
pub struct StoreSink {
    store: Arc<dyn Store>,
    telemetry: SharedTelemetry,
    signals: Option<Arc<LocalSignals>>,
    hand_off: Option<Arc<HandOff>>,
}

impl StoreSink {
    pub fn new(store: Arc<dyn Store>, telemetry: SharedTelemetry) -> Self {
        Self {
            store,
            telemetry,
            signals: None,
            hand_off: None,
        }
    }

    /// Also hand every acknowledged append to this process's own followers.
    pub fn with_hand_off(mut self, hand_off: Arc<HandOff>) -> Self {
        self.hand_off = Some(hand_off);
        self
    }

    /// Also notify these signals after every append.
    pub fn with_signals(mut self, signals: Arc<LocalSignals>) -> Self {
        self.signals = Some(signals);
        self
    }
}

impl std::fmt::Debug for StoreSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreSink")
    }
}

#[async_trait]
impl EventSink for StoreSink {
    async fn publish(
        &self,
        tenant_id: &str,
        event: NewEvent,
        fence: Option<&ExecutionFence>,
    ) -> Result<EventEnvelope, StoreError> {
        // One path with or without a fence: `append_events` checks the fence in the same atomic
        // step as the append (docs/storage.md §4.2), allows no fence only for a session that never
        // had a lease, exactly like `append_event`, and shares the store's commit queue.
        let session_id = event.session_id.clone();
        let stored = self
            .store
            .append_events(tenant_id, &session_id, vec![event], fence)
            .await?
            .pop()
            .ok_or_else(|| StoreError::Backend {
                message: "an append returned no event".to_owned(),
                retry_safe: false,
            })?;
        self.announce(tenant_id, std::slice::from_ref(&stored));
        Ok(stored)
    }

    async fn publish_batch(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> Result<Vec<EventEnvelope>, StoreError> {
        // Without a fence this is allowed only for sessions that never had a lease (§4.2),
        // exactly like the single append.
        let stored = self
            .store
            .append_events(tenant_id, session_id, events, fence)
            .await?;
        self.announce(tenant_id, &stored);
        Ok(stored)
    }

    fn writes_steps_atomically(&self) -> bool {
        self.store.writes_steps_atomically()
    }

    async fn write_step(
        &self,
        tenant_id: &str,
        session_id: &str,
        step: RequestStep,
        fence: Option<&ExecutionFence>,
    ) -> Result<RequestStepWritten, StoreError> {
        let written = self
            .store
            .write_request_step(tenant_id, session_id, step, fence)
            .await?;
        self.announce(tenant_id, &written.events);
        Ok(written)
    }
}

impl StoreSink {
    /// After the store acknowledged: count the events, then wake this process's followers (in
    /// that order, so that whoever sees an event also finds it counted).
    fn announce(&self, tenant_id: &str, stored: &[EventEnvelope]) {
        for event in stored {
            best_effort(|| {
                self.telemetry.record_event(&EventMetric {
                    tenant_id: tenant_id.to_owned(),
                    session_id: event.session_id.clone(),
                    event_type: event.event_type,
                })
            });
        }
        if let Some(hand_off) = &self.hand_off {
            hand_off.appended(tenant_id, stored);
        }
        if let (Some(signals), Some(last)) = (&self.signals, stored.last()) {
            signals.notify(tenant_id, &last.session_id, last.sequence);
        }
    }
}
