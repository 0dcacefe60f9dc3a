//! Where a session's events go. Invariant 1: an event is visible to clients only after the store
//! has it with its sequence, so every sink appends first and only then lets anyone see it.

use std::sync::Arc;

use agent_runtime::protocol::EventEnvelope;
use agent_runtime::telemetry::{EventMetric, SharedTelemetry, best_effort};
use agent_runtime_store::{NewEvent, Store, StoreError};
use async_trait::async_trait;

#[async_trait]
pub trait EventSink: Send + Sync + std::fmt::Debug {
    /// Appends the event and returns it with its sequence and id.
    async fn publish(&self, tenant_id: &str, event: NewEvent) -> Result<EventEnvelope, StoreError>;
}

/// The single-process sink: appends to the shared store, whose `wait_for_events` wakes every SSE
/// stream of the session (decision P9).
#[derive(Clone)]
pub struct StoreSink {
    store: Arc<dyn Store>,
    telemetry: SharedTelemetry,
}

impl StoreSink {
    pub fn new(store: Arc<dyn Store>, telemetry: SharedTelemetry) -> Self {
        Self { store, telemetry }
    }
}

impl std::fmt::Debug for StoreSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreSink")
    }
}

#[async_trait]
impl EventSink for StoreSink {
    async fn publish(&self, tenant_id: &str, event: NewEvent) -> Result<EventEnvelope, StoreError> {
        let stored = self.store.append_event(tenant_id, event, None).await?;
        best_effort(|| {
            self.telemetry.record_event(&EventMetric {
                tenant_id: tenant_id.to_owned(),
                session_id: stored.session_id.clone(),
                event_type: stored.event_type,
            })
        });
        Ok(stored)
    }
}
