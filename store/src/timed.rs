//! A store decorator that measures every port call (store latency by operation and outcome) and
//! hands the measurement to the telemetry port. Wrapping the `Store` here, once, keeps the
//! backends free of instrumentation; the long poll `wait_for_events` is not timed.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use agent_runtime::protocol::EventEnvelope;
use agent_runtime::telemetry::{SharedTelemetry, StoreCallMetric, best_effort};
use async_trait::async_trait;
use serde_json::Value;

use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::model::*;
use crate::ports::*;

/// Wraps a store and records the duration of each call.
pub struct TimedStore {
    inner: Arc<dyn Store>,
    telemetry: SharedTelemetry,
}

impl TimedStore {
    pub fn new(inner: Arc<dyn Store>, telemetry: SharedTelemetry) -> Self {
        Self { inner, telemetry }
    }
}

async fn timed<T>(
    telemetry: &SharedTelemetry,
    operation: &'static str,
    call: impl Future<Output = StoreResult<T>>,
) -> StoreResult<T> {
    timed_batch(telemetry, operation, call, |_| 0).await
}

/// [`timed`] for a call whose `Ok` answer carries per-item refusals: `fenced_in` counts the
/// stale-fence refusals among them.
async fn timed_batch<T>(
    telemetry: &SharedTelemetry,
    operation: &'static str,
    call: impl Future<Output = StoreResult<T>>,
    fenced_in: impl Fn(&T) -> usize,
) -> StoreResult<T> {
    let started = Instant::now();
    let result = call.await;
    let fenced_off = match &result {
        Ok(answer) => fenced_in(answer),
        Err(error) => usize::from(is_stale_fence(error)),
    };
    let metric = StoreCallMetric {
        operation,
        duration: started.elapsed(),
        ok: result.is_ok(),
        fenced_off,
    };
    best_effort(|| telemetry.record_store_call(&metric));
    result
}

/// The store's answer to a write under a lease that is no longer the session's.
fn is_stale_fence(error: &StoreError) -> bool {
    error.runtime_code() == Some(RuntimeErrorCode::LeaseLost)
}

#[async_trait]
impl CommandReceipts for TimedStore {
    async fn claim_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
    ) -> StoreResult<CommandClaim> {
        timed(
            &self.telemetry,
            "claim_command",
            self.inner
                .claim_command(tenant_id, command_id, fingerprint, ttl_ms),
        )
        .await
    }

    async fn claim_and_seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
        target: &CommandTarget,
    ) -> StoreResult<CommandClaim> {
        timed(
            &self.telemetry,
            "claim_and_seal_command",
            self.inner
                .claim_and_seal_command(tenant_id, command_id, fingerprint, ttl_ms, target),
        )
        .await
    }

    async fn seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        target: &CommandTarget,
    ) -> StoreResult<()> {
        timed(
            &self.telemetry,
            "seal_command",
            self.inner
                .seal_command(tenant_id, command_id, lease_id, target),
        )
        .await
    }

    async fn list_unfinished_commands(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<UnfinishedCommand>> {
        timed(
            &self.telemetry,
            "list_unfinished_commands",
            self.inner.list_unfinished_commands(after, limit),
        )
        .await
    }

    async fn complete_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        result: &Value,
    ) -> StoreResult<()> {
        timed(
            &self.telemetry,
            "complete_command",
            self.inner
                .complete_command(tenant_id, command_id, lease_id, result),
        )
        .await
    }

    async fn release_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        timed(
            &self.telemetry,
            "release_command",
            self.inner.release_command(tenant_id, command_id, lease_id),
        )
        .await
    }

    async fn reopen_sealed_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        timed(
            &self.telemetry,
            "reopen_sealed_command",
            self.inner
                .reopen_sealed_command(tenant_id, command_id, lease_id),
        )
        .await
    }

    async fn reap_receipts_over_budget(
        &self,
        max_bytes_per_tenant: u64,
        limit: u32,
    ) -> StoreResult<u64> {
        timed(
            &self.telemetry,
            "reap_receipts_over_budget",
            self.inner
                .reap_receipts_over_budget(max_bytes_per_tenant, limit),
        )
        .await
    }

    async fn reap_command_receipts(&self, finished_before_ms: u64, limit: u32) -> StoreResult<u64> {
        timed(
            &self.telemetry,
            "reap_command_receipts",
            self.inner.reap_command_receipts(finished_before_ms, limit),
        )
        .await
    }

    async fn abandon_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        reason: &str,
    ) -> StoreResult<bool> {
        timed(
            &self.telemetry,
            "abandon_command",
            self.inner.abandon_command(tenant_id, command_id, reason),
        )
        .await
    }
}

