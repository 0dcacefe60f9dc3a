//! Execution leases on a real PostgreSQL: fencing tokens survive a database restart and a store
//! restart (LEASE-05), two executors racing for one session get exactly one grant per token
//! (LEASE-10), and a grant whose reply arrives after its TTL is not honoured (LEASE-06).

use agent_runtime_store::EventReader;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runtime::clock::{ManualClock, MonotonicClock, SharedClock};
use agent_runtime_store::testing::fault_proxy::FaultProxy;
use agent_runtime_store::testing::postgres::{PgCluster, fresh_database_url};
use agent_runtime_store::{
    AcquireLease, ClaimSession, DatabaseClock, EnqueueOptions, EventLog, ExecutionLease,
    ExecutionLeases, NewEvent, PostgresOptions, PostgresStore, RegisterWorker, RouteState,
    RouteTransition, RuntimeErrorCode, SessionRoutes, StoreError, WorkerRegistry,
};

const TENANT: &str = "tenant";
const SESSION: &str = "session-1";

async fn store_on(url: &str, clock: SharedClock) -> PostgresStore {
    let options = PostgresOptions {
        clock,
        ..PostgresOptions::default()
    };
    PostgresStore::connect(url, options).await.expect("connect")
}

fn acquire(lease_id: &str, owner: &str, ttl_ms: u64) -> AcquireLease {
    AcquireLease {
        lease_id: lease_id.into(),
        owner_id: owner.into(),
        ttl_ms,
    }
}

/// The token stored in the session's lease row: where grants come from.
async fn row_token(store: &PostgresStore) -> i64 {
    sqlx::query_scalar(
        "SELECT fencing_token FROM execution_leases WHERE tenant_id = $1 AND session_id = $2",
    )
    .bind(TENANT)
    .bind(SESSION)
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Stops and starts the cluster (off the async runtime: pg_ctl blocks).
async fn restart(cluster: PgCluster) -> PgCluster {
    tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        cluster.stop().expect("stop PostgreSQL");
        cluster.restart().expect("start PostgreSQL again");
        cluster
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_05_fencing_tokens_keep_growing_across_database_and_store_restarts() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .unwrap()
        .expect("a dedicated cluster");
    let url = cluster.create_database().await.unwrap();
    let clock = ManualClock::new(1_000_000);
    let store = store_on(&url, clock.clone()).await;
    let mut tokens = Vec::new();

    // Released, then granted again.
    let first = store
        .acquire_execution_lease(TENANT, SESSION, acquire("l1", "executor-a", 10_000))
        .await
        .unwrap();
    tokens.push(first.fencing_token);
    store.release_execution_lease(TENANT, &first).await.unwrap();
    let second = store
        .acquire_execution_lease(TENANT, SESSION, acquire("l2", "executor-b", 10_000))
        .await
        .unwrap();
    tokens.push(second.fencing_token);

    // PostgreSQL restarts with the second lease held; it runs out, and another executor (a new
    // store: nothing carried over in memory) takes the session.
    let cluster = restart(cluster).await;
    drop(store);
    clock.advance(10_001);
    let store = store_on(&url, clock.clone()).await;
    let third = store
        .acquire_execution_lease(TENANT, SESSION, acquire("l3", "executor-c", 10_000))
        .await
        .unwrap();
    tokens.push(third.fencing_token);
    assert_eq!(
        row_token(&store).await,
        i64::try_from(third.fencing_token).unwrap()
    );
    // The old holder's fence is refused on the restarted database.
    let stale = store
        .append_events(TENANT, SESSION, vec![event()], Some(&second.fence()))
        .await
        .unwrap_err();
    assert_eq!(stale.runtime_code(), Some(RuntimeErrorCode::LeaseLost));

    // Once more, released before the restart, and a route claim (the executors' path) after it.
    store.release_execution_lease(TENANT, &third).await.unwrap();
    let cluster = restart(cluster).await;
    drop(store);
    let store = store_on(&url, clock.clone()).await;
    store
        .register_worker(RegisterWorker {
            worker_id: "executor-d".into(),
            capacity: 4,
            ttl_ms: 600_000,
            metadata: Default::default(),
        })
        .await
        .unwrap();
    store
        .enqueue_session(TENANT, SESSION, EnqueueOptions::default())
        .await
        .unwrap();
    let claim = store
        .claim_session(ClaimSession {
            owner_id: "executor-d".into(),
            lease_id: "l4".into(),
            ttl_ms: 10_000,
            tenant_id: Some(TENANT.into()),
            session_id: Some(SESSION.into()),
            orphans_only: false,
        })
        .await
        .unwrap()
        .expect("the released session is claimed");
    tokens.push(claim.lease.fencing_token);

    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "every grant's token is greater than every earlier one: {tokens:?}"
    );
    drop(store);
    drop(cluster);
}

