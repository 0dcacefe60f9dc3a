//! Schema migrations, cancellation mid-transaction, ambiguous commits and readiness of the
//! PostgreSQL store.

use agent_runtime_store::EventReader;
use std::time::Duration;

use agent_runtime_store::postgres::{migrate, target_schema_version};
use agent_runtime_store::testing::postgres::{PgCluster, fresh_database_url};
use agent_runtime_store::{
    CommandClaim, CommandReceipts, EventLog, NewEvent, PostgresOptions, PostgresStore,
    SchemaPolicy, StoreError, StoreLifecycle,
};
use serde_json::json;

fn event(text: &str) -> NewEvent {
    crate::support::text_event("session-1", text)
}

fn require_current() -> PostgresOptions {
    PostgresOptions {
        schema_policy: SchemaPolicy::RequireCurrent,
        ..PostgresOptions::default()
    }
}

#[tokio::test]
async fn a_fresh_database_migrates_and_reports_its_schema_version() {
    let url = fresh_database_url().await.unwrap();
    let store = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .expect("migrates at start-up");
    let health = store.health_check().await;
    assert!(health.ready, "{:?}", health.details);
    assert_eq!(health.details["backend"], "postgresql");
    assert_eq!(health.details["schemaVersion"], target_schema_version());
    assert!(
        !format!("{:?}", health.details).contains("127.0.0.1"),
        "no URL in health details"
    );
}

#[tokio::test]
async fn require_policy_refuses_an_unmigrated_database_naming_the_migrate_command() {
    let url = fresh_database_url().await.unwrap();
    let refused = PostgresStore::connect(&url, require_current()).await;
    let message = match refused {
        Err(StoreError::NotOpen(message)) => message,
        Err(other) => panic!("expected NotOpen, got {other:?}"),
        Ok(_) => panic!("an unmigrated database must be refused"),
    };
    assert!(message.contains("agent-runtime migrate"), "{message}");
    assert!(message.contains("version 0"), "{message}");
    assert!(!message.contains(&url), "the URL never appears in errors");

    assert_eq!(migrate(&url).await.unwrap(), target_schema_version());
    PostgresStore::connect(&url, require_current())
        .await
        .expect("a migrated database is accepted");
}

