//! A store wrapper that fails chosen operations on demand, for fault-injection tests (a result
//! that cannot be stored, a journal that breaks, a database that goes away).
//!
//! Faults are armed per operation name (the port method, e.g. `complete_command`) with a count;
//! each armed call fails with a retry-safe backend error before reaching the wrapped store. An
//! operation can also be *held*: its calls wait until it is released (a store that stalls).
//!
//! It can also record every event-log append the wrapped store acknowledged, with the fence it
//! was written under ([`FaultyStore::recording_appends`]): the writer history that the history
//! checker (tests/support/history.rs) holds against the final log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_runtime::protocol::EventEnvelope;
use async_trait::async_trait;
use serde_json::Value;

use crate::error::{StoreError, StoreResult};
use crate::model::*;
use crate::ports::*;

/// The operation name [`FaultyStore::fail_everything`] arms.
const EVERYTHING: &str = "*";

/// Wraps a store and fails armed operations.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    armed: Mutex<HashMap<&'static str, u32>>,
    calls: Mutex<HashMap<&'static str, u64>>,
    /// Operations whose next call panics, with the panic's message (a bug in the server).
    panicking: Mutex<HashMap<&'static str, &'static str>>,
    /// Held operations: a closed semaphore lets every waiter through.
    held: Mutex<HashMap<&'static str, Arc<tokio::sync::Semaphore>>>,
    /// Acknowledged appends, when recording.
    appends: Option<Mutex<Vec<AcknowledgedAppend>>>,
    /// Appends definitely refused (never durable), when recording.
    refused: Mutex<Vec<RefusedAppend>>,
}

/// An event-log append that definitely did not happen: an injected fault stopped it before the
/// wrapped store, or the wrapped store refused it with a definite answer (a lost lease, a fence
/// that is no longer current). A backend failure is not one of them: the write may have been
/// committed before the connection broke.
#[derive(Clone, Debug)]
pub struct RefusedAppend {
    pub tenant_id: String,
    pub session_id: String,
    pub fence: Option<ExecutionFence>,
    pub events: Vec<NewEvent>,
}

