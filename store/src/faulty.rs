//! A store wrapper that fails chosen operations on demand, for fault-injection tests (a result
//! that cannot be stored, a journal that breaks, a database that goes away).
//!
//! Faults are armed per operation name (the port method, e.g. `complete_command`) with a count;
//! each armed call fails with a retry-safe backend error before reaching the wrapped store, or
//! (armed with [`FaultyStore::fail_after_applying`]) takes effect and then fails with an unknown
//! outcome. An operation can also be *held*: its calls wait until it is released (a store that stalls).
//!
//! It can also record every event-log append the wrapped store acknowledged, with the fence it
//! was written under ([`FaultyStore::recording_appends`]): the writer history that the history
//! checker (tests/support/history.rs) holds against the final log.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Operations whose next calls are applied by the wrapped store and then reported as failed
    /// with an unknown outcome (a COMMIT whose reply was lost).
    unacknowledged: Mutex<HashMap<&'static str, u32>>,
    calls: Mutex<HashMap<&'static str, u64>>,
    /// Operations whose next call panics, with the panic's message (a bug in the server).
    panicking: Mutex<HashMap<&'static str, &'static str>>,
    /// Where the process is to "die" (see [`FaultyStore::crash_at`]).
    crash: Mutex<Option<CrashPoint>>,
    /// Set once it died: every later call fails.
    crashed: AtomicBool,
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

/// The call at which [`FaultyStore::crash_at`] stops the process.
struct CrashPoint {
    operation: &'static str,
    /// Calls of `operation` until the one that crashes (that one included).
    calls_left: u32,
    /// Whether that call takes effect before the crash.
    applied: bool,
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
            unacknowledged: Mutex::new(HashMap::new()),
            crash: Mutex::new(None),
            crashed: AtomicBool::new(false),
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

    /// Whether the next call of `operation` is to fail (`fail_next`, `fail_always`,
    /// `fail_everything`).
    fn armed_to_fail(&self, operation: &'static str) -> bool {
        let armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        armed.contains_key(EVERYTHING) || armed.get(operation).is_some_and(|left| *left > 0)
    }

    /// Makes the next `times` calls of `operation` fail.
    pub fn fail_next(&self, operation: &'static str, times: u32) {
        let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
        *armed.entry(operation).or_default() += times;
    }

    /// Lets the next `times` calls of `operation` reach the wrapped store and take effect, then
    /// fails each with an error whose outcome is unknown (`retry_safe: false`): the write was
    /// made, its acknowledgement lost, as when the connection breaks after a COMMIT.
    pub fn fail_after_applying(&self, operation: &'static str, times: u32) {
        let mut armed = self
            .unacknowledged
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *armed.entry(operation).or_default() += times;
    }

    /// Stops the process, as the store sees it, at the `nth` call of `operation` from now (1 is
    /// the next): that call fails, after taking effect with an unknown outcome when `applied`,
    /// else before reaching the wrapped store; from then on every call of every operation fails
    /// (retry-safe, nothing reaches the store), so nothing the process does after that point is
    /// written: a crash between two writes. The process is then stopped and a new one started on
    /// the same store, as after a real crash (the crash-point suite, tests/crash_points.rs).
    pub fn crash_at(&self, operation: &'static str, nth: u32, applied: bool) {
        *self.crash.lock().unwrap_or_else(|e| e.into_inner()) = Some(CrashPoint {
            operation,
            calls_left: nth.max(1),
            applied,
        });
    }

    /// Whether the crash armed by [`FaultyStore::crash_at`] happened.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// The crash of a call that `trip` let through (`applied`), if it is the armed one.
    fn crash_after(&self, operation: &'static str) -> Option<StoreError> {
        let mut crash = self.crash.lock().unwrap_or_else(|e| e.into_inner());
        let due = crash
            .as_ref()
            .is_some_and(|point| point.operation == operation && point.calls_left == 0);
        if !due {
            return None;
        }
        *crash = None;
        self.crashed.store(true, Ordering::SeqCst);
        Some(StoreError::Backend {
            message: format!("injected crash after {operation} took effect"),
            retry_safe: false,
        })
    }

