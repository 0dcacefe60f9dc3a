//! The one conformance suite every store backend must pass (docs/storage.md S6, §10.A-§10.C,
//! §10.G).
//!
//! Generic test bodies live in the seam modules below ([`commands`], [`sessions`], [`events`],
//! [`leases`], [`journal`], [`transcripts`], [`routes`], [`hooks`]); each takes a [`Factory`] that
//! builds a fresh store per case. A backend's test file is one macro call per suite:
//!
//! ```ignore
//! use agent_runtime_store::conformance::{Harness, StoreConfigForTest};
//!
//! async fn harness(config: StoreConfigForTest) -> Harness {
//!     let store = std::sync::Arc::new(MemoryStore::new(/* options from config */));
//!     Harness::new(store, config.clock)
//! }
//!
//! agent_runtime_store::store_conformance_suite!(memory, harness);
//! agent_runtime_store::store_test_hook_suite!(memory_hooks, harness);
//! ```
//!
//! The factory owns the whole store configuration that a case may need to vary
//! ([`StoreConfigForTest`]): the clock, event retention and the durable quota. Cases never sleep;
//! they move the [`ManualClock`] and only wait, with a deadline, for a condition (a live-tail
//! wake-up). The invoking crate needs `tokio` (with `macros` and `rt-multi-thread`).

pub mod commands;
pub mod events;
pub mod hooks;
pub mod journal;
pub mod leases;
pub mod memories;
pub mod recovery;
pub mod routes;
pub mod sessions;
pub mod support;
pub mod transcripts;
pub mod webhooks;

mod suite;

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agent_runtime::clock::{self, Clock, ManualClock, SharedClock};

use crate::error::StoreResult;
use crate::model::DEFAULT_MAX_DURABLE_EVENTS;
use crate::ports::Store;

/// Default agent-event retention per session (decision S4).
pub const DEFAULT_MAX_EVENTS_PER_SESSION: u64 = 10_000;

/// What a case asks of the backend factory.
#[derive(Clone, Debug)]
pub struct StoreConfigForTest {
    /// The clock the store must read for every TTL, lease, window and timestamp.
    pub clock: Arc<ManualClock>,
    /// Agent events retained per session (docs/storage.md §1.4 "Retention").
    pub max_events_per_session: u64,
    /// Durable events allowed per session before `QuotaExceeded` (docs/storage.md §3.3).
    pub max_durable_events_per_session: u64,
}

impl StoreConfigForTest {
    /// The clock as the shared handle store options take.
    pub fn shared_clock(&self) -> SharedClock {
        self.clock.clone()
    }

    pub fn with_max_events(mut self, max_events_per_session: u64) -> Self {
        self.max_events_per_session = max_events_per_session;
        self
    }

    pub fn with_max_durable_events(mut self, max_durable_events_per_session: u64) -> Self {
        self.max_durable_events_per_session = max_durable_events_per_session;
        self
    }
}

impl Default for StoreConfigForTest {
    /// The clock starts at the real time, so a backend that also consults a database clock starts
    /// out consistent with it; every assertion is relative to the clock, never to a constant.
    fn default() -> Self {
        Self {
            clock: ManualClock::new(clock::system().now_ms()),
            max_events_per_session: DEFAULT_MAX_EVENTS_PER_SESSION,
            max_durable_events_per_session: DEFAULT_MAX_DURABLE_EVENTS,
        }
    }
}

/// A boxed future returned by [`TrimHook`].
pub type TrimFuture = Pin<Box<dyn Future<Output = StoreResult<()>> + Send>>;

/// The memory/JSONL test hook `trim_agent_events_for_testing(tenant, session)` (docs/storage.md
/// §1.1), as a closure so the suite needs no backend type. Build one with
/// [`conformance_trim_hook!`].
pub type TrimHook = Arc<dyn Fn(String, String) -> TrimFuture + Send + Sync>;

/// One store under test.
pub struct Harness {
    pub store: Arc<dyn Store>,
    /// The same clock the store reads.
    pub clock: Arc<ManualClock>,
    /// The event-log trim hook, for [`store_test_hook_suite!`] only.
    pub trim_events: Option<TrimHook>,
    /// Whatever must outlive the store (a temporary directory); never read.
    pub guard: Option<Box<dyn Any + Send + Sync>>,
}

impl Harness {
    pub fn new(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Self {
        Self {
            store,
            clock,
            trim_events: None,
            guard: None,
        }
    }

    /// Keeps `guard` (e.g. a `tempfile::TempDir`) alive as long as the harness.
    pub fn with_guard(mut self, guard: impl Any + Send + Sync) -> Self {
        self.guard = Some(Box::new(guard));
        self
    }

    pub fn with_trim_hook(mut self, hook: TrimHook) -> Self {
        self.trim_events = Some(hook);
        self
    }

    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    pub fn advance(&self, by_ms: u64) {
        self.clock.advance(by_ms);
    }

    /// Runs the trim hook; panics when the factory did not provide one.
    pub async fn trim_agent_events(&self, tenant_id: &str, session_id: &str) -> StoreResult<()> {
        let hook = self
            .trim_events
            .as_ref()
            .expect("store_test_hook_suite! needs a factory that sets Harness::with_trim_hook");
        hook(tenant_id.to_owned(), session_id.to_owned()).await
    }
}

type HarnessFuture = Pin<Box<dyn Future<Output = Harness> + Send>>;

/// A backend's `async fn(StoreConfigForTest) -> Harness`, boxed so cases are plain functions.
#[derive(Clone)]
pub struct Factory(Arc<dyn Fn(StoreConfigForTest) -> HarnessFuture + Send + Sync>);

impl Factory {
    pub fn new<F, Fut>(make: F) -> Self
    where
        F: Fn(StoreConfigForTest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Harness> + Send + 'static,
    {
        Self(Arc::new(move |config| Box::pin(make(config))))
    }

    /// A store with the default configuration.
    pub async fn start(&self) -> Harness {
        self.start_with(StoreConfigForTest::default()).await
    }

    pub async fn start_with(&self, config: StoreConfigForTest) -> Harness {
        (self.0)(config).await
    }
}

/// Builds a [`TrimHook`] from a store value (usually an `Arc<Backend>`) whose type has
/// `trim_agent_events_for_testing`; the backend's `TestHooks` trait must be in scope.
#[macro_export]
macro_rules! conformance_trim_hook {
    ($store:expr) => {{
        let store = $store;
        let hook: $crate::conformance::TrimHook =
            ::std::sync::Arc::new(move |tenant: String, session: String| {
                let store = store.clone();
                let trim: $crate::conformance::TrimFuture = ::std::boxed::Box::pin(async move {
                    store.trim_agent_events_for_testing(&tenant, &session).await
                });
                trim
            });
        hook
    }};
}