/// One append of agent events that the wrapped store acknowledged.
#[derive(Clone, Debug)]
pub struct AcknowledgedAppend {
    pub tenant_id: String,
    pub session_id: String,
    /// The fence the write was made under (`None`: an unfenced write).
    pub fence: Option<ExecutionFence>,
    pub events: Vec<EventEnvelope>,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            armed: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
            panicking: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            appends: None,
            refused: Mutex::new(Vec::new()),
        }
    }

    /// Also records every acknowledged event-log append (see [`FaultyStore::acknowledged_appends`]).
    pub fn recording_appends(mut self) -> Self {
        self.appends = Some(Mutex::new(Vec::new()));
        self
    }

    /// The acknowledged appends so far, in the order they returned (empty unless recording).
    pub fn acknowledged_appends(&self) -> Vec<AcknowledgedAppend> {
        self.appends
            .as_ref()
            .map(|appends| appends.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default()
    }

    /// The definitely refused appends so far (empty unless recording).
    pub fn refused_appends(&self) -> Vec<RefusedAppend> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn record_refused(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
        events: Option<Vec<NewEvent>>,
        error: &StoreError,
        injected: bool,
    ) {
        let Some(events) = events else {
            return;
        };
        if !injected && matches!(error, StoreError::Backend { .. }) {
            return;
        }
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(RefusedAppend {
                tenant_id: tenant_id.to_owned(),
                session_id: session_id.to_owned(),
                fence: fence.cloned(),
                events,
            });
    }

    fn record_append(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
        events: &[EventEnvelope],
    ) {
        if let Some(appends) = &self.appends {
            appends
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(AcknowledgedAppend {
                    tenant_id: tenant_id.to_owned(),
                    session_id: session_id.to_owned(),
                    fence: fence.cloned(),
                    events: events.to_vec(),
                });
        }
    }

    /// Makes the next `times` calls of `operation` fail.
    pub fn fail_next(&self, operation: &'static str, times: u32) {
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        *armed.entry(operation).or_default() += times;
    }

    /// Fails every later call of `operation` until [`FaultyStore::heal`].
    pub fn fail_always(&self, operation: &'static str) {
        self.fail_next(operation, u32::MAX);
    }

    /// Fails every later call of every operation until [`FaultyStore::heal`]: the wrapped store
    /// is out of reach (a process cut off from PostgreSQL).
    pub fn fail_everything(&self) {
        self.fail_always(EVERYTHING);
    }

    /// Makes the next call of `operation` panic with `message`, as a bug would.
    pub fn panic_next(&self, operation: &'static str, message: &'static str) {
        let mut panicking = self.panicking.lock().unwrap_or_else(|e| e.into_inner());
        panicking.insert(operation, message);
    }

    pub fn heal(&self) {
        self.armed.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// How often `operation` was called (faulted, held or not): a held call counts from the moment
    /// it waits, so a test can tell that a call reached the store before releasing it.
    pub fn calls(&self, operation: &'static str) -> u64 {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls.get(operation).copied().unwrap_or(0)
    }

    /// Makes every later call of `operation` wait (before reaching the wrapped store) until
    /// [`FaultyStore::release`].
    pub fn hold(&self, operation: &'static str) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.entry(operation)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(0)));
    }

    /// Lets the held calls of `operation`, and every later one, through.
    pub fn release(&self, operation: &'static str) {
        let gate = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(operation);
        if let Some(gate) = gate {
            gate.close();
        }
    }

    async fn trip(&self, operation: &'static str) -> StoreResult<()> {
        *self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(operation)
            .or_default() += 1;
        let gate = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(operation)
            .cloned();
        if let Some(gate) = gate {
            // Err(Closed) is the release.
            let _ = gate.acquire().await;
        }
        let panic = self
            .panicking
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(operation);
        if let Some(message) = panic {
            panic!("{message}");
        }
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        if armed.contains_key(EVERYTHING) {
            return Err(StoreError::Backend {
                message: format!("injected fault in {operation}: the store is out of reach"),
                retry_safe: true,
            });
        }
        match armed.get_mut(operation) {
            Some(left) if *left > 0 => {
                if *left != u32::MAX {
                    *left -= 1;
                }
                Err(StoreError::Backend {
                    message: format!("injected fault in {operation}"),
                    retry_safe: true,
                })
            }
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl CommandReceipts for FaultyStore {
    async fn claim_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
    ) -> StoreResult<CommandClaim> {
        self.trip("claim_command").await?;
        self.inner
            .claim_command(tenant_id, command_id, fingerprint, ttl_ms)
            .await
    }

    async fn seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        target: &CommandTarget,
    ) -> StoreResult<()> {
        self.trip("seal_command").await?;
        self.inner
            .seal_command(tenant_id, command_id, lease_id, target)
            .await
    }

    async fn list_unfinished_commands(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<UnfinishedCommand>> {
        self.trip("list_unfinished_commands").await?;
        self.inner.list_unfinished_commands(after, limit).await
    }

    async fn complete_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        result: &Value,
    ) -> StoreResult<()> {
        self.trip("complete_command").await?;
        self.inner
            .complete_command(tenant_id, command_id, lease_id, result)
            .await
    }

    async fn release_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        self.trip("release_command").await?;
        self.inner
            .release_command(tenant_id, command_id, lease_id)
            .await
    }

    async fn reopen_sealed_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        self.trip("reopen_sealed_command").await?;
        self.inner
            .reopen_sealed_command(tenant_id, command_id, lease_id)
            .await
    }

    async fn reap_receipts_over_budget(
        &self,
        max_bytes_per_tenant: u64,
        limit: u32,
    ) -> StoreResult<u64> {
        self.trip("reap_receipts_over_budget").await?;
        self.inner
            .reap_receipts_over_budget(max_bytes_per_tenant, limit)
            .await
    }

    async fn reap_command_receipts(&self, finished_before_ms: u64, limit: u32) -> StoreResult<u64> {
        self.trip("reap_command_receipts").await?;
        self.inner
            .reap_command_receipts(finished_before_ms, limit)
            .await
    }

    async fn abandon_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        reason: &str,
    ) -> StoreResult<bool> {
        self.trip("abandon_command").await?;
        self.inner
            .abandon_command(tenant_id, command_id, reason)
            .await
    }
}