#[async_trait]
impl SessionRecords for TimedStore {
    async fn list_active_sessions(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<(String, String)>> {
        timed(
            &self.telemetry,
            "list_active_sessions",
            self.inner.list_active_sessions(after, limit),
        )
        .await
    }

    async fn list_closed_sessions(
        &self,
        tenants: &TenantScope,
        closed_before: &str,
        limit: u32,
    ) -> StoreResult<Vec<ClosedSession>> {
        timed(
            &self.telemetry,
            "list_closed_sessions",
            self.inner
                .list_closed_sessions(tenants, closed_before, limit),
        )
        .await
    }

    async fn purge_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<bool> {
        timed(
            &self.telemetry,
            "purge_session",
            self.inner.purge_session(tenant_id, session_id),
        )
        .await
    }

    async fn put_session(&self, record: &SessionRecord) -> StoreResult<()> {
        timed(
            &self.telemetry,
            "put_session",
            self.inner.put_session(record),
        )
        .await
    }

    async fn get_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRecord>> {
        timed(
            &self.telemetry,
            "get_session",
            self.inner.get_session(tenant_id, session_id),
        )
        .await
    }

    async fn list_sessions(
        &self,
        tenant_id: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> StoreResult<SessionPage> {
        timed(
            &self.telemetry,
            "list_sessions",
            self.inner.list_sessions(tenant_id, cursor, limit),
        )
        .await
    }
}

#[async_trait]
impl EventLog for TimedStore {
    async fn append_event(
        &self,
        tenant_id: &str,
        event: NewEvent,
        idempotency_key: Option<&str>,
    ) -> StoreResult<EventEnvelope> {
        timed(
            &self.telemetry,
            "append_event",
            self.inner.append_event(tenant_id, event, idempotency_key),
        )
        .await
    }

    async fn append_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<EventEnvelope>> {
        timed(
            &self.telemetry,
            "append_events",
            self.inner
                .append_events(tenant_id, session_id, events, fence),
        )
        .await
    }

    async fn get_event_by_idempotency_key(
        &self,
        tenant_id: &str,
        session_id: &str,
        idempotency_key: &str,
    ) -> StoreResult<Option<EventEnvelope>> {
        timed(
            &self.telemetry,
            "get_event_by_idempotency_key",
            self.inner
                .get_event_by_idempotency_key(tenant_id, session_id, idempotency_key),
        )
        .await
    }

    async fn read_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<EventPage> {
        timed(
            &self.telemetry,
            "read_events",
            self.inner.read_events(tenant_id, session_id, after, limit),
        )
        .await
    }

    async fn latest_event_sequence(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<u64>> {
        timed(
            &self.telemetry,
            "latest_event_sequence",
            self.inner.latest_event_sequence(tenant_id, session_id),
        )
        .await
    }

    async fn event_stream_range(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<EventRange>> {
        timed(
            &self.telemetry,
            "event_stream_range",
            self.inner.event_stream_range(tenant_id, session_id),
        )
        .await
    }

    async fn wait_for_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
    ) -> StoreResult<()> {
        // A long poll, not a store call: its duration says nothing about the store.
        self.inner
            .wait_for_events(tenant_id, session_id, after)
            .await
    }

    async fn trim_events_by_age(&self, occurred_before: &str, limit: u32) -> StoreResult<u64> {
        timed(
            &self.telemetry,
            "trim_events_by_age",
            self.inner.trim_events_by_age(occurred_before, limit),
        )
        .await
    }
}

#[async_trait]
impl TranscriptStore for TimedStore {
    async fn create_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Transcript> {
        timed(
            &self.telemetry,
            "create_transcript",
            self.inner.create_transcript(tenant_id, session_id, fence),
        )
        .await
    }

    async fn load_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Transcript>> {
        timed(
            &self.telemetry,
            "load_transcript",
            self.inner.load_transcript(tenant_id, session_id),
        )
        .await
    }

    async fn mutate_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        mutation: TranscriptMutation,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        timed(
            &self.telemetry,
            "mutate_transcript",
            self.inner
                .mutate_transcript(tenant_id, session_id, mutation, fence),
        )
        .await
    }

    async fn fork_transcript(
        &self,
        tenant_id: &str,
        source_session_id: &str,
        target_session_id: &str,
        message_id: Option<&str>,
    ) -> StoreResult<Transcript> {
        timed(
            &self.telemetry,
            "fork_transcript",
            self.inner
                .fork_transcript(tenant_id, source_session_id, target_session_id, message_id),
        )
        .await
    }

    async fn delete_transcript(&self, tenant_id: &str, session_id: &str) -> StoreResult<()> {
        timed(
            &self.telemetry,
            "delete_transcript",
            self.inner.delete_transcript(tenant_id, session_id),
        )
        .await
    }

    async fn list_transcripts(&self, tenant_id: &str) -> StoreResult<Vec<String>> {
        timed(
            &self.telemetry,
            "list_transcripts",
            self.inner.list_transcripts(tenant_id),
        )
        .await
    }
}

#[async_trait]
impl DurableJournal for TimedStore {
    fn writes_steps_atomically(&self) -> bool {
        self.inner.writes_steps_atomically()
    }

    async fn write_request_step(
        &self,
        tenant_id: &str,
        session_id: &str,
        step: RequestStep,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<RequestStepWritten> {
        timed(
            &self.telemetry,
            "write_request_step",
            self.inner
                .write_request_step(tenant_id, session_id, step, fence),
        )
        .await
    }

    async fn append_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<DurableAppendOutcome> {
        timed(
            &self.telemetry,
            "append_durable",
            self.inner
                .append_durable(tenant_id, session_id, drafts, expected, fence),
        )
        .await
    }

    async fn read_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<DurablePage> {
        timed(
            &self.telemetry,
            "read_durable",
            self.inner.read_durable(tenant_id, session_id, after, limit),
        )
        .await
    }

    async fn durable_head(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<u64>> {
        timed(
            &self.telemetry,
            "durable_head",
            self.inner.durable_head(tenant_id, session_id),
        )
        .await
    }
}

#[async_trait]
impl ExecutionLeases for TimedStore {
    async fn requires_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<bool> {
        timed(
            &self.telemetry,
            "requires_execution_lease",
            self.inner.requires_execution_lease(tenant_id, session_id),
        )
        .await
    }

    async fn acquire_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
        request: AcquireLease,
    ) -> StoreResult<ExecutionLease> {
        timed(
            &self.telemetry,
            "acquire_execution_lease",
            self.inner
                .acquire_execution_lease(tenant_id, session_id, request),
        )
        .await
    }

    async fn renew_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<ExecutionLease> {
        timed(
            &self.telemetry,
            "renew_execution_lease",
            self.inner.renew_execution_lease(tenant_id, lease, ttl_ms),
        )
        .await
    }

    async fn assert_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        timed(
            &self.telemetry,
            "assert_execution_lease",
            self.inner.assert_execution_lease(tenant_id, lease),
        )
        .await
    }

    async fn release_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        timed(
            &self.telemetry,
            "release_execution_lease",
            self.inner.release_execution_lease(tenant_id, lease),
        )
        .await
    }

    async fn get_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<ExecutionLease>> {
        timed(
            &self.telemetry,
            "get_execution_lease",
            self.inner.get_execution_lease(tenant_id, session_id),
        )
        .await
    }
}

#[async_trait]
impl WorkerRegistry for TimedStore {
    async fn register_worker(&self, request: RegisterWorker) -> StoreResult<WorkerRecord> {
        timed(
            &self.telemetry,
            "register_worker",
            self.inner.register_worker(request),
        )
        .await
    }

