//! The in-memory store engine behind both the memory and the JSONL backends.
//!
//! All state lives in one [`State`] behind one mutex. Every port method takes the lock, checks,
//! applies its change, journals the change through the [`Backend`] and only then releases the
//! lock, so a fenced write checks the execution lease and writes in one atomic step, and the
//! journal receives changes in exactly the order they were applied. The lock is a
//! `std::sync::Mutex` and is never held across an `.await`.

mod commands;
mod dropped;
mod durable;
mod events;
mod fencing;
mod memories;
mod portable;
mod routes;
mod sessions;
mod state;
mod transcripts;
mod webhooks;
mod workers;

#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, MutexGuard};

use agent_runtime::protocol::JsonObject;
use async_trait::async_trait;
use serde_json::Value;

use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::journal::{Journal, JournalEntry, Snapshot};
use crate::model::StoreHealth;
use crate::options::StoreOptions;
use crate::ports::StoreLifecycle;
#[cfg(any(test, feature = "testing"))]
use crate::test_hooks::TestHooks;

pub(crate) use state::{State, transcript_lines};
pub(crate) use webhooks::failure_clock;

/// What a backend adds to the engine: where journal entries go, and how it describes itself.
pub trait Backend: Send + Sync + 'static {
    /// The store's name in `NotOpen` messages ("MemoryStore is closed").
    const NAME: &'static str;

    /// Persists the entries of one state change before the mutating call returns.
    /// `InvalidArgument` means the backend refused the entries without writing anything (a
    /// record over its size limit): the engine rolls the change back and goes on. Any other
    /// error may have written part of it, and the engine fails closed.
    fn append(&self, entries: &[JournalEntry]) -> StoreResult<()>;

    /// Releases backend resources (files, locks). Called once, with the state lock held.
    fn close(&self) -> StoreResult<()>;

    /// Adds backend details (`backend`, `directory`, ...) to `health_check`.
    fn describe(&self, details: &mut JsonObject);

    /// The state as of the last acknowledged [`Backend::append`], rebuilt from what the backend
    /// made durable; the engine swaps it in when an append fails, so a change that may not be
    /// durable never becomes readable (docs/architecture.md invariant 1: an SSE client must never
    /// see an event whose sequence a restart would hand out again). `None`: the backend cannot
    /// tell, and the applied change stays readable (the memory store's journal hook,
    /// docs/storage.md §10.D case 34). `Some(Err)`: the durable state is unknown, so reads are
    /// refused as well.
    fn durable_state(&self, _retention: u64) -> Option<StoreResult<DurableState>> {
        None
    }

    /// Rewrites what the backend keeps as `snapshot()` when enough of it is dead to be worth it
    /// (the JSONL journal: see `StoreOptions::jsonl_compaction_min_bytes`). Called after an
    /// acknowledged write with the state lock held, so the snapshot is exactly the journaled
    /// state. `dropped_bytes`: the journal bytes of the event and durable event lines the write
    /// dropped (`dropped.rs`). An error means the backend can no longer be written (the engine
    /// fails closed); a compaction that merely did not happen is not one. Default: nothing to
    /// compact.
    fn compact_if_grown(
        &self,
        _dropped_bytes: u64,
        _snapshot: &dyn Fn() -> Snapshot,
    ) -> StoreResult<()> {
        Ok(())
    }
}

/// A store state rebuilt by a backend (see [`Backend::durable_state`]); opaque outside the crate.
pub struct DurableState(pub(crate) State);

/// The store engine; use it through [`MemoryStore`] or [`crate::JsonlStore`].
pub struct StoreEngine<B: Backend> {
    inner: Arc<EngineInner<B>>,
}

impl<B: Backend> Clone for StoreEngine<B> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct EngineInner<B> {
    /// Every record of every port, plus the open/failed flags. See the module docs.
    state: Mutex<State>,
    options: StoreOptions,
    backend: B,
}

/// The memory backend: state only lives in this process, optionally mirrored to a [`Journal`].
pub struct MemoryBackend {
    journal: Option<Arc<dyn Journal>>,
}

impl Backend for MemoryBackend {
    const NAME: &'static str = "MemoryStore";

    fn append(&self, entries: &[JournalEntry]) -> StoreResult<()> {
        match &self.journal {
            Some(journal) => journal.append(entries),
            None => Ok(()),
        }
    }

    fn close(&self) -> StoreResult<()> {
        Ok(())
    }

    fn describe(&self, details: &mut JsonObject) {
        details.insert("backend".to_owned(), Value::from("memory"));
    }
}

/// The in-memory store: every port, one process, nothing persisted unless a journal is attached.
pub type MemoryStore = StoreEngine<MemoryBackend>;