    /// Counts a call toward the armed crash; the error when the process is gone or dies now.
    fn crash_before(&self, operation: &'static str) -> StoreResult<()> {
        if self.crashed() {
            return Err(StoreError::Backend {
                message: format!("injected crash: the process is gone ({operation})"),
                retry_safe: true,
            });
        }
        let mut crash = self.crash.lock().unwrap_or_else(|e| e.into_inner());
        let Some(point) = crash.as_mut().filter(|point| point.operation == operation) else {
            return Ok(());
        };
        point.calls_left = point.calls_left.saturating_sub(1);
        if point.calls_left > 0 || point.applied {
            return Ok(());
        }
        *crash = None;
        self.crashed.store(true, Ordering::SeqCst);
        Err(StoreError::Backend {
            message: format!("injected crash before {operation}"),
            retry_safe: true,
        })
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
        self.unacknowledged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The answer of a call the wrapped store made: replaced by an unknown-outcome failure when
    /// [`FaultyStore::fail_after_applying`] armed the operation.
    fn settle<T>(&self, operation: &'static str, result: StoreResult<T>) -> StoreResult<T> {
        if let Some(crash) = self.crash_after(operation) {
            return Err(crash);
        }
        // A call in flight when the process died is answered to nobody: unknown, as for the
        // call that crashed it.
        if self.crashed() {
            return Err(StoreError::Backend {
                message: format!("injected crash while {operation} was in flight"),
                retry_safe: false,
            });
        }
        let stored = result?;
        let mut armed = self
            .unacknowledged
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match armed.get_mut(operation) {
            Some(left) if *left > 0 => {
                *left -= 1;
                Err(StoreError::Backend {
                    message: format!(
                        "injected fault in {operation}: applied, acknowledgement lost"
                    ),
                    retry_safe: false,
                })
            }
            _ => Ok(stored),
        }
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
        self.crash_before(operation)?;
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
        let result = self
            .inner
            .claim_command(tenant_id, command_id, fingerprint, ttl_ms)
            .await;
        self.settle("claim_command", result)
    }

    async fn seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        target: &CommandTarget,
    ) -> StoreResult<()> {
        self.trip("seal_command").await?;
        let result = self
            .inner
            .seal_command(tenant_id, command_id, lease_id, target)
            .await;
        self.settle("seal_command", result)
    }

    async fn list_unfinished_commands(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<UnfinishedCommand>> {
        self.trip("list_unfinished_commands").await?;
        let result = self.inner.list_unfinished_commands(after, limit).await;
        self.settle("list_unfinished_commands", result)
    }

    async fn complete_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        result: &Value,
    ) -> StoreResult<()> {
        self.trip("complete_command").await?;
        let result = self
            .inner
            .complete_command(tenant_id, command_id, lease_id, result)
            .await;
        self.settle("complete_command", result)
    }