#[async_trait]
impl SessionRecords for FaultyStore {
    async fn list_active_sessions(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<(String, String)>> {
        self.trip("list_active_sessions").await?;
        self.inner.list_active_sessions(after, limit).await
    }

    async fn list_closed_sessions(
        &self,
        tenants: &TenantScope,
        closed_before: &str,
        limit: u32,
    ) -> StoreResult<Vec<ClosedSession>> {
        self.trip("list_closed_sessions").await?;
        self.inner
            .list_closed_sessions(tenants, closed_before, limit)
            .await
    }

    async fn purge_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<bool> {
        self.trip("purge_session").await?;
        self.inner.purge_session(tenant_id, session_id).await
    }

    async fn put_session(&self, record: &SessionRecord) -> StoreResult<()> {
        self.trip("put_session").await?;
        self.inner.put_session(record).await
    }

    async fn get_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRecord>> {
        self.trip("get_session").await?;
        self.inner.get_session(tenant_id, session_id).await
    }

    async fn list_sessions(
        &self,
        tenant_id: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> StoreResult<SessionPage> {
        self.trip("list_sessions").await?;
        self.inner.list_sessions(tenant_id, cursor, limit).await
    }
}

#[async_trait]
impl EventLog for FaultyStore {
    async fn append_event(
        &self,
        tenant_id: &str,
        event: NewEvent,
        idempotency_key: Option<&str>,
    ) -> StoreResult<EventEnvelope> {
        let copy = self.appends.is_some().then(|| vec![event.clone()]);
        let session_id = event.session_id.clone();
        if let Err(error) = self.trip("append_event").await {
            self.record_refused(tenant_id, &session_id, None, copy, &error, true);
            return Err(error);
        }
        let stored = match self
            .inner
            .append_event(tenant_id, event, idempotency_key)
            .await
        {
            Ok(stored) => stored,
            Err(error) => {
                self.record_refused(tenant_id, &session_id, None, copy, &error, false);
                return Err(error);
            }
        };
        self.record_append(
            tenant_id,
            &stored.session_id,
            None,
            std::slice::from_ref(&stored),
        );
        Ok(stored)
    }

    async fn append_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<EventEnvelope>> {
        let copy = self.appends.is_some().then(|| events.clone());
        if let Err(error) = self.trip("append_events").await {
            self.record_refused(tenant_id, session_id, fence, copy, &error, true);
            return Err(error);
        }
        let stored = match self
            .inner
            .append_events(tenant_id, session_id, events, fence)
            .await
        {
            Ok(stored) => stored,
            Err(error) => {
                self.record_refused(tenant_id, session_id, fence, copy, &error, false);
                return Err(error);
            }
        };
        self.record_append(tenant_id, session_id, fence, &stored);
        Ok(stored)
    }

    async fn get_event_by_idempotency_key(
        &self,
        tenant_id: &str,
        session_id: &str,
        idempotency_key: &str,
    ) -> StoreResult<Option<EventEnvelope>> {
        self.trip("get_event_by_idempotency_key").await?;
        self.inner
            .get_event_by_idempotency_key(tenant_id, session_id, idempotency_key)
            .await
    }

    async fn read_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<EventPage> {
        self.trip("read_events").await?;
        self.inner
            .read_events(tenant_id, session_id, after, limit)
            .await
    }

    async fn latest_event_sequence(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<u64>> {
        self.trip("latest_event_sequence").await?;
        self.inner
            .latest_event_sequence(tenant_id, session_id)
            .await
    }

    async fn event_stream_range(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<EventRange>> {
        self.trip("event_stream_range").await?;
        self.inner.event_stream_range(tenant_id, session_id).await
    }

    async fn wait_for_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
    ) -> StoreResult<()> {
        self.trip("wait_for_events").await?;
        self.inner
            .wait_for_events(tenant_id, session_id, after)
            .await
    }

    async fn trim_events_by_age(&self, occurred_before: &str, limit: u32) -> StoreResult<u64> {
        self.trip("trim_events_by_age").await?;
        self.inner.trim_events_by_age(occurred_before, limit).await
    }
}

#[async_trait]
impl TranscriptStore for FaultyStore {
    async fn create_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Transcript> {
        self.trip("create_transcript").await?;
        self.inner
            .create_transcript(tenant_id, session_id, fence)
            .await
    }

    async fn load_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Transcript>> {
        self.trip("load_transcript").await?;
        self.inner.load_transcript(tenant_id, session_id).await
    }

    async fn mutate_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        mutation: TranscriptMutation,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.trip("mutate_transcript").await?;
        self.inner
            .mutate_transcript(tenant_id, session_id, mutation, fence)
            .await
    }

    async fn fork_transcript(
        &self,
        tenant_id: &str,
        source_session_id: &str,
        target_session_id: &str,
        message_id: Option<&str>,
    ) -> StoreResult<Transcript> {
        self.trip("fork_transcript").await?;
        self.inner
            .fork_transcript(tenant_id, source_session_id, target_session_id, message_id)
            .await
    }

    async fn delete_transcript(&self, tenant_id: &str, session_id: &str) -> StoreResult<()> {
        self.trip("delete_transcript").await?;
        self.inner.delete_transcript(tenant_id, session_id).await
    }

    async fn list_transcripts(&self, tenant_id: &str) -> StoreResult<Vec<String>> {
        self.trip("list_transcripts").await?;
        self.inner.list_transcripts(tenant_id).await
    }
}

#[async_trait]
impl DurableJournal for FaultyStore {
    async fn append_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<DurableAppendOutcome> {
        self.trip("append_durable").await?;
        self.inner
            .append_durable(tenant_id, session_id, drafts, expected, fence)
            .await
    }

    async fn read_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<DurablePage> {
        self.trip("read_durable").await?;
        self.inner
            .read_durable(tenant_id, session_id, after, limit)
            .await
    }

    async fn durable_head(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<u64>> {
        self.trip("durable_head").await?;
        self.inner.durable_head(tenant_id, session_id).await
    }
}

#[async_trait]
impl ExecutionLeases for FaultyStore {
    async fn requires_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<bool> {
        self.trip("requires_execution_lease").await?;
        self.inner
            .requires_execution_lease(tenant_id, session_id)
            .await
    }

    async fn acquire_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
        request: AcquireLease,
    ) -> StoreResult<ExecutionLease> {
        self.trip("acquire_execution_lease").await?;
        self.inner
            .acquire_execution_lease(tenant_id, session_id, request)
            .await
    }

    async fn renew_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<ExecutionLease> {
        self.trip("renew_execution_lease").await?;
        self.inner
            .renew_execution_lease(tenant_id, lease, ttl_ms)
            .await
    }

    async fn assert_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        self.trip("assert_execution_lease").await?;
        self.inner.assert_execution_lease(tenant_id, lease).await
    }

    async fn release_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        self.trip("release_execution_lease").await?;
        self.inner.release_execution_lease(tenant_id, lease).await
    }

