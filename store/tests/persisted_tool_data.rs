//! TOOL-22: persisted state is data, never code. Rows written straight into PostgreSQL and lines
//! written straight into a JSONL journal carry "serialized objects" of the kind that made
//! LangChain/LangGraph load secrets from the environment (`{"lc":1,"type":"secret","id":[...]}`)
//! or build classes (`"type":"constructor"`), internal type tags and unknown event types. Each
//! comes back as opaque data, verbatim, or fails with a typed error; nothing panics and nothing is
//! looked up in the environment.
//!
//! The environment part needs the variable set in the process that loads the data, and setting
//! it in a running (multi-threaded) test process is `unsafe`: the test runs itself again as a
//! child with `OPENAI_API_KEY` set to a canary, and checks that the canary appears nowhere in
//! what the child's store returned (the child prints all of it).

use std::fs;
use std::process::Command;

use agent_runtime_store::jsonl::JOURNAL_FILE;
use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::*;
use serde_json::{Value, json};

const CHILD: &str = "AGENT_RUNTIME_TOOL_22_CHILD";
const CANARY: &str = "sk-canary-tool22-5f1d0c9e";
const DONE: &str = "TOOL-22 child: every crafted record checked";
const TENANT: &str = "tenant";

fn secret_object() -> Value {
    json!({"lc": 1, "type": "secret", "id": ["OPENAI_API_KEY"]})
}