    async fn release_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        self.trip("release_command").await?;
        let result = self
            .inner
            .release_command(tenant_id, command_id, lease_id)
            .await;
        self.settle("release_command", result)
    }

    async fn reopen_sealed_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        self.trip("reopen_sealed_command").await?;
        let result = self
            .inner
            .reopen_sealed_command(tenant_id, command_id, lease_id)
            .await;
        self.settle("reopen_sealed_command", result)
    }

    async fn reap_receipts_over_budget(
        &self,
        max_bytes_per_tenant: u64,
        limit: u32,
    ) -> StoreResult<u64> {
        self.trip("reap_receipts_over_budget").await?;
        let result = self
            .inner
            .reap_receipts_over_budget(max_bytes_per_tenant, limit)
            .await;
        self.settle("reap_receipts_over_budget", result)
    }

    async fn reap_command_receipts(&self, finished_before_ms: u64, limit: u32) -> StoreResult<u64> {
        self.trip("reap_command_receipts").await?;
        let result = self
            .inner
            .reap_command_receipts(finished_before_ms, limit)
            .await;
        self.settle("reap_command_receipts", result)
    }

    async fn abandon_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        reason: &str,
    ) -> StoreResult<bool> {
        self.trip("abandon_command").await?;
        let result = self
            .inner
            .abandon_command(tenant_id, command_id, reason)
            .await;
        self.settle("abandon_command", result)
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
        let result = self.inner.list_active_sessions(after, limit).await;
        self.settle("list_active_sessions", result)
    }

    async fn list_closed_sessions(
        &self,
        tenants: &TenantScope,
        closed_before: &str,
        limit: u32,
    ) -> StoreResult<Vec<ClosedSession>> {
        self.trip("list_closed_sessions").await?;
        let result = self
            .inner
            .list_closed_sessions(tenants, closed_before, limit)
            .await;
        self.settle("list_closed_sessions", result)
    }

    async fn purge_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<bool> {
        self.trip("purge_session").await?;
        let result = self.inner.purge_session(tenant_id, session_id).await;
        self.settle("purge_session", result)
    }

    async fn put_session(&self, record: &SessionRecord) -> StoreResult<()> {
        self.trip("put_session").await?;
        let result = self.inner.put_session(record).await;
        self.settle("put_session", result)
    }

    async fn get_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRecord>> {
        self.trip("get_session").await?;
        let result = self.inner.get_session(tenant_id, session_id).await;
        self.settle("get_session", result)
    }

    async fn list_sessions(
        &self,
        tenant_id: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> StoreResult<SessionPage> {
        self.trip("list_sessions").await?;
        let result = self.inner.list_sessions(tenant_id, cursor, limit).await;
        self.settle("list_sessions", result)
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
        self.settle("append_event", Ok(stored))
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
        self.settle("append_events", Ok(stored))
    }

    async fn get_event_by_idempotency_key(
        &self,
        tenant_id: &str,
        session_id: &str,
        idempotency_key: &str,
    ) -> StoreResult<Option<EventEnvelope>> {
        self.trip("get_event_by_idempotency_key").await?;
        let result = self
            .inner
            .get_event_by_idempotency_key(tenant_id, session_id, idempotency_key)
            .await;
        self.settle("get_event_by_idempotency_key", result)
    }

    async fn read_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<EventPage> {
        self.trip("read_events").await?;
        let result = self
            .inner
            .read_events(tenant_id, session_id, after, limit)
            .await;
        self.settle("read_events", result)
    }

    async fn latest_event_sequence(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<u64>> {
        self.trip("latest_event_sequence").await?;
        let result = self
            .inner
            .latest_event_sequence(tenant_id, session_id)
            .await;
        self.settle("latest_event_sequence", result)
    }

    async fn event_stream_range(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<EventRange>> {
        self.trip("event_stream_range").await?;
        let result = self.inner.event_stream_range(tenant_id, session_id).await;
        self.settle("event_stream_range", result)
    }

    async fn wait_for_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
    ) -> StoreResult<()> {
        self.trip("wait_for_events").await?;
        let result = self
            .inner
            .wait_for_events(tenant_id, session_id, after)
            .await;
        self.settle("wait_for_events", result)
    }

    async fn trim_events_by_age(&self, occurred_before: &str, limit: u32) -> StoreResult<u64> {
        self.trip("trim_events_by_age").await?;
        let result = self.inner.trim_events_by_age(occurred_before, limit).await;
        self.settle("trim_events_by_age", result)
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
        let result = self
            .inner
            .create_transcript(tenant_id, session_id, fence)
            .await;
        self.settle("create_transcript", result)
    }

    async fn load_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Transcript>> {
        self.trip("load_transcript").await?;
        let result = self.inner.load_transcript(tenant_id, session_id).await;
        self.settle("load_transcript", result)
    }

    async fn mutate_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        mutation: TranscriptMutation,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.trip("mutate_transcript").await?;
        let result = self
            .inner
            .mutate_transcript(tenant_id, session_id, mutation, fence)
            .await;
        self.settle("mutate_transcript", result)
    }

    async fn fork_transcript(
        &self,
        tenant_id: &str,
        source_session_id: &str,
        target_session_id: &str,
        message_id: Option<&str>,
    ) -> StoreResult<Transcript> {
        self.trip("fork_transcript").await?;
        let result = self
            .inner
            .fork_transcript(tenant_id, source_session_id, target_session_id, message_id)
            .await;
        self.settle("fork_transcript", result)
    }

    async fn delete_transcript(&self, tenant_id: &str, session_id: &str) -> StoreResult<()> {
        self.trip("delete_transcript").await?;
        let result = self.inner.delete_transcript(tenant_id, session_id).await;
        self.settle("delete_transcript", result)
    }

    async fn list_transcripts(&self, tenant_id: &str) -> StoreResult<Vec<String>> {
        self.trip("list_transcripts").await?;
        let result = self.inner.list_transcripts(tenant_id).await;
        self.settle("list_transcripts", result)
    }
}

#[async_trait]
impl DurableJournal for FaultyStore {
    fn writes_steps_atomically(&self) -> bool {
        self.inner.writes_steps_atomically()
    }