fn event() -> NewEvent {
    NewEvent {
        session_id: SESSION.into(),
        request_id: None,
        occurred_at: String::new(),
        event_type: agent_runtime::protocol::EventType::SessionStream,
        data: Default::default(),
    }
}

/// Two stores on one database, like two executors, race to claim the same queued session.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_10_two_executors_racing_for_one_session_get_exactly_one_grant_per_token() {
    const REPETITIONS: u64 = 1_000;
    let url = fresh_database_url().await.unwrap();
    let executors = [
        Arc::new(store_on(&url, agent_runtime::clock::system()).await),
        Arc::new(store_on(&url, agent_runtime::clock::system()).await),
    ];
    for (n, store) in executors.iter().enumerate() {
        store
            .register_worker(RegisterWorker {
                worker_id: format!("executor-{n}"),
                capacity: 1,
                ttl_ms: 600_000,
                metadata: Default::default(),
            })
            .await
            .unwrap();
    }
    let started = Instant::now();
    let mut wins = [0_u64; 2];
    let mut last_token = 0;
    for round in 0..REPETITIONS {
        executors[0]
            .enqueue_session(TENANT, SESSION, EnqueueOptions::default())
            .await
            .unwrap();
        // Both start at the same moment, spawned in alternating order.
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut claims: Vec<_> = order
            .iter()
            .map(|&n| {
                let store = Arc::clone(&executors[n]);
                let barrier = Arc::clone(&barrier);
                let claim = tokio::spawn(async move {
                    barrier.wait().await;
                    store
                        .claim_session(ClaimSession {
                            owner_id: format!("executor-{n}"),
                            lease_id: format!("lease-{round}-{n}"),
                            ttl_ms: 60_000,
                            tenant_id: Some(TENANT.into()),
                            session_id: Some(SESSION.into()),
                            orphans_only: false,
                        })
                        .await
                });
                (n, claim)
            })
            .collect();
        claims.sort_by_key(|(n, _)| *n);
        let mut outcomes = Vec::new();
        for (_, claim) in claims {
            outcomes.push(claim.await.unwrap());
        }
        let granted: Vec<(usize, &ExecutionLease)> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(n, outcome)| match outcome {
                Ok(Some(claim)) => Some((n, &claim.lease)),
                // The loser's clean refusal: nothing to claim.
                Ok(None) => None,
                Err(error) => panic!("round {round}: a claim failed instead of refusing: {error}"),
            })
            .collect();
        assert_eq!(
            granted.len(),
            1,
            "round {round}: exactly one grant: {outcomes:?}"
        );
        let (winner, lease) = granted[0];
        wins[winner] += 1;
        assert!(
            lease.fencing_token > last_token,
            "round {round}: token {} after {last_token}",
            lease.fencing_token
        );
        last_token = lease.fencing_token;
        // The loser cannot take the lease directly either, while it is held.
        let loser = 1 - winner;
        let refused = executors[loser]
            .acquire_execution_lease(
                TENANT,
                SESSION,
                acquire(
                    &format!("direct-{round}"),
                    &format!("executor-{loser}"),
                    60_000,
                ),
            )
            .await
            .unwrap_err();
        assert_eq!(
            refused.runtime_code(),
            Some(RuntimeErrorCode::LeaseConflict)
        );
        executors[winner]
            .release_execution_lease(TENANT, lease)
            .await
            .unwrap();
    }
    eprintln!(
        "LEASE-10: {REPETITIONS} races in {:?}; wins per executor {wins:?}",
        started.elapsed()
    );
    assert_eq!(wins.iter().sum::<u64>(), REPETITIONS);
    assert!(
        wins.iter().all(|&n| n > 0),
        "both executors won some races (they really raced): {wins:?}"
    );
}

