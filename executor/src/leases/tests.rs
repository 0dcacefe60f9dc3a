//! How a command takes a session's route on a cluster executor: reusing what adoption took,
//! waiting out a handoff or a dead owner's lease, and refusing with a reason that says which.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::{self, ManualClock, SharedClock};
use agent_runtime::protocol::{ErrorCode, ProtocolError};
use agent_runtime_store::Operation;
use agent_runtime_store::faulty::FaultyStore;
use agent_runtime_store::model::{ClaimSession, EnqueueOptions, RegisterWorker};
use agent_runtime_store::options::StoreOptions;
use agent_runtime_store::{MemoryStore, Store};

use super::{SessionLeases, WorkerLeases};
use crate::config::SessionCaps;

const TENANT: &str = "tenant-a";
const HOUR_MS: u64 = 3_600_000;

async fn register(store: &Arc<dyn Store>, worker_id: &str, capacity: u32) {
    store
        .register_worker(RegisterWorker {
            worker_id: worker_id.to_owned(),
            capacity,
            ttl_ms: HOUR_MS,
            metadata: Default::default(),
        })
        .await
        .unwrap();
}

fn leases(
    store: &Arc<dyn Store>,
    worker_id: &str,
    ttl: Duration,
    clock: SharedClock,
) -> Arc<WorkerLeases> {
    WorkerLeases::new(
        Arc::clone(store),
        worker_id,
        ttl,
        SessionCaps::uniform(100),
        clock,
    )
    .0
}

/// `worker_id` claims `session_id` directly through the store for `ttl_ms`, as another
/// executor process would.
async fn claimed_by(
    store: &Arc<dyn Store>,
    worker_id: &str,
    session_id: &str,
    ttl_ms: u64,
) -> agent_runtime_store::ExecutionLease {
    store
        .enqueue_session(TENANT, session_id, EnqueueOptions::default())
        .await
        .unwrap();
    store
        .claim_session(ClaimSession {
            owner_id: worker_id.to_owned(),
            lease_id: format!("lease-of-{worker_id}"),
            ttl_ms,
            tenant_id: Some(TENANT.to_owned()),
            session_id: Some(session_id.to_owned()),
            orphans_only: false,
        })
        .await
        .unwrap()
        .expect("the route is free")
        .lease
}

/// The refusal of a command whose session another executor holds: retryable, and says why.
fn assert_held_elsewhere(refused: &ProtocolError) {
    assert_eq!(refused.code, ErrorCode::Overloaded);
    assert!(refused.retryable);
    assert_eq!(
        refused.message,
        "The Session is still held by another executor"
    );
}

fn store_with(clock: SharedClock) -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(StoreOptions::with_clock(clock)))
}

#[tokio::test]
async fn a_session_this_executor_has_just_adopted_is_reused_by_a_command() {
    let store = store_with(clock::system());
    register(&store, "old", 10).await;
    register(&store, "new", 10).await;
    let old = claimed_by(&store, "old", "s1", HOUR_MS).await;
    store.handoff_session(TENANT, &old, None).await.unwrap();

    let new = leases(&store, "new", Duration::from_secs(5), clock::system());
    let adopted = new
        .adopt_next()
        .await
        .unwrap()
        .expect("the orphan is adopted");
    // Before the fix this claimed again, found the route taken (by itself) and answered
    // OVERLOADED "Tenant active Session limit exceeded".
    let taken = new.acquire(TENANT, "s1").await.unwrap().unwrap();
    assert_eq!(taken.lease_id, adopted.lease_id);
    assert_eq!(new.count(), 1);
}