    async fn get_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<ExecutionLease>> {
        self.trip("get_execution_lease").await?;
        self.inner.get_execution_lease(tenant_id, session_id).await
    }
}

#[async_trait]
impl WorkerRegistry for FaultyStore {
    async fn register_worker(&self, request: RegisterWorker) -> StoreResult<WorkerRecord> {
        self.trip("register_worker").await?;
        self.inner.register_worker(request).await
    }

    async fn heartbeat_worker(&self, worker_id: &str, ttl_ms: u64) -> StoreResult<WorkerRecord> {
        self.trip("heartbeat_worker").await?;
        self.inner.heartbeat_worker(worker_id, ttl_ms).await
    }

    async fn drain_worker(&self, worker_id: &str) -> StoreResult<WorkerRecord> {
        self.trip("drain_worker").await?;
        self.inner.drain_worker(worker_id).await
    }

    async fn get_worker(&self, worker_id: &str) -> StoreResult<Option<WorkerRecord>> {
        self.trip("get_worker").await?;
        self.inner.get_worker(worker_id).await
    }

    async fn list_workers(&self) -> StoreResult<Vec<WorkerRecord>> {
        self.trip("list_workers").await?;
        self.inner.list_workers().await
    }
}

#[async_trait]
impl SessionRoutes for FaultyStore {
    async fn enqueue_session(
        &self,
        tenant_id: &str,
        session_id: &str,
        options: EnqueueOptions,
    ) -> StoreResult<SessionRoute> {
        self.trip("enqueue_session").await?;
        self.inner
            .enqueue_session(tenant_id, session_id, options)
            .await
    }