impl StoreEngine<MemoryBackend> {
    pub fn new(options: StoreOptions) -> Self {
        Self::from_parts(State::default(), options, MemoryBackend { journal: None })
    }

    /// A memory store that hands every state change to `journal` before the call returns.
    pub fn with_journal(options: StoreOptions, journal: Arc<dyn Journal>) -> Self {
        let backend = MemoryBackend {
            journal: Some(journal),
        };
        Self::from_parts(State::default(), options, backend)
    }
}

/// The working context of one mutation: its "now" and the journal entries it produced.
pub(crate) struct Ctx<'a> {
    pub now: u64,
    pub options: &'a StoreOptions,
    pub entries: Vec<JournalEntry>,
    /// Journal bytes of the event lines this mutation dropped (see `dropped.rs`).
    pub dropped: u64,
}

impl Ctx<'_> {
    pub fn record(&mut self, entry: JournalEntry) {
        self.entries.push(entry);
    }
}

impl<B: Backend> StoreEngine<B> {
    pub(crate) fn from_parts(state: State, options: StoreOptions, backend: B) -> Self {
        Self {
            inner: Arc::new(EngineInner {
                state: Mutex::new(state),
                options,
                backend,
            }),
        }
    }

    pub fn options(&self) -> &StoreOptions {
        &self.inner.options
    }

    pub(crate) fn backend(&self) -> &B {
        &self.inner.backend
    }

