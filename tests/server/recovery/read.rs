//! `session.read` and its recovery object over real HTTP (docs/protocol.md §7, §12 items 17-26).

use std::sync::Arc;

use crate::support::*;
use agent_runtime::protocol::{EventType, JsonObject};
use agent_runtime_cli::Overrides;
use agent_runtime_cli::config::StoreKind;
use agent_runtime_store::Operation;
use agent_runtime_store::faulty::FaultyStore;
use agent_runtime_store::{NewEvent, Store};
use serde_json::{Value, json};

async fn server_on(store: Arc<dyn Store>) -> TestServer {
    let dir = std::env::temp_dir();
    let config = test_config(StoreKind::Memory, &dir);
    let overrides = Overrides {
        store: Some(store),
        ..Overrides::default()
    };
    TestServer::start_with(config, overrides).await
}

async fn append(store: &Arc<dyn Store>, session_id: &str, data: Value) {
    let data: JsonObject = data.as_object().unwrap().clone();
    store
        .append_event(
            "tenant-a",
            NewEvent {
                session_id: session_id.to_owned(),
                request_id: Some("request-1".to_owned()),
                occurred_at: "2026-01-01T00:00:00.000Z".to_owned(),
                event_type: EventType::SessionStream,
                data,
            },
            None,
        )
        .await
        .unwrap();
}

fn content(session_id: &str, delta: &str) -> Value {
    json!({ "type": "content", "sessionId": session_id, "delta": delta })
}

fn result(session_id: &str) -> Value {
    json!({ "type": "result", "sessionId": session_id, "subtype": "success" })
}

async fn read(server: &TestServer, session_id: &str) -> Value {
    server.read(TOKEN_A, session_id).await
}

