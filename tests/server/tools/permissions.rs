//! The permission pipeline over HTTP: an `ask` waits for `permission.resolve`, and timeout,
//! abort and close cancel it (the id is then gone); the mode and rules from the configuration
//! decide without a prompt.

use std::time::Duration;

use crate::support::{TOKEN_A, TestServer, is_result, memory_config, stream_type};
use agent_runtime_executor::permissions::{PermissionMode, Rule};
use serde_json::{Value, json};

async fn server_with(edit: impl FnOnce(&mut agent_runtime_cli::config::ServeConfig)) -> TestServer {
    let mut config = memory_config();
    edit(&mut config);
    TestServer::start(config).await
}

/// Submits a call of the demo tool and waits for its prompt; returns the permission id.
async fn prompt(server: &TestServer, session: &str) -> String {
    server.submit(TOKEN_A, session, "needs approval").await;
    let events = server
        .collect_events(TOKEN_A, session, 0, |e| e["type"] == "permission.requested")
        .await;
    events.last().unwrap()["data"]["permissionRequestId"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn resolve_status(server: &TestServer, session: &str, id: &str) -> (u16, Value) {
    server
        .command(
            TOKEN_A,
            &agent_runtime::ids::nanoid(),
            "permission.resolve",
            json!({ "sessionId": session, "permissionRequestId": id, "approved": true }),
        )
        .await
}

fn tool_result(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| stream_type(e) == Some("tool_result"))
        .expect("a tool_result")
}

#[tokio::test]
async fn abort_cancels_a_pending_approval() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let id = prompt(&server, &session).await;
    server
        .ok(TOKEN_A, "request.abort", json!({ "sessionId": session }))
        .await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let error = events
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .unwrap();
    assert_eq!(error["data"]["code"], "REQUEST_ABORTED");
    assert_eq!(tool_result(&events)["data"]["isError"], true);
    let (status, body) = resolve_status(&server, &session, &id).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("PERMISSION_NOT_FOUND"))
    );
    server.stop().await;
}

#[tokio::test]
async fn close_cancels_a_pending_approval() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let id = prompt(&server, &session).await;
    server
        .ok(TOKEN_A, "session.close", json!({ "sessionId": session }))
        .await;
    let events = server
        .collect_events(TOKEN_A, &session, 0, |e| e["type"] == "session.closed")
        .await;
    let error = events
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .unwrap();
    assert_eq!(error["data"]["code"], "SESSION_CLOSED");
    let (status, _) = resolve_status(&server, &session, &id).await;
    assert_ne!(
        status, 200,
        "a closed session's approval cannot be resolved"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_unanswered_approval_times_out_into_an_error_result_for_the_model() {
    let server = server_with(|c| c.executor.approval_timeout = Duration::from_millis(300)).await;
    let session = server.create_session(TOKEN_A).await;
    let id = prompt(&server, &session).await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let result = tool_result(&events);
    assert_eq!(result["data"]["isError"], true);
    assert!(
        result["data"]["output"]["error"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{result}"
    );
    assert_eq!(
        events.last().unwrap()["data"]["subtype"],
        "success",
        "the model reacted to the error"
    );
    let (status, _) = resolve_status(&server, &session, &id).await;
    assert_eq!(status, 404);
    server.stop().await;
}

#[tokio::test]
async fn configured_mode_and_rules_decide_without_a_prompt() {
    let cases: [(PermissionMode, &[&str], &[&str], bool); 3] = [
        (PermissionMode::Plan, &[], &[], true),
        (PermissionMode::Default, &["demo_approval"], &[], true),
        (PermissionMode::Default, &[], &["demo_approval"], false),
    ];
    for (mode, deny, allow, denied) in cases {
        let server = server_with(|c| {
            c.executor.permissions.mode = mode;
            c.executor.permissions.rules.deny =
                deny.iter().map(|r| Rule::parse(r).unwrap()).collect();
            c.executor.permissions.rules.allow =
                allow.iter().map(|r| Rule::parse(r).unwrap()).collect();
        })
        .await;
        let session = server.create_session(TOKEN_A).await;
        server.submit(TOKEN_A, &session, "needs approval").await;
        let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
        assert!(
            !events.iter().any(|e| e["type"] == "permission.requested"),
            "{mode:?}"
        );
        let result = tool_result(&events);
        assert_eq!(
            result["data"]["isError"], denied,
            "{mode:?} {deny:?} {allow:?}: {result}"
        );
        server.stop().await;
    }
}