    async fn heartbeat_worker(&self, worker_id: &str, ttl_ms: u64) -> StoreResult<WorkerRecord> {
        timed(
            &self.telemetry,
            "heartbeat_worker",
            self.inner.heartbeat_worker(worker_id, ttl_ms),
        )
        .await
    }

    async fn drain_worker(&self, worker_id: &str) -> StoreResult<WorkerRecord> {
        timed(
            &self.telemetry,
            "drain_worker",
            self.inner.drain_worker(worker_id),
        )
        .await
    }

    async fn get_worker(&self, worker_id: &str) -> StoreResult<Option<WorkerRecord>> {
        timed(
            &self.telemetry,
            "get_worker",
            self.inner.get_worker(worker_id),
        )
        .await
    }

    async fn list_workers(&self) -> StoreResult<Vec<WorkerRecord>> {
        timed(&self.telemetry, "list_workers", self.inner.list_workers()).await
    }
}

#[async_trait]
impl AgentMemories for TimedStore {
    async fn save_memory(
        &self,
        tenant_id: &str,
        record: MemoryRecord,
        max_entries: u32,
    ) -> StoreResult<MemoryRecord> {
        timed(
            &self.telemetry,
            "save_memory",
            self.inner.save_memory(tenant_id, record, max_entries),
        )
        .await
    }