    fn lock(&self) -> StoreResult<MutexGuard<'_, State>> {
        // A panic while the lock was held may have left a change applied but not journaled;
        // carrying on could acknowledge writes a restart would not replay, so refuse instead.
        self.inner.state.lock().map_err(|_| StoreError::Backend {
            message: "the store state lock was poisoned by a panic; restart the process".into(),
            retry_safe: false,
        })
    }

    fn closed_error() -> StoreError {
        StoreError::NotOpen(format!("{} is closed", B::NAME))
    }

    fn journal_failed_error() -> StoreError {
        StoreError::runtime(
            RuntimeErrorCode::JournalFailed,
            "The store journal failed earlier; restart the process to replay the journal",
        )
    }

    /// Reads are refused once closed, or once a journal failure left the durable state unknown.
    fn ensure_readable(state: &State) -> StoreResult<()> {
        if state.closed {
            return Err(Self::closed_error());
        }
        if state.unreadable {
            return Err(Self::journal_failed_error());
        }
        Ok(())
    }

    /// After a failed journal append: refuse further writes, and undo whatever the failed change
    /// applied in memory when the backend can say what is durable (see
    /// [`Backend::durable_state`]). Waiters stay registered; a woken follower re-reads the
    /// rolled-back log and finds nothing new.
    fn fail_closed(&self, state: &mut State, error: &StoreError) {
        tracing::error!(store = B::NAME, %error, "journal write failed; the store refuses further writes");
        if let Some(Err(reload)) = self.reload_durable(state) {
            tracing::error!(store = B::NAME, error = %reload, "the durable state cannot be reloaded; the store refuses reads too");
            let waiters = std::mem::take(&mut state.waiters);
            *state = State {
                waiters,
                unreadable: true,
                ..State::default()
            };
        }
        state.failed = true;
    }

    /// Replaces the state with what the journal holds; `None` when the backend keeps nothing to
    /// reload (memory).
    fn reload_durable(&self, state: &mut State) -> Option<StoreResult<()>> {
        let retention = self.inner.options.retention();
        Some(
            self.inner
                .backend
                .durable_state(retention)?
                .map(|DurableState(mut durable)| {
                    durable.waiters = std::mem::take(&mut state.waiters);
                    *state = durable;
                }),
        )
    }

    /// Mutations are refused once the store is closed or its journal failed.
    fn ensure_writable(state: &State) -> StoreResult<()> {
        if state.closed {
            return Err(Self::closed_error());
        }
        if state.failed {
            return Err(Self::journal_failed_error());
        }
        Ok(())
    }

    /// Runs a mutation: refuses once closed or failed, applies `op`, then journals what it
    /// recorded while still holding the lock, so no reader sees the change before the journal
    /// has it. Whatever `op` recorded was applied, so it is journaled even when `op` then fails
    /// (a claim's recovery sweep before a refusal). A failed journal write fails the store
    /// closed ([`Self::fail_closed`]).
    pub(crate) fn write<T>(
        &self,
        op: impl FnOnce(&mut State, &mut Ctx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut state = self.lock()?;
        Self::ensure_writable(&state)?;
        let mut cx = Ctx {
            now: self.inner.options.now_ms(),
            options: &self.inner.options,
            entries: Vec::new(),
            dropped: 0,
        };
        let outcome = op(&mut state, &mut cx);
        if cx.entries.is_empty() {
            return outcome;
        }
        if let Err(error) = self.inner.backend.append(&cx.entries) {
            if let StoreError::InvalidArgument(_) = error {
                // Refused before anything was written (a record over the backend's size limit):
                // undo the change in memory and go on.
                self.roll_back(&mut state, &error);
                return Err(error);
            }
            // The change may not be durable: stop accepting writes so nothing acknowledged later
            // depends on it, and (where the backend can tell) make it unreadable again.
            self.fail_closed(&mut state, &error);
            return Err(error);
        }
        if let Err(error) = self
            .inner
            .backend
            .compact_if_grown(cx.dropped, &|| state.snapshot_parts())
        {
            // The write above is durable and stays acknowledged; later ones cannot be.
            self.fail_closed(&mut state, &error);
        }
        outcome
    }

    /// Puts the state back to what the journal holds after a write the backend refused without
    /// writing; the store fails closed only if that state cannot be read back.
    fn roll_back(&self, state: &mut State, error: &StoreError) {
        tracing::warn!(store = B::NAME, %error, "a write was refused; its change is rolled back");
        if !matches!(self.reload_durable(state), Some(Ok(()))) {
            self.fail_closed(state, error);
        }
    }

    /// Runs a read under the lock.
    pub(crate) fn read<T>(&self, op: impl FnOnce(&State, u64) -> StoreResult<T>) -> StoreResult<T> {
        let state = self.lock()?;
        Self::ensure_readable(&state)?;
        op(&state, self.inner.options.now_ms())
    }

    /// Like [`Self::read`] but with mutable access for bookkeeping that is not a state change
    /// (registering a wake-up waiter).
    pub(crate) fn with_state_mut<T>(
        &self,
        op: impl FnOnce(&mut State, u64) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut state = self.lock()?;
        Self::ensure_readable(&state)?;
        op(&mut state, self.inner.options.now_ms())
    }

    /// The whole state as journal entries, in the order of docs/storage.md §9.1 (sessions, then per
    /// session its retained events and orphaned keys, then command leases), followed by
    /// transcripts, durable events, execution leases, workers and routes.
    pub fn snapshot(&self) -> StoreResult<Vec<JournalEntry>> {
        self.read(|state, _| Ok(state.snapshot()))
    }

    /// Rebuilds state from journal entries. Requires an empty store. The restored entries are
    /// journaled like any other change (one batch), so a JSONL store keeps them across a restart.
    pub fn restore(&self, entries: Vec<JournalEntry>) -> StoreResult<()> {
        let mut state = self.lock()?;
        Self::ensure_writable(&state)?;
        if !state.is_empty() {
            return Err(StoreError::invalid("restore() requires an empty store"));
        }
        let retention = self.inner.options.retention();
        let mut rebuilt = State::default();
        for entry in entries.iter().cloned() {
            rebuilt
                .apply(entry, retention)
                .map_err(StoreError::invalid)?;
        }
        // Only replace the state once every entry applied, so a bad snapshot leaves it empty.
        rebuilt.waiters = std::mem::take(&mut state.waiters);
        *state = rebuilt;
        if entries.is_empty() {
            return Ok(());
        }
        if let Err(error) = self.inner.backend.append(&entries) {
            self.fail_closed(&mut state, &error);
            return Err(error);
        }
        Ok(())
    }
}

#[async_trait]
impl<B: Backend> StoreLifecycle for StoreEngine<B> {
    async fn health_check(&self) -> StoreHealth {
        let mut details = JsonObject::new();
        self.inner.backend.describe(&mut details);
        let (ready, failed, closed) = match self.lock() {
            Ok(state) => (!state.failed && !state.closed, state.failed, state.closed),
            Err(_) => (false, true, false),
        };
        let phase = if closed { "closed" } else { "ready" };
        details.insert("state".to_owned(), Value::from(phase));
        if failed {
            details.insert("reason".to_owned(), Value::from("journal write failed"));
        }
        StoreHealth { ready, details }
    }

    async fn close(&self) -> StoreResult<()> {
        let mut state = self.lock()?;
        if state.closed {
            return Ok(());
        }
        state.closed = true;
        // Dropping the senders wakes every pending `wait_for_events`.
        state.waiters.clear();
        self.inner.backend.close()
    }
}

#[cfg(any(test, feature = "testing"))]
#[async_trait]
impl<B: Backend> TestHooks for StoreEngine<B> {
    async fn trim_agent_events_for_testing(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<()> {
        self.write(|state, cx| {
            state.reset_event_log(cx, tenant_id, session_id);
            Ok(())
        })
    }
}
