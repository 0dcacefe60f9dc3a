//! A deployment moved between stores with session bundles (docs/bundles.md), judged by the
//! history checker (tests/support/history.rs) over the whole sequence: clients work on `serve`
//! with its JSONL store; it stops with a request running and an input queued behind it; the
//! deployment is exported, imported into PostgreSQL and served from there; the clients resume
//! (their SSE streams from their `Last-Event-ID`, their sessions, their command retries); then it
//! moves back to a new JSONL directory the same way. The checker holds every connection to no
//! gap and no repeat across both moves, every acknowledged input to once, and every replayed
//! command id to its first answer. Twenty-five other tenants written beside them come back
//! exactly as they went.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::history::*;
use crate::support::history_clients::*;
use crate::support::*;
use agent_runtime::protocol::{EventType, JsonObject};
use agent_runtime::secret::Secret;
use agent_runtime_cli::bundle::{ExportArgs, ImportArgs, StoreArgs, run_export, run_import};
use agent_runtime_cli::config::{ServeConfig, StoreKind};
use agent_runtime_store::portable::MAX_EXPORT_PAGE;
use agent_runtime_store::{
    AgentMemories, EventLog, JsonlStore, MemoryRecord, NewEvent, Portable, SessionRecord,
    SessionRecords, Store, StoreLifecycle, StoreOptions,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TENANT: &str = "tenant-a";
const OTHER_TENANTS: usize = 25;
/// Events every store keeps per session: small, so the sessions' logs are trimmed before the moves.
const RETENTION: u64 = 12;

/// The JSONL store of `dir`, once the server that used it has let go of its lock.
async fn open_jsonl(dir: &Path) -> JsonlStore {
    let mut last_error = None;
    for _ in 0..50 {
        let options = StoreOptions {
            max_events_per_session: RETENTION,
            ..StoreOptions::default()
        };
        match JsonlStore::open(dir, options).await {
            Ok(store) => return store,
            Err(error) => last_error = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the JSONL store does not open: {last_error:?}");
}

fn jsonl(dir: &Path) -> StoreArgs {
    StoreArgs {
        store: "jsonl".to_owned(),
        data_dir: dir.to_path_buf(),
        database_url: None,
        max_events_per_session: RETENTION,
    }
}

fn postgres(url: &str) -> StoreArgs {
    StoreArgs {
        store: "postgres".to_owned(),
        data_dir: ".agent-runtime".into(),
        database_url: Some(url.to_owned()),
        max_events_per_session: RETENTION,
    }
}

/// Exports `from` into a new bundle under `work` and imports it into `to`.
async fn move_deployment(from: StoreArgs, to: StoreArgs, work: &Path, name: &str) {
    let bundle = work.join(name);
    run_export(ExportArgs {
        out: bundle.clone(),
        tenants: Vec::new(),
        sessions: Vec::new(),
        sign_with: None,
        quiet: true,
        from,
    })
    .await
    .expect("the export");
    run_import(ImportArgs {
        bundle,
        dry_run: false,
        tenant_map: Vec::new(),
        require_signature: None,
        quiet: true,
        to,
    })
    .await
    .expect("the import, verified");
}

/// Sends an input and records it; returns the answer's data and the input's unique text.
async fn submit(
    target: &Target,
    history: &History,
    session_id: &str,
    text: &str,
    priority: &str,
) -> (Value, String) {
    let never = CancellationToken::new();
    let command_id = format!("move-input-{}", agent_runtime::ids::nanoid());
    let text = format!("{text} {command_id}");
    let data = json!({ "sessionId": session_id, "input": text, "priority": priority });
    let body = command_body(&command_id, "input.submit", data);
    let response = target
        .send_or_last(&body, &never, Duration::from_secs(60))
        .await
        .unwrap_or_else(|last| panic!("an input is accepted: {last}"));
    assert_eq!(response["ok"], true, "{response}");
    history.acked(AckedCommand::untimed(
        command_id,
        "input.submit",
        Some(session_id.to_owned()),
        body,
        response.clone(),
        Some(text.clone()),
    ));
    (response["data"].clone(), text)
}

/// Waits until the session's log holds a `permission.requested` event.
async fn approval_requested(target: &Target, session_id: &str) {
    let response = target
        .http
        .get(format!("{}/sessions/{session_id}/events", target.base()))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(response);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let frame = tokio::time::timeout_at(deadline, reader.next_event())
            .await
            .expect("an approval is requested before the deadline")
            .expect("the stream stays open");
        if frame.data["type"] == "permission.requested" {
            return;
        }
    }
}

/// Other tenants' sessions, events, receipts-free records and memories, written straight into
/// the store while no server runs.
async fn write_other_tenants(store: &JsonlStore) {
    for tenant in 0..OTHER_TENANTS {
        let tenant_id = format!("tenant-{tenant:02}");
        for session in 0..4 {
            let session_id = format!("session-{session}");
            store
                .put_session(&SessionRecord {
                    tenant_id: tenant_id.clone(),
                    created_by: "importer".to_owned(),
                    session_id: session_id.clone(),
                    status: agent_runtime::protocol::SessionStatus::Active,
                    created_at: "2026-01-01T00:00:00.000Z".to_owned(),
                    updated_at: "2026-01-01T00:00:00.000Z".to_owned(),
                    metadata: Some(JsonObject::from_iter([(
                        "tenant".to_owned(),
                        Value::from(tenant),
                    )])),
                    profile: None,
                })
                .await
                .unwrap();
            for n in 0..6 {
                let event = NewEvent {
                    session_id: session_id.clone(),
                    request_id: None,
                    occurred_at: String::new(),
                    event_type: EventType::SessionStream,
                    data: JsonObject::from_iter([
                        ("type".to_owned(), Value::from("content")),
                        ("text".to_owned(), Value::from(format!("{tenant_id} {n}"))),
                    ]),
                };
                let key = (n == 0).then(|| format!("{session_id}-first"));
                store
                    .append_event(&tenant_id, event, key.as_deref())
                    .await
                    .unwrap();
            }
        }
        let memory = MemoryRecord {
            scope: "project".to_owned(),
            name: "notes".to_owned(),
            description: format!("notes of {tenant_id}"),
            memory_type: "project".to_owned(),
            body: "kept across moves".to_owned(),
            updated_at_ms: 0,
        };
        store.save_memory(&tenant_id, memory, 10).await.unwrap();
    }
}

/// Every other tenant's entries, as JSON.
async fn other_tenants(store: &dyn Portable) -> Vec<Value> {
    let mut entries = Vec::new();
    for tenant in 0..OTHER_TENANTS {
        let tenant_id = format!("tenant-{tenant:02}");
        for session in store
            .list_session_ids(&tenant_id, None, MAX_EXPORT_PAGE)
            .await
            .unwrap()
        {
            entries.extend(
                store
                    .export_session(&tenant_id, &session)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        entries.extend(store.export_memories(&tenant_id).await.unwrap());
    }
    entries
        .iter()
        .map(|entry| serde_json::to_value(entry).unwrap())
        .collect()
}

/// Follows every session from its cursor on the current server; returns the followers.
fn follow_all(
    target: &Target,
    history: &Arc<History>,
    sessions: &[String],
    cursors: &[u64],
    stop: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<u64>> {
    sessions
        .iter()
        .zip(cursors)
        .map(|(session, cursor)| {
            follow(
                target,
                history,
                "move-follower",
                session,
                *cursor,
                stop.clone(),
            )
        })
        .collect()
}

async fn cursors_of(followers: Vec<tokio::task::JoinHandle<u64>>) -> Vec<u64> {
    let mut cursors = Vec::new();
    for follower in followers {
        cursors.push(follower.await.unwrap());
    }
    cursors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deployment_moves_from_jsonl_to_postgresql_and_back_and_its_clients_never_notice() {
    let work = tempfile::tempdir().unwrap();
    let first_dir = work.path().join("jsonl-1");
    let last_dir = work.path().join("jsonl-2");
    let history = Arc::new(History::new());

    let config = |kind: StoreKind, dir: &Path| ServeConfig {
        max_events_per_session: RETENTION,
        ..test_config(kind, dir)
    };

    // Before: clients on `serve` with its JSONL store.
    let server = TestServer::start(config(StoreKind::Jsonl, &first_dir)).await;
    let target = Target::new(&server.base);
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(create_session(&target, &history, "move-create").await);
    }
    let stop = CancellationToken::new();
    let followers = follow_all(&target, &history, &sessions, &[0, 0, 0], &stop);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for session in &sessions {
        let (started, _) = submit(&target, &history, session, "demo:deltas=3", "next").await;
        assert!(wait_for_result(&target, session, &started["requestId"], deadline).await);
    }
    // A request running when the server stops, and an input accepted behind it.
    let (running, _) = submit(&target, &history, &sessions[1], "demo:slow", "next").await;
    assert_eq!(running["status"], "started", "{running}");
    let (queued, queued_text) =
        submit(&target, &history, &sessions[1], "demo:deltas=2", "later").await;
    // And an approval waiting for its answer.
    let (waiting, _) = submit(
        &target,
        &history,
        &sessions[2],
        "this needs approval",
        "next",
    )
    .await;
    assert_eq!(waiting["status"], "started", "{waiting}");
    approval_requested(&target, &sessions[2]).await;
    assert_eq!(queued["status"], "queued", "{queued}");
    server.stop().await;
    stop.cancel();
    let cursors = cursors_of(followers).await;

    let store = open_jsonl(&first_dir).await;
    write_other_tenants(&store).await;
    let others_before = other_tenants(&store).await;
    store.close().await.unwrap();

    // The move to PostgreSQL; the clients follow the deployment there.
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    move_deployment(
        jsonl(&first_dir),
        postgres(&url),
        work.path(),
        "to-postgres",
    )
    .await;
    let mut on_postgres = config(StoreKind::Memory, work.path());
    on_postgres.store = StoreKind::Postgres;
    on_postgres.database_url = Some(Secret::new(url.clone()));
    let server = TestServer::start(on_postgres).await;
    target.set_base(&server.base);
    let stop = CancellationToken::new();
    let followers = follow_all(&target, &history, &sessions, &cursors, &stop);
    resume_all(&target, &history, &sessions).await;
    settle(&target, &history, &sessions).await;
    replay_acknowledged(&target, &history).await;
    server.stop().await;
    stop.cancel();
    let cursors = cursors_of(followers).await;

    // And back to a new JSONL directory.
    move_deployment(postgres(&url), jsonl(&last_dir), work.path(), "to-jsonl").await;
    let server = TestServer::start(config(StoreKind::Jsonl, &last_dir)).await;
    target.set_base(&server.base);
    let stop = CancellationToken::new();
    let followers = follow_all(&target, &history, &sessions, &cursors, &stop);
    settle(&target, &history, &sessions).await;
    replay_acknowledged(&target, &history).await;
    server.stop().await;
    stop.cancel();
    cursors_of(followers).await;

    let store = open_jsonl(&last_dir).await;
    let final_log = read_final(&store as &dyn Store, TENANT, &sessions).await;
    let violations = check(&history.snapshot(), &final_log);
    assert!(
        violations.is_empty(),
        "{} violations: {:#?}",
        violations.len(),
        &violations[..violations.len().min(20)]
    );
    // What the clients saw (retention has trimmed the logs since): the running request and the
    // one waiting for an approval each ended once.
    let recorded = history.snapshot();
    for (session, request) in [(&sessions[1], &running), (&sessions[2], &waiting)] {
        let mut seen: std::collections::BTreeMap<u64, &Value> = Default::default();
        for connection in recorded
            .connections
            .iter()
            .filter(|c| c.session_id == *session)
        {
            for event in &connection.events {
                seen.insert(event["sequence"].as_u64().unwrap(), event);
            }
        }
        let of_request = |event: &&&Value| event["requestId"] == request["requestId"];
        let ends = seen
            .values()
            .filter(of_request)
            .filter(|e| is_result(e))
            .count();
        assert_eq!(ends, 1, "request {} ended once", request["requestId"]);
        // The running request is ended by the shutdown. The shutdown cancels the waiting
        // approval (agent.md, permission pipeline step 5), and the demo model may answer that
        // before its request is stopped.
        let shutdown = seen
            .values()
            .filter(of_request)
            .any(|event| event["data"]["code"] == "EXECUTOR_SHUTDOWN");
        assert!(
            shutdown || request == &waiting,
            "{request}: ended by the shutdown"
        );
    }
    // The input queued behind the running request ran once, after the move.
    let transcript: Value = serde_json::from_str(&final_log[&sessions[1]].transcript).unwrap();
    let applied = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry.to_string().contains(&queued_text))
        .count();
    assert_eq!(applied, 1, "the queued input ran once: {transcript}");
    assert_eq!(transcript["pendingInputs"], json!([]));
    assert_eq!(other_tenants(&store).await, others_before);
    store.close().await.unwrap();
}