/// PG-13: a database migrated by a newer build is refused at start-up, whichever the schema
/// policy, with a message naming both versions; nothing is written to it.
#[tokio::test]
async fn pg_13_a_schema_newer_than_this_build_is_refused_naming_both_versions() {
    let url = fresh_database_url().await.unwrap();
    migrate(&url).await.unwrap();
    let newer = target_schema_version() + 1;
    {
        let store = PostgresStore::connect(&url, PostgresOptions::default())
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES ($1, 'from a newer build', true, '\\x00'::bytea, 1)",
        )
        .bind(newer)
        .execute(store.pool())
        .await
        .unwrap();
        store.close().await.unwrap();
    }
    let target = target_schema_version();
    for (policy, options) in [
        ("migrate", PostgresOptions::default()),
        ("require", require_current()),
    ] {
        let message = match PostgresStore::connect(&url, options).await {
            Err(StoreError::NotOpen(message)) => message,
            Err(other) => panic!("{policy}: expected NotOpen, got {other:?}"),
            Ok(_) => panic!("{policy}: a newer schema must be refused"),
        };
        assert!(message.contains(&newer.to_string()), "{policy}: {message}");
        assert!(
            message.contains(&format!("version {target}")),
            "{policy}: {message}"
        );
        assert!(
            message.contains("upgrade agent-runtime"),
            "{policy}: {message}"
        );
        assert!(!message.contains(&url), "the URL never appears in errors");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrations_both_succeed_under_the_advisory_lock() {
    let url = fresh_database_url().await.unwrap();
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { migrate(&url).await })
        })
        .collect();
    for run in runs {
        assert_eq!(run.await.unwrap().unwrap(), target_schema_version());
    }
    PostgresStore::connect(&url, require_current())
        .await
        .expect("the schema is current");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_future_dropped_mid_transaction_leaves_nothing_half_written() {
    let url = fresh_database_url().await.unwrap();
    let options = PostgresOptions {
        max_connections: 2,
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect(&url, options).await.unwrap();
    store
        .append_event("t", event("before"), None)
        .await
        .unwrap();

    // Hold the session's stream head so the next append blocks inside its transaction after
    // having taken locks and (for a batch) before committing; then cancel it.
    let mut blocker = store.pool().begin().await.unwrap();
    sqlx::query("SELECT * FROM stream_heads WHERE tenant_id = 't' FOR UPDATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let batch = vec![event("half-1"), event("half-2")];
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        store.append_events("t", "session-1", batch, None),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the append was blocked and got cancelled"
    );
    blocker.rollback().await.unwrap();

    // Every pooled connection is usable (none came back inside an open transaction). The
    // cancelled batch is whole or absent: its writer gave up waiting, but the batch it was
    // sending runs in a task of its own (it may carry other writers' writes), so it may still
    // commit, both events together and in their place, never one without the other.
    for i in 0..6 {
        store
            .append_event("t", event(&format!("after {i}")), None)
            .await
            .expect("the pool still works");
    }
    let page = store.read_events("t", "session-1", 0, 100).await.unwrap();
    let texts: Vec<&str> = page
        .events
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    let sequences: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (1..=texts.len() as u64).collect::<Vec<_>>(),
        "no gap"
    );
    let after: Vec<String> = (0..6).map(|i| format!("after {i}")).collect();
    let whole = [
        vec!["before", "half-1", "half-2"],
        after.iter().map(String::as_str).collect(),
    ]
    .concat();
    let absent = [vec!["before"], after.iter().map(String::as_str).collect()].concat();
    assert!(texts == whole || texts == absent, "{texts:?}");
    let (open,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND state LIKE 'idle in transaction%'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(open, 0, "no connection is left inside a transaction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_stalled_inside_a_transaction_is_cut_off_and_the_session_moves_on() {
    let url = fresh_database_url().await.unwrap();
    let options = PostgresOptions {
        stalled_transaction_timeout: Duration::from_millis(300),
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect(&url, options).await.unwrap();
    store
        .append_event("t", event("before"), None)
        .await
        .unwrap();

    // A writer that took the session's lock and then stopped talking (a paused process): its
    // transaction is never committed nor rolled back by the client, only by the database.
    let mut stalled = store.pool().begin().await.unwrap();
    sqlx::query(
        "UPDATE stream_heads SET next_sequence = next_sequence + 100 WHERE tenant_id = 't'",
    )
    .execute(&mut *stalled)
    .await
    .unwrap();

    let next = tokio::time::timeout(
        Duration::from_secs(20),
        store.append_event("t", event("after"), None),
    )
    .await
    .expect("the stalled writer's lock is released by the database")
    .unwrap();
    assert_eq!(
        next.sequence, 2,
        "the stalled writer's change was rolled back"
    );
    assert!(
        sqlx::query("SELECT 1")
            .execute(&mut *stalled)
            .await
            .is_err(),
        "the stalled connection was ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_fails_retry_safe_turns_readyz_off_and_recovers_without_reconnecting() {
    let mut cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .unwrap()
        .expect("a dedicated cluster");
    let url = cluster.create_database().await.unwrap();
    let options = PostgresOptions {
        acquire_timeout: Duration::from_secs(2),
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect(&url, options).await.unwrap();
    let claim = store.claim_command("t", "c-1", "fp", 30_000).await.unwrap();
    let CommandClaim::Claimed { lease_id } = claim else {
        panic!("{claim:?}")
    };
    store
        .seal_command("t", "c-1", &lease_id, &sealing())
        .await
        .unwrap();
    store
        .complete_command("t", "c-1", &lease_id, &json!({"ok": true}))
        .await
        .unwrap();

    let mut cluster = tokio::task::spawn_blocking(move || {
        cluster.stop().expect("stop PostgreSQL");
        cluster
    })
    .await
    .unwrap();
    match store.claim_command("t", "c-2", "fp", 30_000).await {
        Err(StoreError::Backend {
            retry_safe,
            message,
        }) => {
            assert!(retry_safe, "{message}");
            assert!(!message.contains(&url));
        }
        other => panic!("expected a retry-safe backend error, got {other:?}"),
    }
    let health = store.health_check().await;
    assert!(!health.ready);
    assert_eq!(health.details["backend"], "postgresql");
    assert!(health.details["error"].is_string());

    let cluster = tokio::task::spawn_blocking(move || {
        cluster.restart().expect("restart PostgreSQL");
        cluster
    })
    .await
    .unwrap();
    let health = store.health_check().await;
    assert!(health.ready, "{:?}", health.details);
    let replay = store.claim_command("t", "c-1", "fp", 30_000).await.unwrap();
    assert_eq!(
        replay,
        CommandClaim::Completed {
            result: json!({"ok": true})
        },
        "what was acknowledged before the outage is still there"
    );
    let fresh = store.claim_command("t", "c-2", "fp", 30_000).await.unwrap();
    assert!(matches!(fresh, CommandClaim::Claimed { .. }), "{fresh:?}");
    drop(cluster);
}

/// Advisory locks held by any backend of the store's database.
async fn advisory_locks(admin: &sqlx::PgPool) -> i64 {
    let (held,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
         WHERE l.locktype = 'advisory' AND d.datname = current_database()",
    )
    .fetch_one(admin)
    .await
    .unwrap();
    held
}

/// PG-08: the store's advisory locks are transaction-scoped (only the migration takes a session
/// lock, and lets it go), so no lock outlives its transaction, not even when the connections
/// doing the work are terminated under it; the log stays contiguous and writable after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_08_no_advisory_lock_outlives_its_transaction_even_when_connections_are_killed() {
    let url = fresh_database_url().await.unwrap();
    let store = std::sync::Arc::new(
        PostgresStore::connect(&url, PostgresOptions::default())
            .await
            .unwrap(),
    );
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    assert_eq!(
        advisory_locks(&admin).await,
        0,
        "the migration let its lock go"
    );

    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let store = std::sync::Arc::clone(&store);
            tokio::spawn(async move {
                let mut written = 0;
                for n in 0..100 {
                    let text = format!("writer {writer} event {n}");
                    if store
                        .append_event("tenant-a", event(&text), None)
                        .await
                        .is_ok()
                    {
                        written += 1;
                    }
                }
                written
            })
        })
        .collect();
    // Kill every other connection of the database a few times while the writers run.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .execute(&admin)
        .await
        .unwrap();
    }
    let mut acknowledged = 0;
    for writer in writers {
        acknowledged += writer.await.unwrap();
    }
    assert!(acknowledged > 0);

    // The pool reconnects; every acknowledged append is there, contiguous, and writes go on.
    store
        .append_event("tenant-a", event("after the kills"), None)
        .await
        .expect("the store writes again");
    let page = store
        .read_events("tenant-a", "session-1", 0, 1000)
        .await
        .unwrap();
    let sequences: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=sequences.len() as u64).collect::<Vec<_>>());
    assert!(
        sequences.len() > acknowledged,
        "every acknowledged append and the last one"
    );
    assert_eq!(
        advisory_locks(&admin).await,
        0,
        "no lock outlived its transaction"
    );
}

