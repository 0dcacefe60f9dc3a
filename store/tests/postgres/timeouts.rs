//! Timeouts that bound the damage of a stuck or slow transaction on PostgreSQL:
//! - PG-09: a transaction stuck while holding tenant A's session locks makes A's writes fail
//!   quickly with a retry-safe error (`lock_timeout`), while tenant B's writes go on and the pool
//!   is not used up;
//! - PG-07: the store never holds a transaction open while its caller waits (a follower waiting
//!   for events, a lease or a command held for seconds), so a 2 s
//!   `idle_in_transaction_session_timeout` ends no session of the store.

use agent_runtime_store::EventReader;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::{
    AcquireLease, CommandClaim, CommandReceipts, EventLog, ExecutionLeases, PostgresOptions,
    PostgresStore, SessionRecords, StoreError,
};
use sqlx::{Connection, PgConnection};

const A: &str = "tenant-a";
const B: &str = "tenant-b";
const SESSION: &str = "session-1";
/// Hang guard: without a lock timeout, A's writes would wait for as long as the stuck
/// transaction lives.
const GUARD: Duration = Duration::from_secs(30);

fn record(tenant: &str) -> agent_runtime_store::SessionRecord {
    agent_runtime_store::SessionRecord {
        tenant_id: tenant.into(),
        ..crate::support::session(SESSION)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_09_a_stuck_lock_holder_fails_its_tenants_writes_quickly_and_leaves_others_alone() {
    let url = fresh_database_url().await.unwrap();
    let options = PostgresOptions {
        max_connections: 4,
        lock_timeout: Duration::from_millis(300),
        ..PostgresOptions::default()
    };
    let store = Arc::new(PostgresStore::connect(&url, options).await.unwrap());
    for tenant in [A, B] {
        store.put_session(&record(tenant)).await.unwrap();
        store
            .append_event(tenant, crate::support::text_event(SESSION, "first"), None)
            .await
            .unwrap();
    }

    // The stuck transaction, on its own connection: it holds A's session row and stream head.
    let mut stuck = PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut stuck).await.unwrap();
    sqlx::query("SELECT 1 FROM sessions WHERE tenant_id = $1 FOR UPDATE")
        .bind(A)
        .execute(&mut stuck)
        .await
        .unwrap();
    sqlx::query("SELECT 1 FROM stream_heads WHERE tenant_id = $1 FOR UPDATE")
        .bind(A)
        .execute(&mut stuck)
        .await
        .unwrap();

    // Twice as many of A's writes as there are pooled connections, and B's writes alongside.
    let a_writes: Vec<_> = (0..8)
        .map(|n| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                if n % 2 == 0 {
                    store
                        .append_event(A, crate::support::text_event(SESSION, "blocked"), None)
                        .await
                        .map(|_| ())
                } else {
                    store.put_session(&record(A)).await
                }
            })
        })
        .collect();
    let b_writes: Vec<_> = (0..20)
        .map(|n| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .append_event(
                        B,
                        crate::support::text_event(SESSION, &format!("b {n}")),
                        None,
                    )
                    .await
            })
        })
        .collect();
    for write in a_writes {
        let outcome = tokio::time::timeout(GUARD, write)
            .await
            .expect("A's write fails instead of waiting for the stuck transaction")
            .unwrap();
        match outcome {
            Err(StoreError::Backend {
                message,
                retry_safe: true,
            }) => assert!(message.contains("lock wait timed out"), "{message}"),
            other => panic!("expected a retry-safe lock timeout, got {other:?}"),
        }
    }
    for write in b_writes {
        tokio::time::timeout(GUARD, write)
            .await
            .expect("B's write is not held up")
            .unwrap()
            .expect("B's writes go on");
    }
    let b_events = store.read_events(B, SESSION, 0, 100).await.unwrap();
    assert_eq!(b_events.events.len(), 21);
    let a_events = store.read_events(A, SESSION, 0, 100).await.unwrap();
    assert_eq!(a_events.events.len(), 1, "none of A's failed writes landed");

    // The pool is not used up: no connection of the store was left inside a transaction, and a
    // read and a write of B still get one at once.
    let in_transaction: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND state LIKE 'idle in transaction%' AND pid <> $1",
    )
    .bind(stuck_pid(&mut stuck).await)
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(in_transaction, 0);
    assert!(store.pool().size() <= 4);
    store
        .append_event(B, crate::support::text_event(SESSION, "after"), None)
        .await
        .unwrap();

    // Once the stuck transaction ends, A's retry works.
    sqlx::query("ROLLBACK").execute(&mut stuck).await.unwrap();
    store
        .append_event(A, crate::support::text_event(SESSION, "retried"), None)
        .await
        .expect("a retry after the lock is free works");
}

