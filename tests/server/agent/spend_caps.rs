//! P0 entries of the reliability catalogue (docs/reliability.md) about the agent
//! loop, over real HTTP and SSE with the demo provider: RES-11 (LLM spend caps). The scripted,
//! executor-level tests of the same entry (and of TOOL-07/14/15/17/19, AUTH-10) are in
//! `executor/tests/permissions.rs` and `executor/tests/tools/web_fetch.rs`.

use crate::support::{TOKEN_A, TestServer, is_result, memory_config, stream_type};
use serde_json::{Value, json};

/// Submits the demo's approval prompt, approves it, and returns the request's events through
/// its `result`.
async fn approve_and_finish(server: &TestServer, session: &str, data: Value) -> Vec<Value> {
    server.ok(TOKEN_A, "input.submit", data).await;
    let asked = server
        .collect_events(TOKEN_A, session, 0, |e| e["type"] == "permission.requested")
        .await;
    let prompt = asked.last().unwrap();
    let id = prompt["data"]["permissionRequestId"].as_str().unwrap();
    server.resolve(TOKEN_A, session, id, true).await;
    let after = prompt["sequence"].as_u64().unwrap();
    let rest = server
        .collect_events(TOKEN_A, session, after, is_result)
        .await;
    asked.into_iter().chain(rest).collect()
}

fn error_code(events: &[Value]) -> Option<&str> {
    events
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .and_then(|e| e["data"]["code"].as_str())
}

/// RES-11 over the wire: a client's `maxTurns` above the operator's `max_turns_limit` is a
/// `400 INVALID_COMMAND` (docs/protocol.md §3: a command the server will not accept as given); a
/// request at its turn cap or at `max_request_tokens` ends with an `error` event carrying a
/// stable code, then a `result` with `subtype: "error"`. Per-tenant budgets are deferred (see
/// `executor/tests/permissions.rs::res_11_llm_spend_caps`).
#[tokio::test]
async fn res_11_llm_spend_caps_over_http() {
    let mut config = memory_config();
    config.executor.max_turns_limit = 5;
    // The demo model reports a handful of tokens per turn: any second model call is over.
    config.executor.max_request_tokens = Some(1);
    let server = TestServer::start(config).await;

    let session = server.create_session(TOKEN_A).await;
    let (status, body) = server
        .command(
            TOKEN_A,
            "too-many-turns",
            "input.submit",
            json!({ "sessionId": session, "input": "hello", "maxTurns": 1_000_000 }),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("limit of 5"), "{message}");

    // The demo's tool call needs a second model turn: maxTurns 1 ends the request first.
    let events = approve_and_finish(
        &server,
        &session,
        json!({ "sessionId": session, "input": "needs approval", "maxTurns": 1 }),
    )
    .await;
    assert_eq!(error_code(&events), Some("MAX_TURNS_EXCEEDED"));
    assert_eq!(events.last().unwrap()["data"]["subtype"], "error");

    // Within the turn cap, the token cap ends it before the second model call.
    let session = server.create_session(TOKEN_A).await;
    let events = approve_and_finish(
        &server,
        &session,
        json!({ "sessionId": session, "input": "needs approval" }),
    )
    .await;
    assert_eq!(error_code(&events), Some("MAX_REQUEST_TOKENS_EXCEEDED"));
    let usage = events
        .iter()
        .filter(|e| stream_type(e) == Some("usage"))
        .count();
    assert_eq!(usage, 1, "exactly one model call was made and metered");
    assert_eq!(events.last().unwrap()["data"]["subtype"], "error");
    server.stop().await;
}
