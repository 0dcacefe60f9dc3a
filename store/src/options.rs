//! Options shared by the memory and JSONL backends.

use agent_runtime::clock::{self, SharedClock};

use crate::model::DEFAULT_MAX_DURABLE_EVENTS;

/// Default number of agent events retained per session (decision S4).
pub const DEFAULT_MAX_EVENTS_PER_SESSION: u64 = 10_000;

/// Construction options of the memory and JSONL stores.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Source of "now" for every TTL, lease expiry and timestamp the store stamps. Default: the
    /// system clock.
    pub clock: SharedClock,
    /// Agent events retained per session; older ones are trimmed from the front after each append.
    /// Idempotency keys are never trimmed. Default 10 000 (decision S4); values below 1 count as 1.
    pub max_events_per_session: u64,
    /// Quota of durable journal events per session (no retention). Default 100 000.
    pub max_durable_events_per_session: u64,
    /// JSONL only: `fdatasync` the journal after every write, for power-loss durability
    /// (decision S8). Without it an acknowledged write survives a process crash, not a power cut.
    /// Default false.
    pub fsync: bool,
    /// JSONL only: the journal is rewritten as a snapshot of the state (trimmed events and
    /// replaced or deleted records dropped) once it is past this many bytes, at least 3/5 of it
    /// is dead, and it has taken as many bytes since the last rewrite as that rewrite's snapshot
    /// (docs/storage.md §9.1), so a long-running process's disk use stays proportional to what it
    /// retains (catalogue RES-07), not to everything it ever wrote. Default 64 MiB.
    pub jsonl_compaction_min_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            clock: clock::system(),
            max_events_per_session: DEFAULT_MAX_EVENTS_PER_SESSION,
            max_durable_events_per_session: DEFAULT_MAX_DURABLE_EVENTS,
            fsync: false,
            jsonl_compaction_min_bytes: DEFAULT_JSONL_COMPACTION_MIN_BYTES,
        }
    }
}

/// See [`StoreOptions::jsonl_compaction_min_bytes`].
pub const DEFAULT_JSONL_COMPACTION_MIN_BYTES: u64 = 64 * 1024 * 1024;

impl StoreOptions {
    /// Default options reading time from `clock`.
    pub fn with_clock(clock: SharedClock) -> Self {
        Self {
            clock,
            ..Self::default()
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    pub(crate) fn retention(&self) -> u64 {
        self.max_events_per_session.max(1)
    }
}