    /// One commit, faulted as the write it stands for: a request's start as `append_durable`
    /// (its journal entry), its end as `append_events` (its `result`); a crash there leaves all
    /// or none. A receipt completion armed to fail (`complete_command`) is left to the caller,
    /// whose own completion then fails: the effect stored, its receipt not, as when the two were
    /// separate writes. A store that writes the parts one by one gets them one by one, each
    /// faulted as itself.
    async fn write_request_step(
        &self,
        tenant_id: &str,
        session_id: &str,
        mut step: RequestStep,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<RequestStepWritten> {
        if !self.inner.writes_steps_atomically() {
            return write_step_one_by_one(self, tenant_id, session_id, step, fence).await;
        }
        let operation = match step.kind {
            RequestStepKind::Start => "append_durable",
            RequestStepKind::End => "append_events",
        };
        if self.armed_to_fail("complete_command") {
            step.receipt = None;
        }
        let copy = (self.appends.is_some() && !step.events.is_empty()).then(|| step.events.clone());
        if let Err(error) = self.trip(operation).await {
            self.record_refused(tenant_id, session_id, fence, copy, &error, true);
            return Err(error);
        }
        let written = match self
            .inner
            .write_request_step(tenant_id, session_id, step, fence)
            .await
        {
            Ok(written) => written,
            Err(error) => {
                self.record_refused(tenant_id, session_id, fence, copy, &error, false);
                return Err(error);
            }
        };
        if !written.events.is_empty() {
            self.record_append(tenant_id, session_id, fence, &written.events);
        }
        self.settle(operation, Ok(written))
    }

    async fn append_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<DurableAppendOutcome> {
        self.trip("append_durable").await?;
        let result = self
            .inner
            .append_durable(tenant_id, session_id, drafts, expected, fence)
            .await;
        self.settle("append_durable", result)
    }

    async fn read_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<DurablePage> {
        self.trip("read_durable").await?;
        let result = self
            .inner
            .read_durable(tenant_id, session_id, after, limit)
            .await;
        self.settle("read_durable", result)
    }

    async fn durable_head(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<u64>> {
        self.trip("durable_head").await?;
        let result = self.inner.durable_head(tenant_id, session_id).await;
        self.settle("durable_head", result)
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
        let result = self
            .inner
            .requires_execution_lease(tenant_id, session_id)
            .await;
        self.settle("requires_execution_lease", result)
    }

    async fn acquire_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
        request: AcquireLease,
    ) -> StoreResult<ExecutionLease> {
        self.trip("acquire_execution_lease").await?;
        let result = self
            .inner
            .acquire_execution_lease(tenant_id, session_id, request)
            .await;
        self.settle("acquire_execution_lease", result)
    }

    async fn renew_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<ExecutionLease> {
        self.trip("renew_execution_lease").await?;
        let result = self
            .inner
            .renew_execution_lease(tenant_id, lease, ttl_ms)
            .await;
        self.settle("renew_execution_lease", result)
    }

    async fn assert_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        self.trip("assert_execution_lease").await?;
        let result = self.inner.assert_execution_lease(tenant_id, lease).await;
        self.settle("assert_execution_lease", result)
    }

    async fn release_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        self.trip("release_execution_lease").await?;
        let result = self.inner.release_execution_lease(tenant_id, lease).await;
        self.settle("release_execution_lease", result)
    }

    async fn get_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<ExecutionLease>> {
        self.trip("get_execution_lease").await?;
        let result = self.inner.get_execution_lease(tenant_id, session_id).await;
        self.settle("get_execution_lease", result)
    }
}

#[async_trait]
impl WorkerRegistry for FaultyStore {
    async fn register_worker(&self, request: RegisterWorker) -> StoreResult<WorkerRecord> {
        self.trip("register_worker").await?;
        let result = self.inner.register_worker(request).await;
        self.settle("register_worker", result)
    }

    async fn heartbeat_worker(&self, worker_id: &str, ttl_ms: u64) -> StoreResult<WorkerRecord> {
        self.trip("heartbeat_worker").await?;
        let result = self.inner.heartbeat_worker(worker_id, ttl_ms).await;
        self.settle("heartbeat_worker", result)
    }

    async fn drain_worker(&self, worker_id: &str) -> StoreResult<WorkerRecord> {
        self.trip("drain_worker").await?;
        let result = self.inner.drain_worker(worker_id).await;
        self.settle("drain_worker", result)
    }