fn constructor_object() -> Value {
    json!({
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "llms", "openai", "OpenAI"],
        "kwargs": {"openai_api_key": secret_object()}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_22_crafted_rows_and_lines_are_opaque_data_or_typed_errors_never_env_lookups() {
    if std::env::var_os(CHILD).is_some() {
        check_postgres().await;
        check_jsonl().await;
        println!("{DONE}");
        return;
    }
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "persisted_tool_data::tool_22_crafted_rows_and_lines_are_opaque_data_or_typed_errors_never_env_lookups",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("OPENAI_API_KEY", CANARY)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running the test binary again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed\n{stdout}\n{stderr}");
    assert!(stdout.contains(DONE), "the child ran the checks\n{stdout}");
    assert!(
        !stdout.contains(CANARY) && !stderr.contains(CANARY),
        "the environment's secret leaked into what the store returned"
    );
    assert!(
        stdout.contains(r#""OPENAI_API_KEY""#),
        "the crafted objects came back as data"
    );
}

/// Prints what the store gave back (the parent searches it for the canary) and checks that it
/// is not the canary here too.
fn shown(what: &str, value: &dyn std::fmt::Debug) -> String {
    let text = format!("{value:?}");
    println!("{what}: {text}");
    assert!(
        !text.contains(CANARY),
        "{what} carries the environment's secret"
    );
    text
}

fn expect_typed_error<T: std::fmt::Debug>(what: &str, outcome: StoreResult<T>) {
    let error = outcome.expect_err(what);
    shown(what, &error);
    assert!(
        matches!(
            error,
            StoreError::Backend { .. }
                | StoreError::Runtime {
                    code: RuntimeErrorCode::CorruptJournal | RuntimeErrorCode::InvalidTransaction,
                    ..
                }
        ),
        "{what}: {error:?}"
    );
}

async fn check_postgres() {
    let url = fresh_database_url().await.unwrap();
    let store = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .unwrap();
    store
        .put_session(&SessionRecord {
            tenant_id: TENANT.into(),
            ..crate::support::session("s")
        })
        .await
        .unwrap();
    let valid = store
        .append_event(TENANT, crate::support::text_event("s", "real"), Some("k"))
        .await
        .unwrap();
    let pool = store.pool();
    let exec = |sql: String| async move {
        sqlx::query(&sql).execute(pool).await.unwrap();
    };

    // Session metadata that is a "secret" object: returned verbatim.
    exec(format!(
        "UPDATE sessions SET metadata = '{}' WHERE tenant_id = '{TENANT}'",
        json!({"credentials": secret_object(), "model": constructor_object()})
    ))
    .await;
    let record = store.get_session(TENANT, "s").await.unwrap().unwrap();
    shown("session metadata", &record.metadata);
    let metadata = Value::Object(record.metadata.clone().unwrap());
    assert_eq!(metadata["credentials"], secret_object());
    assert_eq!(metadata["model"], constructor_object());
    let page = store.list_sessions(TENANT, None, None).await.unwrap();
    shown("session list", &page);

    // An event whose data is a constructor object: opaque data.
    let mut envelope = serde_json::to_value(&valid).unwrap();
    envelope["sequence"] = json!(2);
    envelope["eventId"] = json!("crafted-2");
    envelope["data"] = json!({"type": "content", "text": constructor_object()});
    exec(format!(
        "INSERT INTO agent_events VALUES ('{TENANT}', 's', 2, '{envelope}')"
    ))
    .await;
    exec(format!(
        "UPDATE stream_heads SET next_sequence = 3 WHERE tenant_id = '{TENANT}' AND stream_name = 'agent'"
    ))
    .await;
    let page = store.read_events(TENANT, "s", 1, 10).await.unwrap();
    shown("crafted event", &page);
    assert_eq!(page.events[0].data["text"], constructor_object());

    // An envelope that is itself a serialized object, and one with an unknown event type:
    // typed errors.
    exec(format!(
        "INSERT INTO agent_events VALUES ('{TENANT}', 's', 3, '{}')",
        constructor_object()
    ))
    .await;
    exec(format!(
        "UPDATE stream_heads SET next_sequence = 4 WHERE tenant_id = '{TENANT}' AND stream_name = 'agent'"
    ))
    .await;
    expect_typed_error(
        "constructor envelope",
        store.read_events(TENANT, "s", 2, 10).await,
    );
    let mut unknown = envelope.clone();
    unknown["type"] = json!("__class__");
    exec(format!(
        "UPDATE agent_events SET envelope = '{unknown}' WHERE sequence = 3"
    ))
    .await;
    expect_typed_error(
        "unknown event type",
        store.read_events(TENANT, "s", 2, 10).await,
    );
    exec(format!(
        "UPDATE event_keys SET envelope = '{}' WHERE idempotency_key = 'k'",
        constructor_object()
    ))
    .await;
    expect_typed_error(
        "constructor keyed envelope",
        store.get_event_by_idempotency_key(TENANT, "s", "k").await,
    );

    // A command result that is a secret object: returned verbatim on replay.
    let lease = crate::support::lease_of(&store, "c", 60_000).await;
    store
        .complete_command(crate::support::T, "c", &lease, &json!({"ok": true}))
        .await
        .unwrap();
    exec(format!(
        "UPDATE commands SET result = '{}' WHERE command_id = 'c'",
        secret_object()
    ))
    .await;
    let replay = store
        .claim_command(crate::support::T, "c", "fp", 60_000)
        .await
        .unwrap();
    shown("command result", &replay);
    assert_eq!(
        replay,
        CommandClaim::Completed {
            result: secret_object()
        }
    );

    // A durable event and a transcript document replaced by serialized objects: typed errors.
    exec(format!(
        "INSERT INTO durable_events VALUES ('{TENANT}', 's', 1, '{}')",
        constructor_object()
    ))
    .await;
    exec(format!(
        "INSERT INTO stream_heads VALUES ('{TENANT}', 's', 'durable', 1, 2)"
    ))
    .await;
    expect_typed_error(
        "constructor durable event",
        store.read_durable(TENANT, "s", 0, 10).await,
    );
    store.create_transcript(TENANT, "s", None).await.unwrap();
    exec(format!(
        "UPDATE transcripts SET document = '{}' WHERE tenant_id = '{TENANT}'",
        constructor_object()
    ))
    .await;
    expect_typed_error(
        "constructor transcript",
        store.load_transcript(TENANT, "s").await,
    );
}

async fn check_jsonl() {
    // A real journal to craft from: a session and one event.
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store
        .put_session(&crate::support::session("s"))
        .await
        .unwrap();
    store
        .append_event(
            crate::support::T,
            crate::support::text_event("s", "real"),
            None,
        )
        .await
        .unwrap();
    store.close().await.unwrap();
    let text = fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();

    // Opaque data: a "secret" as session metadata, a constructor as event data.
    let mut session = lines[0].clone();
    session["record"]["metadata"] = json!({"credentials": secret_object()});
    let mut event = lines[1].clone();
    event["event"]["data"] = json!({"type": "content", "text": constructor_object()});
    let journal = format!("{session}\n{event}\n");
    let crafted = tempfile::tempdir().unwrap();
    fs::write(crafted.path().join(JOURNAL_FILE), journal).unwrap();
    let store = JsonlStore::open(crafted.path(), StoreOptions::default())
        .await
        .unwrap();
    let record = store
        .get_session(crate::support::T, "s")
        .await
        .unwrap()
        .unwrap();
    shown("jsonl session metadata", &record.metadata);
    assert_eq!(
        Value::Object(record.metadata.clone().unwrap())["credentials"],
        secret_object()
    );
    let page = store
        .read_events(crate::support::T, "s", 0, 10)
        .await
        .unwrap();
    shown("jsonl event", &page);
    assert_eq!(page.events[0].data["text"], constructor_object());
    store.close().await.unwrap();

    // Typed errors: a line that is a serialized object, an internal type tag on an entry, an
    // unknown event type.
    let mut tagged = lines[0].clone();
    tagged["$type"] = json!("System.Diagnostics.Process");
    let mut unknown = lines[1].clone();
    unknown["event"]["type"] = json!("__reduce__");
    let mut as_object = constructor_object();
    as_object["v"] = json!(1);
    for (what, bad) in [
        ("constructor line", as_object),
        ("type-tagged entry", tagged),
        ("unknown event type", unknown),
    ] {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(JOURNAL_FILE),
            format!("{}\n{bad}\n{}\n", lines[0], lines[0]),
        )
        .unwrap();
        expect_typed_error(
            what,
            JsonlStore::open(dir.path(), StoreOptions::default())
                .await
                .map(|_| ()),
        );
    }
}
