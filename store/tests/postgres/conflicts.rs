//! IDEM-14 and PG-03: a write transaction that PostgreSQL aborts as a deadlock victim (`40P01`)
//! or for a serialization failure (`40001`) is re-run whole a bounded number of times, then fails
//! with a retry-safe error; nothing of an aborted attempt remains, and a later retry works.
//!
//! The faults are injected with test-created triggers that raise the SQLSTATE for the first N
//! statements on a table. The count is a sequence, because `nextval` is not rolled back with the
//! aborted transaction. The real deadlock is made by a second connection that waits for the
//! store while the store waits for it.

use agent_runtime_store::EventReader;
use std::time::Duration;

use agent_runtime_store::postgres::CONFLICT_ATTEMPTS;
use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::{
    CommandClaim, CommandReceipts, EventLog, PostgresOptions, PostgresStore, StoreError,
};
use sqlx::{Connection, PgConnection};

const TENANT: &str = "tenant";
const SESSION: &str = "session-1";
/// Hang guard of every step that waits on the database.
const GUARD: Duration = Duration::from_secs(30);

async fn connect() -> (String, PostgresStore) {
    let url = fresh_database_url().await.expect("a test database");
    let store = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .expect("connect");
    (url, store)
}

/// Makes the first `faults` statements of kind `operation` (INSERT, UPDATE) on `table` fail with
/// `sqlstate`; returns nothing, the count lives in the sequence `<table>_faults`.
async fn inject(conn: &mut PgConnection, table: &str, operation: &str, sqlstate: &str) {
    let statements = [
        format!("CREATE SEQUENCE IF NOT EXISTS {table}_faults"),
        format!("CREATE TABLE IF NOT EXISTS {table}_fault_limit (faults BIGINT NOT NULL)"),
        format!(
            "CREATE OR REPLACE FUNCTION {table}_fault() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
               IF nextval('{table}_faults') <= (SELECT coalesce(max(faults), 0) FROM {table}_fault_limit) THEN \
                 RAISE EXCEPTION 'injected fault' USING ERRCODE = '{sqlstate}'; \
               END IF; \
               RETURN NULL; \
             END $$"
        ),
        format!(
            "CREATE OR REPLACE TRIGGER {table}_fault_{operation} BEFORE {operation} ON {table} \
             FOR EACH STATEMENT EXECUTE FUNCTION {table}_fault()"
        ),
    ];
    for statement in statements {
        sqlx::query(&statement).execute(&mut *conn).await.unwrap();
    }
}

/// The next `faults` statements on `table` fail (the counter starts again).
async fn arm(conn: &mut PgConnection, table: &str, faults: u32) {
    sqlx::query(&format!("DELETE FROM {table}_fault_limit"))
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {table}_fault_limit VALUES ({faults})"
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query(&format!("ALTER SEQUENCE {table}_faults RESTART WITH 1"))
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// How many statements the trigger saw since `arm` (each one an attempt of the store).
async fn attempts(conn: &mut PgConnection, table: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {table}_faults"
    ))
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

async fn count(conn: &mut PgConnection, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&mut *conn).await.unwrap()
}