    async fn get_worker(&self, worker_id: &str) -> StoreResult<Option<WorkerRecord>> {
        self.trip("get_worker").await?;
        let result = self.inner.get_worker(worker_id).await;
        self.settle("get_worker", result)
    }

    async fn list_workers(&self) -> StoreResult<Vec<WorkerRecord>> {
        self.trip("list_workers").await?;
        let result = self.inner.list_workers().await;
        self.settle("list_workers", result)
    }
}

#[async_trait]
impl AgentMemories for FaultyStore {
    async fn save_memory(
        &self,
        tenant_id: &str,
        record: MemoryRecord,
        max_entries: u32,
    ) -> StoreResult<MemoryRecord> {
        self.trip("save_memory").await?;
        let result = self.inner.save_memory(tenant_id, record, max_entries).await;
        self.settle("save_memory", result)
    }

    async fn get_memory(
        &self,
        tenant_id: &str,
        scope: &str,
        name: &str,
    ) -> StoreResult<Option<MemoryRecord>> {
        self.trip("get_memory").await?;
        let result = self.inner.get_memory(tenant_id, scope, name).await;
        self.settle("get_memory", result)
    }

    async fn list_memories(&self, tenant_id: &str, scope: &str) -> StoreResult<Vec<MemoryRecord>> {
        self.trip("list_memories").await?;
        let result = self.inner.list_memories(tenant_id, scope).await;
        self.settle("list_memories", result)
    }

    async fn delete_memory(&self, tenant_id: &str, scope: &str, name: &str) -> StoreResult<bool> {
        self.trip("delete_memory").await?;
        let result = self.inner.delete_memory(tenant_id, scope, name).await;
        self.settle("delete_memory", result)
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
        let result = self
            .inner
            .enqueue_session(tenant_id, session_id, options)
            .await;
        self.settle("enqueue_session", result)
    }

    async fn claim_session(&self, request: ClaimSession) -> StoreResult<Option<RouteClaim>> {
        self.trip("claim_session").await?;
        let result = self.inner.claim_session(request).await;
        self.settle("claim_session", result)
    }

    async fn transition_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        self.trip("transition_session").await?;
        let result = self
            .inner
            .transition_session(tenant_id, lease, transition)
            .await;
        self.settle("transition_session", result)
    }

    async fn settle_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        self.trip("settle_session").await?;
        let result = self
            .inner
            .settle_session(tenant_id, lease, transition)
            .await;
        self.settle("settle_session", result)
    }

    async fn handoff_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        metadata: Option<serde_json::Map<String, Value>>,
    ) -> StoreResult<SessionRoute> {
        self.trip("handoff_session").await?;
        let result = self.inner.handoff_session(tenant_id, lease, metadata).await;
        self.settle("handoff_session", result)
    }

    async fn renew_session_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<RouteClaim> {
        self.trip("renew_session_lease").await?;
        let result = self
            .inner
            .renew_session_lease(tenant_id, lease, ttl_ms)
            .await;
        self.settle("renew_session_lease", result)
    }

    async fn renew_session_leases(
        &self,
        leases: &[(String, ExecutionLease)],
        ttl_ms: u64,
    ) -> StoreResult<Vec<StoreResult<ExecutionLease>>> {
        self.trip("renew_session_leases").await?;
        let result = self.inner.renew_session_leases(leases, ttl_ms).await;
        self.settle("renew_session_leases", result)
    }

    async fn get_session_route(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRoute>> {
        self.trip("get_session_route").await?;
        let result = self.inner.get_session_route(tenant_id, session_id).await;
        self.settle("get_session_route", result)
    }

    async fn list_worker_sessions(&self, worker_id: &str) -> StoreResult<Vec<SessionRoute>> {
        self.trip("list_worker_sessions").await?;
        let result = self.inner.list_worker_sessions(worker_id).await;
        self.settle("list_worker_sessions", result)
    }

    async fn recover_expired_work(
        &self,
        abandon_sealed_after_ms: u64,
    ) -> StoreResult<RecoveryCounts> {
        self.trip("recover_expired_work").await?;
        let result = self
            .inner
            .recover_expired_work(abandon_sealed_after_ms)
            .await;
        self.settle("recover_expired_work", result)
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
        let result = self.inner.close().await;
        self.settle("close", result)
    }
}