#[tokio::test]
async fn a_command_waits_for_the_previous_owner_to_hand_the_session_off() {
    let store = store_with(clock::system());
    register(&store, "draining", 10).await;
    register(&store, "next", 10).await;
    let old = claimed_by(&store, "draining", "s1", HOUR_MS).await;
    store.drain_worker("draining").await.unwrap();
    let next = leases(&store, "next", Duration::from_secs(5), clock::system());

    let waiting = tokio::spawn({
        let next = Arc::clone(&next);
        async move { next.acquire(TENANT, "s1").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the session is still held elsewhere"
    );
    store.handoff_session(TENANT, &old, None).await.unwrap();

    let taken = waiting.await.unwrap().unwrap().unwrap();
    assert_eq!(taken.owner_id, "next");
    assert!(taken.fencing_token > old.fencing_token);
}

/// A dead executor still looks live until its registration runs out (it has the lease TTL, as
/// its session leases): a command is refused at once meanwhile (retryable, the client retries),
/// and takes the session as soon as the registration has run out, before the session lease.
#[tokio::test]
async fn a_command_takes_the_session_once_a_dead_owners_registration_has_run_out() {
    let manual = ManualClock::new(1_000_000);
    let store_clock: SharedClock = manual.clone();
    let store = store_with(store_clock.clone());
    store
        .register_worker(RegisterWorker {
            worker_id: "dead".to_owned(),
            capacity: 10,
            ttl_ms: 2_000,
            metadata: Default::default(),
        })
        .await
        .unwrap();
    register(&store, "alive", 10).await;
    let dead = claimed_by(&store, "dead", "s1", 3_000).await;
    let alive = leases(&store, "alive", Duration::from_secs(5), store_clock);

    let refused = alive.acquire(TENANT, "s1").await.unwrap_err();
    assert_held_elsewhere(&refused);
    manual.advance(2_001);

    let taken = alive.acquire(TENANT, "s1").await.unwrap().unwrap();
    assert_eq!(taken.owner_id, "alive");
    assert!(taken.fencing_token > dead.fencing_token);
}

#[tokio::test]
async fn a_session_held_past_the_wait_is_refused_retryably_and_says_why() {
    let store = store_with(clock::system());
    register(&store, "owner", 10).await;
    register(&store, "other", 10).await;
    claimed_by(&store, "owner", "s1", HOUR_MS).await;
    // Draining, so the command waits for its handoff, which never comes.
    store.drain_worker("owner").await.unwrap();
    let other = leases(&store, "other", Duration::from_millis(100), clock::system());

    let refused = other.acquire(TENANT, "s1").await.unwrap_err();
    assert_held_elsewhere(&refused);
    assert_eq!(other.count(), 0);
}

/// A command routed to an executor that no longer holds the session (the gateway's route cache
/// named the previous owner) while another live, active executor holds it is refused at once, after
/// one claim attempt, instead of waiting for a lease that keeps being renewed; the gateway forgets
/// the owner it used and the retry reaches the holder.
#[tokio::test]
async fn a_session_a_live_executor_holds_is_refused_at_once() {
    let store = store_with(clock::system());
    register(&store, "owner", 10).await;
    register(&store, "other", 10).await;
    claimed_by(&store, "owner", "s1", HOUR_MS).await;
    let faulty = Arc::new(FaultyStore::new(Arc::clone(&store)));
    let counted: Arc<dyn Store> = faulty.clone();
    let other = leases(
        &counted,
        "other",
        Duration::from_secs(3_600),
        clock::system(),
    );

    let refused = other.acquire(TENANT, "s1").await.unwrap_err();
    assert_held_elsewhere(&refused);
    assert_eq!(
        faulty.calls(Operation::ClaimSession),
        1,
        "one attempt, no wait"
    );
    assert_eq!(other.count(), 0);
}

#[tokio::test]
async fn a_full_executor_says_so_instead_of_blaming_the_tenant() {
    let store = store_with(clock::system());
    register(&store, "small", 1).await;
    let small = leases(&store, "small", Duration::from_secs(5), clock::system());
    small.acquire(TENANT, "s1").await.unwrap().unwrap();

    let refused = small.acquire(TENANT, "s2").await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::Overloaded);
    assert_eq!(refused.message, "Executor capacity exceeded");
}

/// The tenant's cap counts the sessions held anywhere in the cluster, with one count: the check
/// listed every route of every worker, so loading a session cost as much as the cluster held.
#[tokio::test]
async fn the_tenant_cap_counts_sessions_held_anywhere_without_reading_every_route() {
    let store = store_with(clock::system());
    register(&store, "owner", 10).await;
    register(&store, "other", 10).await;
    claimed_by(&store, "owner", "s1", HOUR_MS).await;
    claimed_by(&store, "owner", "s2", HOUR_MS).await;
    let faulty = Arc::new(FaultyStore::new(Arc::clone(&store)));
    let counted: Arc<dyn Store> = faulty.clone();
    let other = WorkerLeases::new(
        counted,
        "other",
        Duration::from_secs(5),
        SessionCaps::uniform(2),
        clock::system(),
    )
    .0;

    let refused = other.acquire(TENANT, "s3").await.unwrap_err();
    assert_eq!(refused, ProtocolError::session_limit());
    assert!(other.acquire("tenant-b", "s4").await.unwrap().is_some());
    assert_eq!(faulty.calls(Operation::ListWorkerSessions), 0);
    assert_eq!(faulty.calls(Operation::CountHeldSessions), 2);
}

#[tokio::test]
async fn releasing_an_outdated_lease_keeps_the_newer_one_held() {
    let manual = ManualClock::new(1_000_000);
    let store_clock: SharedClock = manual.clone();
    let store = store_with(store_clock.clone());
    register(&store, "w", 10).await;
    let w = leases(&store, "w", Duration::from_secs(2), store_clock);
    let first = w.acquire(TENANT, "s1").await.unwrap().unwrap();
    // The first lease runs out unrenewed; the sweep suspends the route and adoption retakes it.
    manual.advance(3_000);
    w.held().clear();
    let second = w
        .adopt_next()
        .await
        .unwrap()
        .expect("the orphan is adopted");
    assert_ne!(first.lease_id, second.lease_id);

    w.release(TENANT, &first, false).await;
    assert_eq!(
        w.snapshot(),
        vec![(TENANT.to_owned(), "s1".to_owned(), second.fencing_token)]
    );
    let route = store
        .get_session_route(TENANT, "s1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        route.worker_id.as_deref(),
        Some("w"),
        "the stale release changed nothing"
    );
}

/// LEASE-03/04 self-fence: an executor whose renewals cannot reach the store reports the lease
/// lost on its own, by its local deadline, while the store still shows it held (the store was
/// never asked); a lease whose renewals do reach the store is kept past several TTLs.
#[tokio::test]
async fn lease_04_a_lease_the_store_stops_confirming_is_dropped_by_its_local_deadline() {
    use agent_runtime_store::Operation;
    use agent_runtime_store::faulty::FaultyStore;

    let memory = store_with(clock::system());
    let faulty = Arc::new(FaultyStore::new(Arc::clone(&memory)));
    let store: Arc<dyn Store> = faulty.clone();
    register(&store, "cut-off", 10).await;
    let ttl = Duration::from_millis(400);
    let (leases, mut lost) = WorkerLeases::new(
        Arc::clone(&store),
        "cut-off",
        ttl,
        SessionCaps::uniform(100),
        clock::system(),
    );
    let renewal = leases.spawn_renewal();
    let lease = leases.acquire(TENANT, "s1").await.unwrap().unwrap();

    // Renewals reach the store: the lease outlives several TTLs.
    tokio::time::sleep(ttl * 4).await;
    assert!(lost.try_recv().is_err(), "a renewed lease is kept");
    assert_eq!(leases.count(), 1);

    faulty.fail_always(Operation::RenewSessionLeases);
    let key = tokio::time::timeout(Duration::from_secs(10), lost.recv())
        .await
        .expect("the lease is reported lost within 10 s")
        .unwrap();
    assert_eq!(key, (TENANT.to_owned(), "s1".to_owned()));
    assert_eq!(leases.count(), 0);
    // The store was not the one that said so: the route still carries this lease (it expires
    // there at the TTL, later than the local deadline).
    let route = memory
        .get_session_route(TENANT, "s1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(route.lease_id.as_deref(), Some(lease.lease_id.as_str()));
    renewal.abort();
}

/// Each lease is renewed a renewal period (a third of the TTL) after it was last confirmed, not
/// all of an executor's leases at once: a lease claimed later is left alone by a renewal round
/// that renews an older one. Thousands of idle sessions renewed in one burst every period
/// stalled the commands of the others (bench/history.md).
#[tokio::test]
async fn leases_are_renewed_when_due_not_all_at_once() {
    let store = store_with(clock::system());
    register(&store, "paced", 10).await;
    let ttl = Duration::from_millis(900);
    let leases = leases(&store, "paced", ttl, clock::system());
    let older = leases.acquire(TENANT, "older").await.unwrap().unwrap();
    tokio::time::sleep(ttl / 3 + Duration::from_millis(50)).await;
    let newer = leases.acquire(TENANT, "newer").await.unwrap().unwrap();
    // A renewal now would carry a later time than the claim.
    tokio::time::sleep(Duration::from_millis(5)).await;

    leases.renew_due().await;
    let renewed = |session: &str| leases.held_lease(TENANT, session).unwrap().renewed_at_ms;
    assert!(
        renewed("older") > older.renewed_at_ms,
        "the lease confirmed a period ago is renewed"
    );
    assert_eq!(
        renewed("newer"),
        newer.renewed_at_ms,
        "the lease claimed just now is not"
    );
    leases.renew_due().await;
    assert_eq!(
        renewed("newer"),
        newer.renewed_at_ms,
        "nor on the next round"
    );
}
