//! A store wrapper that fails chosen operations on demand, for fault-injection tests (a result
//! that cannot be stored, a journal that breaks, a database that goes away).
//!
//! Faults are armed per [`Operation`] (the port method, e.g. `complete_command`) with a count;
//! each armed call fails with a retry-safe backend error before reaching the wrapped store, or
//! (armed with [`Faults::fail_after_applying`]) takes effect and then fails with an unknown
//! outcome. An operation can also be *held*: its calls wait until it is released (a store that stalls).
//!
//! It can also record every event-log append the wrapped store acknowledged, with the fence it
//! was written under ([`FaultyStore::recording_appends`]): the writer history that the history
//! checker (tests/support/history.rs) holds against the final log.

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agent_runtime::protocol::EventEnvelope;
use async_trait::async_trait;

use crate::error::{StoreError, StoreResult};
use crate::hooked::{Call, Hooked, Operation, StoreHooks};
use crate::model::*;
use crate::ports::*;

/// A store that fails armed operations.
pub type FaultyStore = Hooked<Faults>;

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Hooked::with_hooks(inner, Faults::default())
    }

    /// Also records every acknowledged event-log append (see [`Faults::acknowledged_appends`]).
    pub fn recording_appends(mut self) -> Self {
        self.hooks_mut().appends = Some(Mutex::new(Vec::new()));
        self
    }
}

/// The faults a [`FaultyStore`] is armed with, and what it recorded.
#[derive(Default)]
pub struct Faults {
    armed: Mutex<HashMap<Operation, u32>>,
    /// Every operation fails ([`Faults::fail_everything`]) until healed.
    everything: AtomicBool,
    /// Operations whose next calls are applied by the wrapped store and then reported as failed
    /// with an unknown outcome (a COMMIT whose reply was lost).
    unacknowledged: Mutex<HashMap<Operation, u32>>,
    calls: Mutex<HashMap<Operation, u64>>,
    /// Operations whose next call panics, with the panic's message (a bug in the server).
    panicking: Mutex<HashMap<Operation, &'static str>>,
    /// Where the process is to "die" (see [`Faults::crash_at`]).
    crash: Mutex<Option<CrashPoint>>,
    /// Set once it died: every later call fails.
    crashed: AtomicBool,
    /// Held operations: a closed semaphore lets every waiter through.
    held: Mutex<HashMap<Operation, Arc<tokio::sync::Semaphore>>>,
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

/// The call at which [`Faults::crash_at`] stops the process.
struct CrashPoint {
    operation: Operation,
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

impl Faults {
    /// The acknowledged appends so far, in the order they returned (empty unless recording).
    pub fn acknowledged_appends(&self) -> Vec<AcknowledgedAppend> {
        self.appends
            .as_ref()
            .map(|appends| appends.locked().clone())
            .unwrap_or_default()
    }

    /// The definitely refused appends so far (empty unless recording).
    pub fn refused_appends(&self) -> Vec<RefusedAppend> {
        self.refused.locked().clone()
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
        self.refused.locked().push(RefusedAppend {
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
            appends.locked().push(AcknowledgedAppend {
                tenant_id: tenant_id.to_owned(),
                session_id: session_id.to_owned(),
                fence: fence.cloned(),
                events: events.to_vec(),
            });
        }
    }

    /// Whether the next call of `operation` is to fail (`fail_next`, `fail_always`,
    /// `fail_everything`).
    fn armed_to_fail(&self, operation: Operation) -> bool {
        let armed = self.armed.locked();
        self.everything.load(Ordering::SeqCst)
            || armed.get(&operation).is_some_and(|left| *left > 0)
    }

    /// Makes the next `times` calls of `operation` fail.
    pub fn fail_next(&self, operation: Operation, times: u32) {
        let mut armed = self.armed.locked();
        *armed.entry(operation).or_default() += times;
    }

    /// Lets the next `times` calls of `operation` reach the wrapped store and take effect, then
    /// fails each with an error whose outcome is unknown (`retry_safe: false`): the write was
    /// made, its acknowledgement lost, as when the connection breaks after a COMMIT.
    pub fn fail_after_applying(&self, operation: Operation, times: u32) {
        let mut armed = self.unacknowledged.locked();
        *armed.entry(operation).or_default() += times;
    }

    /// Stops the process, as the store sees it, at the `nth` call of `operation` from now (1 is
    /// the next): that call fails, after taking effect with an unknown outcome when `applied`,
    /// else before reaching the wrapped store; from then on every call of every operation fails
    /// (retry-safe, nothing reaches the store), so nothing the process does after that point is
    /// written: a crash between two writes. The process is then stopped and a new one started on
    /// the same store, as after a real crash (the crash-point suite, tests/history/crash_points.rs).
    pub fn crash_at(&self, operation: Operation, nth: u32, applied: bool) {
        *self.crash.locked() = Some(CrashPoint {
            operation,
            calls_left: nth.max(1),
            applied,
        });
    }

    /// Whether the crash armed by [`Faults::crash_at`] happened.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// The crash of a call that `trip` let through (`applied`), if it is the armed one.
    fn crash_after(&self, operation: Operation) -> Option<StoreError> {
        let mut crash = self.crash.locked();
        let due = crash
            .as_ref()
            .is_some_and(|point| point.operation == operation && point.calls_left == 0);
        if !due {
            return None;
        }
        *crash = None;
        self.crashed.store(true, Ordering::SeqCst);
        Some(StoreError::Backend {
            message: format!("injected crash after {} took effect", operation.name()),
            retry_safe: false,
        })
    }

    /// Counts a call toward the armed crash; the error when the process is gone or dies now.
    fn crash_before(&self, operation: Operation) -> StoreResult<()> {
        if self.crashed() {
            return Err(StoreError::Backend {
                message: format!("injected crash: the process is gone ({})", operation.name()),
                retry_safe: true,
            });
        }
        let mut crash = self.crash.locked();
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
            message: format!("injected crash before {}", operation.name()),
            retry_safe: true,
        })
    }

