//! Time as a dependency: everything with a TTL, lease, window or timeout reads the time through a
//! [`Clock`], so tests move time instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> u64;
}

/// Shared handle to a clock.
pub type SharedClock = Arc<dyn Clock>;

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    pub fn new(now_ms: u64) -> Arc<Self> {
        Arc::new(Self {
            now: AtomicU64::new(now_ms),
        })
    }

    pub fn set(&self, now_ms: u64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, by_ms: u64) {
        self.now.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// The system clock as a shared handle.
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

/// Wall-clock time read once at creation, then advanced by the monotonic clock, so it never jumps
/// when someone sets the system clock. The ticker of the store's calibrated database clock.
#[derive(Debug)]
pub struct MonotonicClock {
    origin_ms: u64,
    origin: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        Self {
            origin_ms: SystemClock.now_ms(),
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ms(&self) -> u64 {
        self.origin_ms + self.origin.elapsed().as_millis() as u64
    }
}

/// The monotonic clock as a shared handle.
pub fn monotonic() -> SharedClock {
    Arc::new(MonotonicClock::new())
}