/// Migration 0006 keeps entries in `transcript_entries` rows; a document written at version 5
/// keeps its entries until its next write moves them there (SQL cannot: content holds NUL). It
/// reads back the same before and after, and the next turn appends after the moved entries.
#[tokio::test]
async fn transcripts_written_before_0006_keep_their_entries_and_grow_after_them() {
    use agent_runtime_store::{TranscriptMutation, TranscriptStore};

    let url = fresh_database_url().await.unwrap();
    let mut before_0006 = sqlx::migrate::Migrator::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations"),
    )
    .await
    .unwrap();
    before_0006.migrations = before_0006
        .migrations
        .iter()
        .filter(|migration| migration.version < 6)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    before_0006.run(&pool).await.unwrap();
    let document = json!({
        "sessionId": "session-1",
        "createdAtMs": 1,
        "lastActivityMs": 2,
        "entries": [
            { "id": "m1", "createdAtMs": 1, "message": { "role": "user", "content": "nul \u{0000} here" } },
            { "id": "m2", "parentMessageId": "m1", "createdAtMs": 2, "message": { "role": "assistant", "content": "answer" } }
        ],
        "pendingInputs": [{ "inputId": "i1", "content": "later" }],
        "summary": "so far"
    });
    sqlx::query(
        "INSERT INTO transcripts (tenant_id, session_id, document, updated_at_ms) \
         VALUES ('tenant-a', 'session-1', $1::json, 2)",
    )
    .bind(document.to_string())
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    assert_eq!(migrate(&url).await.unwrap(), target_schema_version());
    let store = PostgresStore::connect(&url, require_current())
        .await
        .unwrap();
    let moved = store
        .load_transcript("tenant-a", "session-1")
        .await
        .unwrap()
        .expect("the transcript survives the migration");
    let ids: Vec<&str> = moved
        .entries
        .iter()
        .map(|entry| entry.id.as_str())
        .collect();
    assert_eq!(ids, ["m1", "m2"]);
    assert_eq!(moved.entries[0].message["content"], "nul \u{0000} here");
    assert_eq!(moved.pending_inputs.len(), 1);
    assert_eq!(moved.summary.as_deref(), Some("so far"));

    let reply = json!({ "role": "user", "content": "next" });
    let serde_json::Value::Object(reply) = reply else {
        unreachable!("an object literal")
    };
    store
        .mutate_transcript(
            "tenant-a",
            "session-1",
            TranscriptMutation::AppendMessages(vec![reply]),
            None,
        )
        .await
        .unwrap();
    let grown = store
        .load_transcript("tenant-a", "session-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(grown.entries.len(), 3);
    assert_eq!(grown.entries[2].parent_message_id.as_deref(), Some("m2"));
    let (positions,): (Vec<i64>,) = sqlx::query_as(
        "SELECT array_agg(position ORDER BY position) FROM transcript_entries \
         WHERE tenant_id = 'tenant-a' AND session_id = 'session-1'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(positions, [0, 1, 2]);
    let (document,): (String,) = sqlx::query_as(
        "SELECT document::text FROM transcripts WHERE tenant_id = 'tenant-a' AND session_id = 'session-1'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(document.contains(r#""entries":[]"#), "{document}");
    store.close().await.unwrap();
}

/// What these receipts are sealed as acting on (it does not matter here).
fn sealing() -> agent_runtime_store::CommandTarget {
    agent_runtime_store::CommandTarget::new("session.close", None)
}