    /// Fails every later call of `operation` until [`Faults::heal`].
    pub fn fail_always(&self, operation: Operation) {
        self.fail_next(operation, u32::MAX);
    }

    /// Fails every later call of every operation until [`Faults::heal`]: the wrapped store
    /// is out of reach (a process cut off from PostgreSQL).
    pub fn fail_everything(&self) {
        self.everything.store(true, Ordering::SeqCst);
    }

    /// Makes the next call of `operation` panic with `message`, as a bug would.
    pub fn panic_next(&self, operation: Operation, message: &'static str) {
        let mut panicking = self.panicking.locked();
        panicking.insert(operation, message);
    }

    pub fn heal(&self) {
        self.everything.store(false, Ordering::SeqCst);
        self.armed.locked().clear();
        self.unacknowledged.locked().clear();
    }

    /// The answer of a call the wrapped store made: replaced by an unknown-outcome failure when
    /// [`Faults::fail_after_applying`] armed the operation.
    fn settle<T>(&self, operation: Operation, result: StoreResult<T>) -> StoreResult<T> {
        if let Some(crash) = self.crash_after(operation) {
            return Err(crash);
        }
        // A call in flight when the process died is answered to nobody: unknown, as for the
        // call that crashed it.
        if self.crashed() {
            return Err(StoreError::Backend {
                message: format!("injected crash while {} was in flight", operation.name()),
                retry_safe: false,
            });
        }
        let stored = result?;
        let mut armed = self.unacknowledged.locked();
        match armed.get_mut(&operation) {
            Some(left) if *left > 0 => {
                *left -= 1;
                Err(StoreError::Backend {
                    message: format!(
                        "injected fault in {}: applied, acknowledgement lost",
                        operation.name()
                    ),
                    retry_safe: false,
                })
            }
            _ => Ok(stored),
        }
    }

    /// How often `operation` was called (faulted, held or not): a held call counts from the moment
    /// it waits, so a test can tell that a call reached the store before releasing it.
    pub fn calls(&self, operation: Operation) -> u64 {
        let calls = self.calls.locked();
        calls.get(&operation).copied().unwrap_or(0)
    }

    /// Makes every later call of `operation` wait (before reaching the wrapped store) until
    /// [`FaultyStore::release`].
    pub fn hold(&self, operation: Operation) {
        let mut held = self.held.locked();
        held.entry(operation)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(0)));
    }

    /// Lets the held calls of `operation`, and every later one, through.
    pub fn release(&self, operation: Operation) {
        let gate = self.held.locked().remove(&operation);
        if let Some(gate) = gate {
            gate.close();
        }
    }

    async fn trip(&self, operation: Operation) -> StoreResult<()> {
        *self.calls.locked().entry(operation).or_default() += 1;
        let gate = self.held.locked().get(&operation).cloned();
        if let Some(gate) = gate {
            // Err(Closed) is the release.
            let _ = gate.acquire().await;
        }
        let panic = self.panicking.locked().remove(&operation);
        if let Some(message) = panic {
            panic!("{message}");
        }
        self.crash_before(operation)?;
        let mut armed = self.armed.locked();
        if self.everything.load(Ordering::SeqCst) {
            return Err(StoreError::Backend {
                message: format!(
                    "injected fault in {}: the store is out of reach",
                    operation.name()
                ),
                retry_safe: true,
            });
        }
        match armed.get_mut(&operation) {
            Some(left) if *left > 0 => {
                if *left != u32::MAX {
                    *left -= 1;
                }
                Err(StoreError::Backend {
                    message: format!("injected fault in {}", operation.name()),
                    retry_safe: true,
                })
            }
            _ => Ok(()),
        }
    }
}

