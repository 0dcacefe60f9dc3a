//! QUEUE-01's PostgreSQL half: queueing an input writes that input, not the queue. Measured as
//! the WAL the database writes per queued input (a document holding the whole queue would log
//! it all again every time), with the queue read back in order, a replaced input in its place,
//! applied and cancelled ones gone, and a document written before migration 0023 (its queue in
//! `pendingInputs`) moved to rows by its next write.

use agent_runtime::protocol::JsonObject;
use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::testing::rng::SeededRng;
use agent_runtime_store::{PostgresOptions, PostgresStore, TranscriptMutation, TranscriptStore};
use serde_json::json;
use sqlx::PgPool;

const TENANT: &str = "t";
const SESSION: &str = "s";

fn input(n: usize, text: &str) -> JsonObject {
    let value = json!({"inputId": format!("input-{n}"), "role": "user", "content": text});
    value.as_object().unwrap().clone()
}

async fn wal_position(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_queued_input_writes_the_input_not_the_queue() {
    let url = fresh_database_url().await.expect("a test database");
    let store = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .unwrap();
    let direct = PgPool::connect(&url).await.unwrap();
    store
        .create_transcript(TENANT, SESSION, None)
        .await
        .unwrap();
    let mut logged = Vec::new();
    for n in 0..30 {
        let before = wal_position(&direct).await;
        let enqueue = TranscriptMutation::EnqueueInput(input(
            n,
            &SeededRng::new(n as u64 + 1).letters(50_000),
        ));
        store
            .mutate_transcript(TENANT, SESSION, enqueue, None)
            .await
            .unwrap();
        logged.push(wal_position(&direct).await - before);
    }
    // 50 KB of text plus row and index overhead: never the queue.
    assert!(
        logged.iter().all(|&bytes| bytes < 120_000),
        "WAL bytes per queued input: {logged:?}"
    );
    let cancel = TranscriptMutation::CancelInput {
        input_id: "input-3".into(),
    };
    let apply = TranscriptMutation::ApplyInput {
        input_id: "input-0".into(),
        request_id: "r1".into(),
        message: input(0, "applied"),
    };
    for mutation in [cancel, apply] {
        store
            .mutate_transcript(TENANT, SESSION, mutation, None)
            .await
            .unwrap();
    }
    let replace = TranscriptMutation::EnqueueInput(input(7, "replaced"));
    store
        .mutate_transcript(TENANT, SESSION, replace, None)
        .await
        .unwrap();
    let doc = store
        .load_transcript(TENANT, SESSION)
        .await
        .unwrap()
        .unwrap();
    let ids: Vec<&str> = doc
        .pending_inputs
        .iter()
        .map(|p| p["inputId"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (1..30)
        .filter(|n| *n != 3)
        .map(|n| format!("input-{n}"))
        .collect();
    assert_eq!(ids, expected);
    assert_eq!(doc.pending_inputs[5]["content"], "replaced");
    assert_eq!(doc.entries.len(), 1, "the applied input's message");
    // The document itself holds no queue.
    let stored: String = sqlx::query_scalar(
        "SELECT document::text FROM transcripts WHERE tenant_id = $1 AND session_id = $2",
    )
    .bind(TENANT)
    .bind(SESSION)
    .fetch_one(&direct)
    .await
    .unwrap();
    assert!(
        stored.contains("\"pendingInputs\":[]"),
        "the document holds the queue ({} bytes)",
        stored.len()
    );

    // A document from before migration 0023 keeps its queue in the document until its next
    // write, which moves it to rows before applying the change.
    let legacy = json!([input(100, "old-a"), input(101, "old-b")]);
    sqlx::query(
        "UPDATE transcripts SET document = json_build_object('sessionId', $3::text, \
           'createdAtMs', 1, 'lastActivityMs', 1, 'entries', json_build_array(), \
           'pendingInputs', $4::json) WHERE tenant_id = $1 AND session_id = $2",
    )
    .bind(TENANT)
    .bind(SESSION)
    .bind(SESSION)
    .bind(legacy.to_string())
    .execute(&direct)
    .await
    .unwrap();
    sqlx::query("DELETE FROM transcript_pending_inputs")
        .execute(&direct)
        .await
        .unwrap();
    // A second store: no copy of the document from this process's earlier writes.
    let fresh = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .unwrap();
    let read = fresh
        .load_transcript(TENANT, SESSION)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.pending_inputs.len(), 2, "read before any write");
    let cancel = TranscriptMutation::CancelInput {
        input_id: "input-100".into(),
    };
    fresh
        .mutate_transcript(TENANT, SESSION, cancel, None)
        .await
        .unwrap();
    let moved = fresh
        .load_transcript(TENANT, SESSION)
        .await
        .unwrap()
        .unwrap();
    let ids: Vec<&str> = moved
        .pending_inputs
        .iter()
        .map(|p| p["inputId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["input-101"]);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM transcript_pending_inputs")
        .fetch_one(&direct)
        .await
        .unwrap();
    assert_eq!(rows, 1);
}