    async fn get_memory(
        &self,
        tenant_id: &str,
        scope: &str,
        name: &str,
    ) -> StoreResult<Option<MemoryRecord>> {
        timed(
            &self.telemetry,
            "get_memory",
            self.inner.get_memory(tenant_id, scope, name),
        )
        .await
    }

    async fn list_memories(&self, tenant_id: &str, scope: &str) -> StoreResult<Vec<MemoryRecord>> {
        timed(
            &self.telemetry,
            "list_memories",
            self.inner.list_memories(tenant_id, scope),
        )
        .await
    }

    async fn delete_memory(&self, tenant_id: &str, scope: &str, name: &str) -> StoreResult<bool> {
        timed(
            &self.telemetry,
            "delete_memory",
            self.inner.delete_memory(tenant_id, scope, name),
        )
        .await
    }
}

#[async_trait]
impl SessionRoutes for TimedStore {
    async fn enqueue_session(
        &self,
        tenant_id: &str,
        session_id: &str,
        options: EnqueueOptions,
    ) -> StoreResult<SessionRoute> {
        timed(
            &self.telemetry,
            "enqueue_session",
            self.inner.enqueue_session(tenant_id, session_id, options),
        )
        .await
    }

    async fn claim_session(&self, request: ClaimSession) -> StoreResult<Option<RouteClaim>> {
        timed(
            &self.telemetry,
            "claim_session",
            self.inner.claim_session(request),
        )
        .await
    }

    async fn transition_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        timed(
            &self.telemetry,
            "transition_session",
            self.inner.transition_session(tenant_id, lease, transition),
        )
        .await
    }

    async fn settle_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        timed(
            &self.telemetry,
            "settle_session",
            self.inner.settle_session(tenant_id, lease, transition),
        )
        .await
    }

    async fn handoff_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        metadata: Option<serde_json::Map<String, Value>>,
    ) -> StoreResult<SessionRoute> {
        timed(
            &self.telemetry,
            "handoff_session",
            self.inner.handoff_session(tenant_id, lease, metadata),
        )
        .await
    }

    async fn renew_session_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<RouteClaim> {
        timed(
            &self.telemetry,
            "renew_session_lease",
            self.inner.renew_session_lease(tenant_id, lease, ttl_ms),
        )
        .await
    }

    async fn renew_session_leases(
        &self,
        leases: &[(String, ExecutionLease)],
        ttl_ms: u64,
    ) -> StoreResult<Vec<StoreResult<ExecutionLease>>> {
        timed_batch(
            &self.telemetry,
            "renew_session_leases",
            self.inner.renew_session_leases(leases, ttl_ms),
            |answers| {
                answers
                    .iter()
                    .filter(|answer| answer.as_ref().is_err_and(is_stale_fence))
                    .count()
            },
        )
        .await
    }

    async fn get_session_route(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRoute>> {
        timed(
            &self.telemetry,
            "get_session_route",
            self.inner.get_session_route(tenant_id, session_id),
        )
        .await
    }

    async fn list_worker_sessions(&self, worker_id: &str) -> StoreResult<Vec<SessionRoute>> {
        timed(
            &self.telemetry,
            "list_worker_sessions",
            self.inner.list_worker_sessions(worker_id),
        )
        .await
    }

    async fn recover_expired_work(
        &self,
        abandon_sealed_after_ms: u64,
    ) -> StoreResult<RecoveryCounts> {
        timed(
            &self.telemetry,
            "recover_expired_work",
            self.inner.recover_expired_work(abandon_sealed_after_ms),
        )
        .await
    }
}

#[async_trait]
impl StoreLifecycle for TimedStore {
    async fn health_check(&self) -> StoreHealth {
        self.inner.health_check().await
    }

    async fn close(&self) -> StoreResult<()> {
        timed(&self.telemetry, "close", self.inner.close()).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use agent_runtime::telemetry::{Telemetry, TelemetryError};

    use super::*;
    use crate::{MemoryStore, StoreError, StoreOptions};

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
