//! Issue 38 item 1: what one session may hold waiting. Inputs steered into or queued behind a
//! running request are capped per session (count and bytes, per tenant where configured); one
//! more is a retryable `429 RATE_LIMITED` that claims nothing, so the same `commandId` runs once
//! the queue has drained. On PostgreSQL too in the rerun.

use crate::support::*;
use serde_json::{Value, json};

async fn submit(server: &TestServer, command_id: &str, session: &str, text: &str) -> (u16, Value) {
    let data = json!({ "sessionId": session, "input": text, "priority": "later" });
    server
        .command(TOKEN_A, command_id, "input.submit", data)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_retryably_and_the_same_command_runs_once_it_drains() {
    let mut config = memory_config();
    config.executor.max_pending_inputs_per_session = 3;
    config.executor.max_pending_input_bytes_per_session = 1_000;
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    // A request that waits for an approval holds the session.
    server.submit(TOKEN_A, &session, "demo:approval").await;
    let permission = server.permission_request(TOKEN_A, &session, 0).await;
    for n in 0..3 {
        let (status, body) = submit(&server, &format!("q{n}"), &session, "x").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["data"]["status"], "queued");
    }
    let (status, full) = submit(&server, "q3", &session, "one too many").await;
    assert_eq!(status, 429, "{full}");
    assert_eq!(full["error"]["code"], "RATE_LIMITED");
    assert_eq!(full["error"]["retryable"], true, "{full}");
    let message = full["error"]["message"].as_str().unwrap();
    assert!(message.contains("at most 3 inputs"), "{message}");
    assert!(
        !message.contains("JSONL") && !message.contains("record"),
        "{message}"
    );
    let state = server.read(TOKEN_A, &session).await;
    assert_eq!(state["pendingInputs"].as_array().unwrap().len(), 3);

    // The bytes: a 2nd session with one queued input of 900 bytes has no room for 200 more.
    let other = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &other, "demo:approval").await;
    let (status, _) = submit(&server, "b0", &other, &"b".repeat(900)).await;
    assert_eq!(status, 200);
    let (status, body) = submit(&server, "b1", &other, &"b".repeat(200)).await;
    assert_eq!(status, 429, "{body}");

    // Draining: the approval is answered, the request ends and the queue runs; the refused
    // command id was never stored, so it runs now.
    server.resolve(TOKEN_A, &session, &permission, true).await;
    let mut retried = (0, Value::Null);
    for _ in 0..200 {
        retried = submit(&server, "q3", &session, "one too many").await;
        if retried.0 == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(retried.0, 200, "{}", retried.1);
    assert_ne!(retried.1["data"]["status"], Value::Null, "{}", retried.1);
    server.stop().await;
}
