//! Store latency by operation and outcome, handed to the telemetry port: a [`StoreHooks`] over
//! every call. Wrapping the `Store` here, once, keeps the backends free of instrumentation; the
//! long poll `wait_for_events` is not timed.

use std::sync::Arc;
use std::time::Instant;

use agent_runtime::telemetry::{SharedTelemetry, StoreCallMetric, best_effort};
use async_trait::async_trait;

use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::hooked::{Call, Hooked, Operation, StoreHooks};
use crate::model::ExecutionLease;
use crate::ports::*;

/// A store that records the duration of each call.
pub type TimedStore = Hooked<Timing>;

impl TimedStore {
    pub fn new(inner: Arc<dyn Store>, telemetry: SharedTelemetry) -> Self {
        Hooked::with_hooks(inner, Timing { telemetry })
    }
}

/// The timing hooks of a [`TimedStore`].
pub struct Timing {
    telemetry: SharedTelemetry,
}

impl Timing {
    /// Runs `call` and records it; `fenced_in` counts the stale-fence refusals an `Ok` answer
    /// carries per item.
    async fn record<T>(
        &self,
        operation: Operation,
        call: Call<'_, T>,
        fenced_in: impl Fn(&T) -> usize,
    ) -> StoreResult<T> {
        let started = Instant::now();
        let result = call.await;
        let fenced_off = match &result {
            Ok(answer) => fenced_in(answer),
            Err(error) => usize::from(is_stale_fence(error)),
        };
        let metric = StoreCallMetric {
            operation: operation.name(),
            duration: started.elapsed(),
            ok: result.is_ok(),
            fenced_off,
        };
        best_effort(|| self.telemetry.record_store_call(&metric));
        result
    }
}

#[async_trait]
impl StoreHooks for Timing {
    async fn around<T: Send>(&self, operation: Operation, call: Call<'_, T>) -> StoreResult<T> {
        self.record(operation, call, |_| 0).await
    }

    async fn wait_for_events(
        &self,
        store: &TimedStore,
        tenant_id: &str,
        session_id: &str,
        after: u64,
    ) -> StoreResult<()> {
        store
            .inner()
            .wait_for_events(tenant_id, session_id, after)
            .await
    }

    async fn renew_session_leases(
        &self,
        store: &TimedStore,
        leases: &[(String, ExecutionLease)],
        ttl_ms: u64,
    ) -> StoreResult<Vec<StoreResult<ExecutionLease>>> {
        let call = store.inner().renew_session_leases(leases, ttl_ms);
        self.record(Operation::RenewSessionLeases, call, |answers| {
            answers
                .iter()
                .filter(|answer| answer.as_ref().is_err_and(is_stale_fence))
                .count()
        })
        .await
    }
}

/// The store's answer to a write under a lease that is no longer the session's.
fn is_stale_fence(error: &StoreError) -> bool {
    error.runtime_code() == Some(RuntimeErrorCode::LeaseLost)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use agent_runtime::telemetry::{Telemetry, TelemetryError};

    use super::*;
    use crate::model::{CommandClaim, ExecutionFence, NewEvent};
    use crate::{MemoryStore, StoreOptions};

    #[derive(Debug, Default)]
    struct Calls(Mutex<Vec<(&'static str, bool)>>);

    impl Telemetry for Calls {
        fn record_store_call(&self, metric: &StoreCallMetric) -> Result<(), TelemetryError> {
            self.0.lock().unwrap().push((metric.operation, metric.ok));
            Ok(())
        }
    }

    /// Stale-fence refusals per call.
    #[derive(Debug, Default)]
    struct Fenced(Mutex<Vec<(&'static str, usize)>>);

    impl Telemetry for Fenced {
        fn record_store_call(&self, metric: &StoreCallMetric) -> Result<(), TelemetryError> {
            self.0
                .lock()
                .unwrap()
                .push((metric.operation, metric.fenced_off));
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_write_refused_for_a_stale_fence_is_counted_and_other_outcomes_are_not() {
        let fenced = Arc::new(Fenced::default());
        let store = TimedStore::new(
            Arc::new(MemoryStore::new(StoreOptions::default())),
            fenced.clone(),
        );
        let event = || NewEvent {
            session_id: "session-1".to_owned(),
            request_id: None,
            occurred_at: String::new(),
            event_type: agent_runtime::protocol::EventType::SessionStream,
            data: serde_json::from_value(serde_json::json!({ "type": "content", "delta": "x" }))
                .unwrap(),
        };
        // A fence the session never had: the store refuses the write as a lost lease.
        let stale = ExecutionFence {
            lease_id: "lease-of-a-previous-owner".to_owned(),
            fencing_token: 1,
        };
        let refused = store
            .append_events("tenant-a", "session-1", vec![event()], Some(&stale))
            .await;
        assert_eq!(
            refused.unwrap_err().runtime_code(),
            Some(RuntimeErrorCode::LeaseLost)
        );
        store
            .append_events("tenant-a", "session-1", vec![event()], None)
            .await
            .unwrap();
        let invalid = store.read_events("tenant-a", "session-1", 0, 0).await;
        assert!(invalid.is_err());
        assert_eq!(
            *fenced.0.lock().unwrap(),
            vec![
                ("append_events", 1),
                ("append_events", 0),
                ("read_events", 0)
            ]
        );
    }

    #[tokio::test]
    async fn every_call_is_measured_with_its_outcome_and_results_pass_through() {
        let calls = Arc::new(Calls::default());
        let store = TimedStore::new(
            Arc::new(MemoryStore::new(StoreOptions::default())),
            calls.clone(),
        );
        let claim = store
            .claim_command("tenant-a", "command-1", "fingerprint", 30_000)
            .await
            .unwrap();
        assert!(matches!(claim, CommandClaim::Claimed { .. }));
        let missing = store.get_session("tenant-a", "nope").await.unwrap();
        assert_eq!(missing, None);
        let refused = store
            .claim_command("tenant-a", "command-2", "fingerprint", 0)
            .await;
        assert!(matches!(refused, Err(StoreError::InvalidArgument(_))));
        assert_eq!(
            *calls.0.lock().unwrap(),
            vec![
                ("claim_command", true),
                ("get_session", true),
                ("claim_command", false),
            ]
        );
    }
}
