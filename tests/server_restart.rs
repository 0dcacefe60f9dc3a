//! Restarting on the same JSONL directory (protocol.md §12 item 11 and the restart acceptance).

mod support;

use agent_runtime_cli::config::StoreKind;
use serde_json::json;
use support::*;

async fn jsonl_server(dir: &std::path::Path) -> TestServer {
    TestServer::start(test_config(StoreKind::Jsonl, dir)).await
}

#[tokio::test]
async fn item_11_a_second_server_on_the_same_store_resumes_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    let first = jsonl_server(dir.path()).await;
    let session = first.create_session(TOKEN_A).await;
    first.submit(TOKEN_A, &session, "hello").await;
    first.collect_events(TOKEN_A, &session, 0, is_result).await;
    first.stop().await;

    let second = jsonl_server(dir.path()).await;
    let resumed = second
        .ok(TOKEN_A, "session.resume", json!({ "sessionId": session }))
        .await;
    assert_eq!(resumed["session"]["sessionId"], session.as_str());
    let submitted = second.submit(TOKEN_A, &session, "continue").await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    let events = second
        .collect_events(TOKEN_A, &session, 0, |e| {
            is_result(e) && e["requestId"] == request_id.as_str()
        })
        .await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    // The transcript carried over: both requests' messages are there.
    let read = second
        .ok(TOKEN_A, "session.read", json!({ "sessionId": session }))
        .await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 4);
    second.stop().await;
}

#[tokio::test]
async fn sessions_events_results_and_idempotency_survive_a_restart_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let first = jsonl_server(dir.path()).await;
    let create = json!({ "protocolVersion": 1, "commandId": "create-1", "type": "session.create", "data": { "metadata": { "a": 1 } } });
    let create_bytes = serde_json::to_vec(&create).unwrap();
    let (status, _, created) = first.post_raw(TOKEN_A, create_bytes.clone()).await;
    assert_eq!(status, 200);
    let session = created["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    first.submit(TOKEN_A, &session, "remember me").await;
    let before = first.collect_events(TOKEN_A, &session, 0, is_result).await;
    let raw_before = first
        .client
        .post(format!("{}/commands", first.base))
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .body(create_bytes.clone())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    first.stop().await;

    let second = jsonl_server(dir.path()).await;
    let raw_after = second
        .client
        .post(format!("{}/commands", second.base))
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .body(create_bytes)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        raw_before, raw_after,
        "the stored result is replayed byte for byte"
    );
    let after = second.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(
        before, after,
        "the same events with the same ids and sequences"
    );
    let list = second.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);
    // A changed payload under the same id still conflicts after the restart.
    let (status, body) = second
        .command(
            TOKEN_A,
            "create-1",
            "session.create",
            json!({ "metadata": { "a": 2 } }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("COMMAND_CONFLICT"))
    );
    second.stop().await;
}

#[tokio::test]
async fn a_command_for_an_active_session_after_a_restart_loads_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let first = jsonl_server(dir.path()).await;
    let session = first.create_session(TOKEN_A).await;
    first.stop().await;

    // Decision P12: no explicit resume needed.
    let second = jsonl_server(dir.path()).await;
    let submitted = second.submit(TOKEN_A, &session, "after restart").await;
    assert_eq!(submitted["status"], "started");
    let events = second.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    second.stop().await;
}

#[tokio::test]
async fn a_graceful_shutdown_ends_a_running_request_with_a_terminal_event() {
    let dir = tempfile::tempdir().unwrap();
    let first = jsonl_server(dir.path()).await;
    let session = first.create_session(TOKEN_A).await;
    first.submit(TOKEN_A, &session, "demo:slow").await;
    first
        .collect_events(TOKEN_A, &session, 0, |e| stream_type(e) == Some("content"))
        .await;
    first.stop().await;

    let second = jsonl_server(dir.path()).await;
    let events = second.collect_events(TOKEN_A, &session, 0, is_result).await;
    let error = events
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .unwrap();
    assert_eq!(error["data"]["code"], "EXECUTOR_SHUTDOWN");
    assert_eq!(events.last().unwrap()["data"]["subtype"], "error");
    second.stop().await;
}