/// The executor's claim goes through a proxy that delays every message by more than the TTL it
/// asks for, so the grant arrives after it ran out (on the database's clock). The executor's
/// first step with it — the fenced move of its route to running — and any fenced write are
/// refused; nothing is written under the late lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_06_a_grant_that_arrives_after_its_ttl_is_not_honoured() {
    let url = fresh_database_url().await.unwrap();
    let proxy = FaultProxy::start(&url).await.unwrap();
    let clock = DatabaseClock::new(Arc::new(MonotonicClock::new()));
    let store = store_on(&proxy.proxied_url(&url), clock.clone()).await;
    clock.calibrate(store.pool()).await.unwrap();
    store
        .register_worker(RegisterWorker {
            worker_id: "executor".into(),
            capacity: 4,
            ttl_ms: 600_000,
            metadata: Default::default(),
        })
        .await
        .unwrap();
    let claim = |lease_id: &str, ttl_ms: u64| ClaimSession {
        owner_id: "executor".into(),
        lease_id: lease_id.into(),
        ttl_ms,
        tenant_id: Some(TENANT.into()),
        session_id: Some(SESSION.into()),
        orphans_only: false,
    };
    let running = RouteTransition {
        expected_state: Some(RouteState::Provisioning),
        state: RouteState::Running,
        metadata: None,
        failure: None,
    };
    store
        .enqueue_session(TENANT, SESSION, EnqueueOptions::default())
        .await
        .unwrap();

    // Each message of the claim's transaction waits 250 ms; the lease lasts 200 ms.
    let sent = clock_now(&store).await;
    proxy.set_latency(Duration::from_millis(250));
    let late = store
        .claim_session(claim("late", 200))
        .await
        .unwrap()
        .expect("the grant is made, but its reply is late");
    proxy.set_latency(Duration::ZERO);
    let arrived = clock_now(&store).await;
    assert!(
        arrived > late.lease.expires_at_ms,
        "the setup delays the reply past the expiry ({sent} -> {arrived}, expires {})",
        late.lease.expires_at_ms
    );
    let refused = store
        .transition_session(TENANT, &late.lease, running.clone())
        .await
        .unwrap_err();
    assert!(is_lease_refusal(&refused), "{refused:?}");
    let refused = store
        .append_events(TENANT, SESSION, vec![event()], Some(&late.lease.fence()))
        .await
        .unwrap_err();
    assert!(is_lease_refusal(&refused), "{refused:?}");
    let refused = store
        .assert_execution_lease(TENANT, &late.lease)
        .await
        .unwrap_err();
    assert!(is_lease_refusal(&refused), "{refused:?}");
    let page = store.read_events(TENANT, SESSION, 0, 10).await;
    assert!(
        page.is_ok_and(|page| page.events.is_empty()),
        "nothing was written under the late lease"
    );

    // The same steps with a reply in time: accepted (the refusal above was the lateness).
    let timely = store
        .claim_session(claim("timely", 30_000))
        .await
        .unwrap()
        .expect("claimed");
    assert!(timely.lease.fencing_token > late.lease.fencing_token);
    store
        .transition_session(TENANT, &timely.lease, running)
        .await
        .expect("a grant in time is honoured");
    store
        .append_events(TENANT, SESSION, vec![event()], Some(&timely.lease.fence()))
        .await
        .expect("and writes under it land");
}

/// The database's clock in epoch ms, read directly.
async fn clock_now(store: &PostgresStore) -> u64 {
    let ms: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8")
        .fetch_one(store.pool())
        .await
        .unwrap();
    u64::try_from(ms).unwrap()
}

fn is_lease_refusal(error: &StoreError) -> bool {
    matches!(
        error.runtime_code(),
        Some(RuntimeErrorCode::LeaseLost | RuntimeErrorCode::LeaseInvalid)
    )
}