impl Faults {
    /// One append under fault injection: an injected or definite refusal is recorded as
    /// refused, an acknowledged one as appended (`appended` finds its events in the answer).
    #[allow(clippy::too_many_arguments)]
    async fn append<T>(
        &self,
        operation: Operation,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
        copy: Option<Vec<NewEvent>>,
        call: Call<'_, T>,
        appended: impl Fn(&T) -> &[EventEnvelope],
    ) -> StoreResult<T> {
        if let Err(error) = self.trip(operation).await {
            self.record_refused(tenant_id, session_id, fence, copy, &error, true);
            return Err(error);
        }
        let stored = match call.await {
            Ok(stored) => stored,
            Err(error) => {
                self.record_refused(tenant_id, session_id, fence, copy, &error, false);
                return Err(error);
            }
        };
        let events = appended(&stored);
        if !events.is_empty() {
            self.record_append(tenant_id, session_id, fence, events);
        }
        self.settle(operation, Ok(stored))
    }

    fn copy_of(&self, events: &[NewEvent]) -> Option<Vec<NewEvent>> {
        (self.appends.is_some() && !events.is_empty()).then(|| events.to_vec())
    }
}

#[async_trait]
impl StoreHooks for Faults {
    async fn around<T: Send>(&self, operation: Operation, call: Call<'_, T>) -> StoreResult<T> {
        self.trip(operation).await?;
        let result = call.await;
        self.settle(operation, result)
    }

    async fn health_check(&self, store: &FaultyStore) -> StoreHealth {
        if self.trip(Operation::HealthCheck).await.is_err() {
            let mut details = agent_runtime::protocol::JsonObject::new();
            details.insert("reason".to_owned(), "injected fault".into());
            return StoreHealth {
                ready: false,
                details,
            };
        }
        store.inner().health_check().await
    }

    /// Two steps, each under its own faults (a claim that succeeds and a seal that fails).
    async fn claim_and_seal_command(
        &self,
        store: &FaultyStore,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
        target: &CommandTarget,
    ) -> StoreResult<CommandClaim> {
        claim_then_seal(store, tenant_id, command_id, fingerprint, ttl_ms, target).await
    }

    async fn append_event(
        &self,
        store: &FaultyStore,
        tenant_id: &str,
        event: NewEvent,
        idempotency_key: Option<&str>,
    ) -> StoreResult<EventEnvelope> {
        let copy = self.copy_of(std::slice::from_ref(&event));
        let session_id = event.session_id.clone();
        let call = store
            .inner()
            .append_event(tenant_id, event, idempotency_key);
        let appended = std::slice::from_ref;
        self.append(
            Operation::AppendEvent,
            tenant_id,
            &session_id,
            None,
            copy,
            call,
            appended,
        )
        .await
    }

    async fn append_events(
        &self,
        store: &FaultyStore,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<EventEnvelope>> {
        let copy = self.copy_of(&events);
        let call = store
            .inner()
            .append_events(tenant_id, session_id, events, fence);
        let appended = Vec::as_slice;
        self.append(
            Operation::AppendEvents,
            tenant_id,
            session_id,
            fence,
            copy,
            call,
            appended,
        )
        .await
    }

    /// Where the wrapped store writes a step in one commit, the step is one call, armed as the
    /// operation its part would be (`append_durable` for a start, `append_events` for an end);
    /// an armed `complete_command` keeps the receipt out of it. Elsewhere the parts go one by
    /// one through this store, each under its own faults.
    async fn write_request_step(
        &self,
        store: &FaultyStore,
        tenant_id: &str,
        session_id: &str,
        mut step: RequestStep,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<RequestStepWritten> {
        if !store.inner().writes_steps_atomically() {
            return write_step_one_by_one(store, tenant_id, session_id, step, fence).await;
        }
        let operation = match step.kind {
            RequestStepKind::Start => Operation::AppendDurable,
            RequestStepKind::End => Operation::AppendEvents,
        };
        if self.armed_to_fail(Operation::CompleteCommand) {
            step.receipt = None;
        }
        let copy = self.copy_of(&step.events);
        let call = store
            .inner()
            .write_request_step(tenant_id, session_id, step, fence);
        self.append(
            operation,
            tenant_id,
            session_id,
            fence,
            copy,
            call,
            step_events,
        )
        .await
    }
}

fn step_events(written: &RequestStepWritten) -> &[EventEnvelope] {
    &written.events
}