    async fn claim_session(&self, request: ClaimSession) -> StoreResult<Option<RouteClaim>> {
        self.trip("claim_session").await?;
        self.inner.claim_session(request).await
    }

    async fn transition_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        self.trip("transition_session").await?;
        self.inner
            .transition_session(tenant_id, lease, transition)
            .await
    }

    async fn settle_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        self.trip("settle_session").await?;
        self.inner
            .settle_session(tenant_id, lease, transition)
            .await
    }

    async fn handoff_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        metadata: Option<serde_json::Map<String, Value>>,
    ) -> StoreResult<SessionRoute> {
        self.trip("handoff_session").await?;
        self.inner.handoff_session(tenant_id, lease, metadata).await
    }

    async fn renew_session_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<RouteClaim> {
        self.trip("renew_session_lease").await?;
        self.inner
            .renew_session_lease(tenant_id, lease, ttl_ms)
            .await
    }

    async fn renew_session_leases(
        &self,
        leases: &[(String, ExecutionLease)],
        ttl_ms: u64,
    ) -> StoreResult<Vec<StoreResult<ExecutionLease>>> {
        self.trip("renew_session_leases").await?;
        self.inner.renew_session_leases(leases, ttl_ms).await
    }

    async fn get_session_route(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRoute>> {
        self.trip("get_session_route").await?;
        self.inner.get_session_route(tenant_id, session_id).await
    }

    async fn list_worker_sessions(&self, worker_id: &str) -> StoreResult<Vec<SessionRoute>> {
        self.trip("list_worker_sessions").await?;
        self.inner.list_worker_sessions(worker_id).await
    }

    async fn recover_expired_work(
        &self,
        abandon_sealed_after_ms: u64,
    ) -> StoreResult<RecoveryCounts> {
        self.trip("recover_expired_work").await?;
        self.inner
            .recover_expired_work(abandon_sealed_after_ms)
            .await
    }
}

#[async_trait]
impl StoreLifecycle for FaultyStore {
    async fn health_check(&self) -> StoreHealth {
        if self.trip("health_check").await.is_err() {
            let mut details = agent_runtime::protocol::JsonObject::new();
            details.insert("reason".to_owned(), Value::from("injected fault"));
            return StoreHealth {
                ready: false,
                details,
            };
        }
        self.inner.health_check().await
    }

    async fn close(&self) -> StoreResult<()> {
        self.trip("close").await?;
        self.inner.close().await
    }
}
