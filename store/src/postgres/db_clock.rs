//! The cluster's one time base: the database's clock (LEASE-07).
//!
//! Lease expiries, claim TTLs and worker heartbeats are compared with "now". If every process read
//! its own wall clock, an executor whose clock ran 60 s ahead would take sessions over 60 s before
//! their leases ran out, and one 60 s behind would wait a minute longer than the TTL. Fencing keeps
//! either case safe (a stale holder's writes are refused), but the takeover timing would be wrong.
//!
//! A [`DatabaseClock`] is PostgreSQL's `clock_timestamp()` as seen from this process: calibrated at
//! start and every [`RECALIBRATE_EVERY`], advanced in between by a local ticker that does not jump
//! (the monotonic clock in production). Every process of a cluster then compares times on the same
//! base, to within half a round trip plus the ticker's drift between calibrations.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use agent_runtime::clock::{Clock, SharedClock};
use sqlx::PgPool;
use tokio::task::JoinHandle;

use super::db_error;
use crate::error::StoreResult;

/// How often a [`DatabaseClock`] re-reads the database's clock to correct the ticker's drift.
pub const RECALIBRATE_EVERY: Duration = Duration::from_secs(30);

/// The database's clock, read through a local ticker. Until [`DatabaseClock::calibrate`] succeeds it
/// is the ticker itself.
#[derive(Debug)]
pub struct DatabaseClock {
    ticker: SharedClock,
    /// Database time minus ticker time, in ms, at the last calibration.
    offset_ms: AtomicI64,
    /// The latest time handed out: a calibration that moves the offset back must not make time go
    /// backwards (a lease that was expired would come back to life).
    last_ms: AtomicU64,
}

impl DatabaseClock {
    pub fn new(ticker: SharedClock) -> Arc<Self> {
        Arc::new(Self {
            ticker,
            offset_ms: AtomicI64::new(0),
            last_ms: AtomicU64::new(0),
        })
    }

    /// Reads the database's clock once and sets the offset from it, assuming the reading was taken
    /// half-way through the round trip. Returns the new offset (database minus ticker, ms).
    pub async fn calibrate(&self, pool: &PgPool) -> StoreResult<i64> {
        let before = self.ticker.now_ms() as i64;
        let database_ms: i64 =
            sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8")
                .fetch_one(pool)
                .await
                .map_err(db_error)?;
        let after = self.ticker.now_ms() as i64;
        let offset = database_ms - (before + (after - before) / 2);
        self.offset_ms.store(offset, Ordering::SeqCst);
        Ok(offset)
    }

    /// Recalibrates every `every` until the clock is dropped or the pool is closed. A failed
    /// reading keeps the previous offset (the ticker alone drifts by milliseconds per hour).
    pub fn keep_calibrated(self: &Arc<Self>, pool: PgPool, every: Duration) -> JoinHandle<()> {
        let clock: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(clock) = clock.upgrade() else { return };
                if pool.is_closed() {
                    return;
                }
                if let Err(error) = clock.calibrate(&pool).await {
                    tracing::warn!(%error, "reading the database clock failed; keeping the last offset");
                }
            }
        })
    }
}

impl Clock for DatabaseClock {
    fn now_ms(&self) -> u64 {
        let reading = self.ticker.now_ms() as i64 + self.offset_ms.load(Ordering::SeqCst);
        let reading = reading.max(0) as u64;
        self.last_ms
            .fetch_max(reading, Ordering::SeqCst)
            .max(reading)
    }
}