async fn replay(store: &Arc<dyn Store>, session_id: &str, after: u64) -> Vec<String> {
    let page = store
        .read_events("tenant-a", session_id, after, 1000)
        .await
        .unwrap();
    page.events
        .iter()
        .map(|e| {
            e.data
                .get("delta")
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn item_17_a_completed_request_is_the_recovery_point() {
    let store = selected_store(10_000).await;
    let server = server_on(store.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    append(&store, &session, content(&session, "a")).await;
    append(&store, &session, content(&session, "b")).await;
    append(&store, &session, result(&session)).await;
    let data = read(&server, &session).await;
    assert_eq!(
        data["recovery"],
        json!({ "sessionLoaded": true, "pendingInputCount": 0, "lastEventSequence": 3 })
    );
    assert_eq!(data["loaded"], true);
    let keys: Vec<_> = data.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        ["loaded", "messages", "pendingInputs", "recovery", "session"]
    );
    server.stop().await;
}

#[tokio::test]
async fn item_18_events_after_the_last_result_are_replayed() {
    let store = selected_store(10_000).await;
    let server = server_on(store.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    append(&store, &session, content(&session, "a")).await;
    append(&store, &session, result(&session)).await;
    append(&store, &session, content(&session, "still streaming")).await;
    let data = read(&server, &session).await;
    assert_eq!(data["messages"], json!([]));
    assert_eq!(data["recovery"]["lastEventSequence"], 2);
    assert_eq!(replay(&store, &session, 2).await, ["still streaming"]);
    server.stop().await;
}

#[tokio::test]
async fn item_19_without_a_result_everything_is_replayed() {
    let store = selected_store(10_000).await;
    let server = server_on(store.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    append(&store, &session, content(&session, "a")).await;
    append(&store, &session, content(&session, "b")).await;
    let data = read(&server, &session).await;
    assert_eq!(data["recovery"]["lastEventSequence"], 0);
    assert_eq!(replay(&store, &session, 0).await.len(), 2);
    server.stop().await;
}

#[tokio::test]
async fn item_21_with_retention_the_cursor_stays_inside_the_retained_range() {
    let store = selected_store(3).await;
    let server = server_on(store.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    for n in 1..=5 {
        append(&store, &session, content(&session, &format!("d{n}"))).await;
    }
    let data = read(&server, &session).await;
    let cursor = data["recovery"]["lastEventSequence"].as_u64().unwrap();
    let range = store
        .event_stream_range("tenant-a", &session)
        .await
        .unwrap()
        .unwrap();
    assert!(range.first_sequence - 1 <= cursor && cursor <= range.head_sequence);
    let replayed = replay(&store, &session, cursor).await;
    assert_eq!(replayed.last().map(String::as_str), Some("d5"));
    server.stop().await;
}

#[tokio::test]
async fn item_22_a_long_log_without_a_result_replays_from_the_start() {
    let store = selected_store(10_000).await;
    let server = server_on(store.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    for n in 1..=600 {
        append(&store, &session, content(&session, &format!("delta-{n}"))).await;
    }
    let data = read(&server, &session).await;
    assert_eq!(data["recovery"]["lastEventSequence"], 0);
    let replayed = replay(&store, &session, 0).await;
    assert_eq!(replayed.len(), 600);
    assert_eq!(replayed[0], "delta-1");
    server.stop().await;
}

#[tokio::test]
async fn item_23_the_scan_crosses_more_than_one_window() {
    let store = selected_store(10_000).await;
    let server = server_on(store.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    append(&store, &session, result(&session)).await;
    for n in 1..=600 {
        append(&store, &session, content(&session, &format!("delta-{n}"))).await;
    }
    let data = read(&server, &session).await;
    assert_eq!(data["recovery"]["lastEventSequence"], 1);
    server.stop().await;
}

/// A server whose store is `store` behind a [`FaultyStore`], to hold or fail single operations.
async fn faulty_server_on(store: Arc<dyn Store>) -> (TestServer, Arc<FaultyStore>) {
    let faulty = Arc::new(FaultyStore::new(store));
    let config = memory_config();
    let overrides = Overrides {
        store: Some(Arc::clone(&faulty) as Arc<dyn Store>),
        ..Overrides::default()
    };
    (TestServer::start_with(config, overrides).await, faulty)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_20_an_event_appended_during_the_executor_read_is_replayed() {
    let store = selected_store(10_000).await;
    let (server, faulty) = faulty_server_on(store.clone()).await;
    let server = Arc::new(server);
    let session = server.create_session(TOKEN_A).await;
    append(&store, &session, content(&session, "a")).await;
    append(&store, &session, result(&session)).await;

    // The executor's snapshot load waits in the store while one more event is appended.
    faulty.hold(Operation::LoadTranscript);
    let calls_before = faulty.calls(Operation::LoadTranscript);
    let reading = tokio::spawn({
        let (server, session) = (Arc::clone(&server), session.clone());
        async move { read(&server, &session).await }
    });
    while faulty.calls(Operation::LoadTranscript) == calls_before {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    append(&store, &session, content(&session, "appended during read")).await;
    faulty.release(Operation::LoadTranscript);

    let data = reading.await.unwrap();
    assert_eq!(
        data["recovery"]["lastEventSequence"], 2,
        "never the post-snapshot head 3: {data}"
    );
    assert_eq!(replay(&store, &session, 2).await, ["appended during read"]);
    Arc::into_inner(server).unwrap().stop().await;
}

#[tokio::test]
async fn item_24_a_store_without_a_range_gives_cursor_zero_not_the_head() {
    let store = selected_store(10_000).await;
    let (server, faulty) = faulty_server_on(store.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    append(&store, &session, content(&session, "a")).await;
    append(&store, &session, content(&session, "b")).await;
    faulty.fail_always(Operation::EventStreamRange);
    let data = read(&server, &session).await;
    assert_eq!(data["recovery"]["lastEventSequence"], 0, "{data}");
    assert!(
        data["recovery"].get("recoveryIncomplete").is_none(),
        "{data}"
    );
    server.stop().await;
}

#[tokio::test]
async fn item_25_a_store_that_cannot_be_read_marks_recovery_incomplete_without_a_cursor() {
    let store = selected_store(10_000).await;
    let (server, faulty) = faulty_server_on(store.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    append(&store, &session, content(&session, "a")).await;
    faulty.fail_always(Operation::EventStreamRange);
    faulty.fail_always(Operation::ReadEvents);
    let data = read(&server, &session).await;
    assert_eq!(data["recovery"]["recoveryIncomplete"], true, "{data}");
    assert!(
        data["recovery"].get("lastEventSequence").is_none(),
        "no cursor at all: {data}"
    );
    server.stop().await;
}

#[tokio::test]
async fn item_26_a_session_another_executor_created_is_not_loaded() {
    let store = selected_store(10_000).await;
    let first = server_on(store.clone()).await;
    let second = server_on(store.clone()).await;
    let session = first.create_session(TOKEN_A).await;
    let data = read(&second, &session).await;
    assert_eq!(data["loaded"], false);
    assert_eq!(data["messages"], json!([]));
    assert_eq!(data["pendingInputs"], json!([]));
    assert_eq!(data["recovery"]["sessionLoaded"], false);
    assert!(data["recovery"].get("pendingInputCount").is_none());
    // Reading does not load it.
    let again = read(&second, &session).await;
    assert_eq!(again["loaded"], false);
    first.stop().await;
    second.stop().await;
}

#[tokio::test]
async fn a_real_request_is_covered_by_the_transcript_and_its_result() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "hello").await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let data = read(&server, &session).await;
    let messages = data["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        2,
        "the user input and the assistant answer: {data}"
    );
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[1]["content"], "[demo] You said: hello");
    assert_eq!(
        data["recovery"]["lastEventSequence"],
        events.last().unwrap()["sequence"]
    );
    server.stop().await;
}

#[tokio::test]
async fn an_empty_log_resumes_from_zero_and_a_read_carries_the_history_progress() {
    let store = selected_store(10_000).await;
    let server = server_on(store.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    let data = read(&server, &session).await;
    assert_eq!(
        data["recovery"],
        json!({ "sessionLoaded": true, "pendingInputCount": 0, "lastEventSequence": 0 })
    );

    let (request, events) = server.run_request(TOKEN_A, &session, "hello", 0).await;
    // Where the store writes a request's end in parts (JSONL, memory), its coverage follows its
    // events.
    let mut data = read(&server, &session).await;
    for _ in 0..100 {
        if data["historyProgress"]["coveredRequestId"] == request.as_str() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        data = read(&server, &session).await;
    }
    assert_eq!(
        data["historyProgress"]["coveredRequestId"],
        request.as_str()
    );
    let state = data["historyProgress"]["state"].as_str().unwrap();
    assert!(["complete", "in_progress"].contains(&state), "{state}");
    assert_eq!(
        data["recovery"]["lastEventSequence"],
        events.last().unwrap()["sequence"]
    );
    server.stop().await;
}
