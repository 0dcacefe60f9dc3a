//! LEASE-07: a process whose wall clock is wrong by a minute neither takes a lease early nor waits a
//! minute too long, because a cluster compares every expiry on the database's clock; and even on
//! a skewed process clock, fencing leaves the old holder unable to write.

use agent_runtime_store::EventReader;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::{Clock, ManualClock, SharedClock, SystemClock};
use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::{
    AcquireLease, DatabaseClock, EventLog, ExecutionLeases, PostgresOptions, PostgresStore,
    RuntimeErrorCode, StoreError,
};

const TENANT: &str = "tenant-a";
const SESSION: &str = "session-1";
const SKEW_MS: u64 = 60_000;

async fn store_with(url: &str, clock: SharedClock) -> PostgresStore {
    let options = PostgresOptions {
        clock,
        ..PostgresOptions::default()
    };
    PostgresStore::connect(url, options).await.expect("connect")
}

/// A store on the database's clock whose own ticker is `skew` away from the real time.
async fn calibrated_store(url: &str, ticker: SharedClock) -> (PostgresStore, Arc<DatabaseClock>) {
    let clock = DatabaseClock::new(ticker);
    let store = store_with(url, clock.clone()).await;
    clock.calibrate(store.pool()).await.expect("calibrate");
    (store, clock)
}

/// A host whose wall clock is `by_ms` off the real time, and runs on.
#[derive(Debug)]
struct SkewedClock {
    by_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms().saturating_add_signed(self.by_ms)
    }
}

fn skewed(by_ms: i64) -> SharedClock {
    Arc::new(SkewedClock { by_ms })
}

fn acquire(owner: &str, ttl_ms: u64) -> AcquireLease {
    AcquireLease {
        lease_id: format!("lease-{owner}"),
        owner_id: owner.to_owned(),
        ttl_ms,
    }
}

fn is_lease_conflict(error: &StoreError) -> bool {
    error.runtime_code() == Some(RuntimeErrorCode::LeaseConflict)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_07_a_clock_a_minute_ahead_does_not_take_a_lease_early() {
    let url = fresh_database_url().await.expect("a test database");
    let (holder, holder_clock) = calibrated_store(&url, Arc::new(SystemClock)).await;
    let ahead_ticker = skewed(SKEW_MS as i64);
    let (ahead, ahead_clock) = calibrated_store(&url, ahead_ticker.clone()).await;
    let gap = holder_clock.now_ms().abs_diff(ahead_clock.now_ms());
    assert!(gap < 1_000, "both read the database's time, {gap} ms apart");

    let lease = holder
        .acquire_execution_lease(TENANT, SESSION, acquire("holder", 10_000))
        .await
        .expect("the holder acquires");
    let refused = ahead
        .acquire_execution_lease(TENANT, SESSION, acquire("ahead", 10_000))
        .await
        .expect_err("the lease has 10 s left on the database's clock");
    assert!(is_lease_conflict(&refused), "{refused:?}");
    holder
        .append_events(
            TENANT,
            SESSION,
            vec![crate::support::text_event(SESSION, "still the holder")],
            Some(&lease.fence()),
        )
        .await
        .expect("the holder keeps writing");

    // The hazard the database clock removes: on its own skewed clock the same process sees the
    // lease as long expired and takes it; fencing still refuses every write of the old holder.
    let raw = store_with(&url, ahead_ticker).await;
    let taken = raw
        .acquire_execution_lease(TENANT, SESSION, acquire("raw", 10_000))
        .await
        .expect("a raw clock a minute ahead takes the lease at once");
    assert!(taken.fencing_token > lease.fencing_token);
    let fenced = holder
        .append_events(
            TENANT,
            SESSION,
            vec![crate::support::text_event(SESSION, "stale")],
            Some(&lease.fence()),
        )
        .await
        .expect_err("the old holder is fenced off");
    assert_eq!(
        fenced.runtime_code(),
        Some(RuntimeErrorCode::LeaseLost),
        "{fenced:?}"
    );
    let events = holder.read_events(TENANT, SESSION, 0, 10).await.unwrap();
    assert_eq!(
        events.events.len(),
        1,
        "only the holder's acknowledged write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_07_a_clock_a_minute_behind_takes_over_when_the_lease_expires() {
    let url = fresh_database_url().await.expect("a test database");
    let (holder, _) = calibrated_store(&url, Arc::new(SystemClock)).await;
    let (behind, _) = calibrated_store(&url, skewed(-(SKEW_MS as i64))).await;
    holder
        .acquire_execution_lease(TENANT, SESSION, acquire("holder", 500))
        .await
        .expect("the holder acquires");
    assert!(
        behind
            .acquire_execution_lease(TENANT, SESSION, acquire("behind", 10_000))
            .await
            .is_err_and(|e| is_lease_conflict(&e))
    );
    // The holder stops renewing; its lease runs out on the database's clock, not a minute later.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let taken = behind
        .acquire_execution_lease(TENANT, SESSION, acquire("behind", 10_000))
        .await
        .expect("the expired lease is taken over");
    assert_eq!(taken.owner_id, "behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_clock_never_goes_backwards_when_a_calibration_moves_it_back() {
    let url = fresh_database_url().await.expect("a test database");
    let ticker = ManualClock::new(SystemClock.now_ms());
    let (store, clock) = calibrated_store(&url, ticker.clone()).await;
    let before = clock.now_ms();
    // The ticker ran 5 s fast since the last reading: the next calibration moves the offset back.
    ticker.advance(5_000);
    let ahead = clock.now_ms();
    assert!(ahead >= before + 5_000);
    let offset = clock.calibrate(store.pool()).await.expect("recalibrate");
    assert!(offset < -4_000, "offset {offset}");
    assert!(
        clock.now_ms() >= ahead,
        "time held still instead of going back"
    );
    ticker.advance(6_000);
    assert!(
        clock.now_ms() > ahead,
        "and moves on once the database catches up"
    );
}