fn assert_retry_safe_conflict(error: StoreError) {
    match error {
        StoreError::Backend {
            message,
            retry_safe: true,
        }
        | StoreError::Conflict(message) => {
            assert!(message.contains("deadlock or serialization"), "{message}")
        }
        other => panic!("expected a retry-safe backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn idem_14_a_claim_aborted_by_deadlocks_or_serialization_failures_is_retried_then_fails_retryably()
 {
    let (url, store) = connect().await;
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let attempts_bound = i64::from(CONFLICT_ATTEMPTS);
    for sqlstate in ["40P01", "40001"] {
        inject(&mut admin, "commands", "INSERT", sqlstate).await;

        // Fewer faults than the bound: the claim succeeds, once, after every attempt ran.
        let command = format!("command-ok-{sqlstate}");
        arm(&mut admin, "commands", CONFLICT_ATTEMPTS - 1).await;
        let claim = store
            .claim_command(TENANT, &command, "fp", 60_000)
            .await
            .expect("retried internally until it succeeded");
        assert!(matches!(claim, CommandClaim::Claimed { .. }), "{claim:?}");
        assert_eq!(attempts(&mut admin, "commands").await, attempts_bound);
        let rows = format!("SELECT count(*) FROM commands WHERE command_id = '{command}'");
        assert_eq!(count(&mut admin, &rows).await, 1);

        // More faults than the bound: a retry-safe error, and nothing was written.
        let command = format!("command-storm-{sqlstate}");
        arm(&mut admin, "commands", CONFLICT_ATTEMPTS + 2).await;
        let error = store
            .claim_command(TENANT, &command, "fp", 60_000)
            .await
            .expect_err("gives up after the bound");
        assert_retry_safe_conflict(error);
        assert_eq!(
            attempts(&mut admin, "commands").await,
            attempts_bound,
            "exactly the bounded number of attempts"
        );
        let rows = format!("SELECT count(*) FROM commands WHERE command_id = '{command}'");
        assert_eq!(count(&mut admin, &rows).await, 0, "no partial record");

        // The client's retry (the remaining faults run out during it) claims the command.
        let claim = store
            .claim_command(TENANT, &command, "fp", 60_000)
            .await
            .expect("a later retry works");
        let CommandClaim::Claimed { lease_id } = claim else {
            panic!("expected a claim, got {claim:?}");
        };
        assert_eq!(count(&mut admin, &rows).await, 1);

        // Seal and complete (UPDATEs) are retried the same way.
        inject(&mut admin, "commands", "UPDATE", sqlstate).await;
        arm(&mut admin, "commands", CONFLICT_ATTEMPTS - 1).await;
        store
            .seal_command(TENANT, &command, &lease_id, &sealing())
            .await
            .unwrap();
        arm(&mut admin, "commands", CONFLICT_ATTEMPTS).await;
        let error = store
            .complete_command(
                TENANT,
                &command,
                &lease_id,
                &serde_json::json!({"ok": true}),
            )
            .await
            .expect_err("gives up after the bound");
        assert_retry_safe_conflict(error);
        store
            .complete_command(
                TENANT,
                &command,
                &lease_id,
                &serde_json::json!({"ok": true}),
            )
            .await
            .expect("a later retry works");
        let claim = store
            .claim_command(TENANT, &command, "fp", 60_000)
            .await
            .unwrap();
        assert!(
            matches!(claim, CommandClaim::Completed { .. }),
            "the completed result is stored once: {claim:?}"
        );
        sqlx::query("DROP TRIGGER commands_fault_UPDATE ON commands")
            .execute(&mut admin)
            .await
            .unwrap();
        arm(&mut admin, "commands", 0).await;
    }
}

#[tokio::test]
async fn pg_03_an_append_aborted_by_deadlocks_is_retried_and_a_storm_fails_retryably() {
    let (url, store) = connect().await;
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let event = |text: &str| crate::support::text_event(SESSION, text);
    let sequences = "SELECT count(*) FROM agent_events WHERE session_id = 'session-1'";
    for sqlstate in ["40P01", "40001"] {
        inject(&mut admin, "agent_events", "INSERT", sqlstate).await;
        arm(&mut admin, "agent_events", CONFLICT_ATTEMPTS - 1).await;
        let before = count(&mut admin, sequences).await;
        let stored = store
            .append_event(
                TENANT,
                event("after faults"),
                Some(&format!("key-{sqlstate}")),
            )
            .await
            .expect("retried internally until it succeeded");
        assert_eq!(
            attempts(&mut admin, "agent_events").await,
            i64::from(CONFLICT_ATTEMPTS)
        );
        assert_eq!(
            count(&mut admin, sequences).await,
            before + 1,
            "stored once"
        );
        assert_eq!(stored.sequence, u64::try_from(before).unwrap() + 1);

        arm(&mut admin, "agent_events", CONFLICT_ATTEMPTS).await;
        let error = store
            .append_event(TENANT, event("storm"), Some(&format!("storm-{sqlstate}")))
            .await
            .expect_err("gives up after the bound");
        assert_retry_safe_conflict(error);
        assert_eq!(
            count(&mut admin, sequences).await,
            before + 1,
            "nothing partial"
        );
        let keys =
            format!("SELECT count(*) FROM event_keys WHERE idempotency_key = 'storm-{sqlstate}'");
        assert_eq!(count(&mut admin, &keys).await, 0, "no orphaned key");
        let head = format!(
            "SELECT next_sequence FROM stream_heads WHERE session_id = '{SESSION}' AND stream_name = 'agent'"
        );
        assert_eq!(
            count(&mut admin, &head).await,
            before + 2,
            "the head did not move"
        );

        let retried = store
            .append_event(TENANT, event("storm"), Some(&format!("storm-{sqlstate}")))
            .await
            .expect("a later retry works");
        assert_eq!(retried.sequence, stored.sequence + 1, "no gap");
    }
    let page = store.read_events(TENANT, SESSION, 0, 100).await.unwrap();
    let numbers: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(numbers, vec![1, 2, 3, 4]);
}

/// A real deadlock on our tables: another transaction holds a conflicting uncommitted event row
/// and then asks for the stream head the store's append holds. PostgreSQL aborts the store's
/// transaction (this test's connection waits longer before checking for deadlocks), the store
/// runs it again, and once the other transaction rolls back the append lands, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_03_a_real_deadlock_with_another_transaction_is_retried_and_the_append_lands_once() {
    let url = fresh_database_url().await.expect("a test database");
    // The store's sessions look for deadlocks after 2 s, this test's other transaction after
    // 60 s: whatever the machine's load, the cycle exists when the store's check runs, and the
    // store's transaction is the one PostgreSQL aborts.
    let database = url.rsplit('/').next().unwrap().to_owned();
    let mut setup = PgConnection::connect(&url).await.unwrap();
    sqlx::query(&format!(
        "ALTER DATABASE \"{database}\" SET deadlock_timeout = '2s'"
    ))
    .execute(&mut setup)
    .await
    .unwrap();
    let store = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .expect("connect");
    let first = store
        .append_event(TENANT, crate::support::text_event(SESSION, "first"), None)
        .await
        .unwrap();
    assert_eq!(first.sequence, 1);
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()";
    let deadlocks_before = count(&mut admin, deadlocks).await;

    let mut other = PgConnection::connect(&url).await.unwrap();
    sqlx::query("SET deadlock_timeout = '60s'")
        .execute(&mut other)
        .await
        .unwrap();
    sqlx::query("BEGIN").execute(&mut other).await.unwrap();
    sqlx::query(
        "INSERT INTO agent_events (tenant_id, session_id, sequence, envelope) \
         VALUES ($1, $2, 2, '{}')",
    )
    .bind(TENANT)
    .bind(SESSION)
    .execute(&mut other)
    .await
    .unwrap();

    let appender = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .append_event(TENANT, crate::support::text_event(SESSION, "second"), None)
                .await
        })
    };
    // Wait until the store's append holds the stream head and waits for the row above.
    tokio::time::timeout(GUARD, async {
        loop {
            let waiting = count(
                &mut admin,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO agent_events%'",
            )
            .await;
            if waiting > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the append waits for the other transaction");
    // Now the other transaction waits for the head: a cycle, which PostgreSQL breaks by
    // aborting the store's transaction (its deadlock_timeout is the shorter one).
    let locked: Vec<(i64,)> = tokio::time::timeout(
        GUARD,
        sqlx::query_as(
            "SELECT next_sequence FROM stream_heads WHERE tenant_id = $1 AND session_id = $2 \
             AND stream_name = 'agent' FOR UPDATE",
        )
        .bind(TENANT)
        .bind(SESSION)
        .fetch_all(&mut other),
    )
    .await
    .expect("the deadlock is broken")
    .unwrap();
    assert_eq!(
        locked,
        vec![(2,)],
        "the aborted attempt left the head as it was"
    );
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();

    let second = tokio::time::timeout(GUARD, appender)
        .await
        .expect("the append finishes")
        .unwrap()
        .expect("the store ran the aborted transaction again");
    assert_eq!(second.sequence, 2);
    assert!(
        count(&mut admin, deadlocks).await > deadlocks_before,
        "PostgreSQL detected a deadlock"
    );
    let page = store.read_events(TENANT, SESSION, 0, 100).await.unwrap();
    let texts: Vec<&str> = page
        .events
        .iter()
        .map(|e| e.data.get("text").and_then(|t| t.as_str()).unwrap_or(""))
        .collect();
    assert_eq!(texts, vec!["first", "second"]);
}

/// What these receipts are sealed as acting on (it does not matter here).
fn sealing() -> agent_runtime_store::CommandTarget {
    agent_runtime_store::CommandTarget::new("session.close", None)
}