async fn stuck_pid(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
        .unwrap()
}

/// Sessions of this database that PostgreSQL ended: by a fatal error (an
/// `idle_in_transaction_session_timeout` is one) or by an operator.
async fn sessions_ended(conn: &mut PgConnection) -> i64 {
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT sessions_fatal + sessions_killed FROM pg_stat_database \
         WHERE datname = current_database()",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_07_slow_callers_never_leave_a_store_transaction_open_past_a_2s_idle_timeout() {
    let url = fresh_database_url().await.unwrap();
    let database = url.rsplit('/').next().unwrap().to_owned();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    sqlx::query(&format!(
        "ALTER DATABASE \"{database}\" SET idle_in_transaction_session_timeout = '2s'"
    ))
    .execute(&mut admin)
    .await
    .unwrap();

    // The instrument works: a transaction left idle for 3 s is ended, and counted.
    let baseline = sessions_ended(&mut admin).await;
    let mut idle = PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut idle).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(sqlx::query("SELECT 1").execute(&mut idle).await.is_err());
    let counted = tokio::time::timeout(GUARD, async {
        loop {
            let now = sessions_ended(&mut admin).await;
            if now > baseline {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the ended session is counted");

    // The store, with the same 2 s limit, and callers that take 5 s between steps.
    let options = PostgresOptions {
        stalled_transaction_timeout: Duration::from_secs(2),
        ..PostgresOptions::default()
    };
    let store = Arc::new(PostgresStore::connect(&url, options).await.unwrap());
    store.put_session(&record(A)).await.unwrap();
    let follower = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            // A follower (SSE) waiting 5 s for the next event (a wake-up may be spurious: it
            // reads again, as the SSE loop does).
            loop {
                store.wait_for_events(A, SESSION, 0).await?;
                let page = store.read_events(A, SESSION, 0, 10).await?;
                if !page.events.is_empty() {
                    return Ok::<_, StoreError>(page);
                }
            }
        })
    };
    let lease = store
        .acquire_execution_lease(
            A,
            SESSION,
            AcquireLease {
                lease_id: "lease".into(),
                owner_id: "executor".into(),
                ttl_ms: 30_000,
            },
        )
        .await
        .unwrap();
    let CommandClaim::Claimed { lease_id } = store
        .claim_command(A, "command", "fp", 60_000)
        .await
        .unwrap()
    else {
        panic!("claimed");
    };
    // The model call and the tools take 5 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    store
        .seal_command(A, "command", &lease_id, &sealing())
        .await
        .unwrap();
    let lease = store
        .renew_execution_lease(A, &lease, 30_000)
        .await
        .unwrap();
    store
        .append_events(
            A,
            SESSION,
            vec![crate::support::text_event(SESSION, "answer")],
            Some(&lease.fence()),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    store
        .complete_command(A, "command", &lease_id, &serde_json::json!({"ok": true}))
        .await
        .unwrap();
    store.release_execution_lease(A, &lease).await.unwrap();
    let page = tokio::time::timeout(GUARD, follower)
        .await
        .expect("the follower woke up")
        .unwrap()
        .unwrap();
    assert_eq!(page.events.len(), 1);

    // Nothing of the store was ended by the timeout.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sessions_ended(&mut admin).await, counted);
}

/// What these receipts are sealed as acting on (it does not matter here).
fn sealing() -> agent_runtime_store::CommandTarget {
    agent_runtime_store::CommandTarget::new("session.close", None)
}
