//! Tenant isolation (architecture invariant 3) and CORS (decision P10) over real HTTP.

mod support;

use agent_runtime_cli::config::StoreKind;
use serde_json::{Value, json};
use support::*;

#[tokio::test]
async fn another_tenant_cannot_touch_a_session_or_its_approvals() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "needs approval").await;
    let requested = server
        .collect_events(TOKEN_A, &session, 0, |e| {
            e["type"] == "permission.requested"
        })
        .await;
    let permission_id = requested.last().unwrap()["data"]["permissionRequestId"].clone();

    let attempts: Vec<(&str, Value, &str)> = vec![
        (
            "session.read",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "session.resume",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "session.fork",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "session.close",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "input.submit",
            json!({ "sessionId": session, "input": "x" }),
            "SESSION_NOT_FOUND",
        ),
        (
            "request.abort",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "permission.resolve",
            json!({ "sessionId": session, "permissionRequestId": permission_id, "approved": true }),
            "PERMISSION_NOT_FOUND",
        ),
    ];
    for (kind, data, code) in attempts {
        let (status, body) = server
            .command(TOKEN_B, &format!("b-{kind}"), kind, data.clone())
            .await;
        assert_eq!(status, 404, "{kind}: {body}");
        assert_eq!(body["error"]["code"], code, "{kind}");
        // Indistinguishable from a session that does not exist.
        let mut missing = data.clone();
        missing["sessionId"] = json!("does-not-exist");
        let (missing_status, missing_body) = server
            .command(TOKEN_B, &format!("m-{kind}"), kind, missing)
            .await;
        assert_eq!(missing_status, status, "{kind}");
        assert_eq!(
            missing_body["error"]["code"], body["error"]["code"],
            "{kind}"
        );
    }
    let list = server.ok(TOKEN_B, "session.list", json!({})).await;
    assert_eq!(list["sessions"], json!([]));
    let response = server.events(TOKEN_B, &session, "", None).await;
    assert_eq!(response.status().as_u16(), 404);

    // Another subject of the same tenant cannot answer the owner's approval either.
    let (status, body) = server
        .command(
            TOKEN_A2,
            "a2-resolve",
            "permission.resolve",
            json!({ "sessionId": session, "permissionRequestId": permission_id, "approved": true }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("PERMISSION_NOT_FOUND"))
    );

    // Tenant-a's session is untouched: the owner resolves and the request completes.
    server
        .ok(
            TOKEN_A,
            "permission.resolve",
            json!({ "sessionId": session, "permissionRequestId": permission_id, "approved": true }),
        )
        .await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    server.stop().await;
}

#[tokio::test]
async fn command_ids_are_scoped_per_tenant() {
    let server = TestServer::memory().await;
    let (_, a) = server
        .command(TOKEN_A, "same-id", "session.create", json!({}))
        .await;
    let (status, b) = server
        .command(TOKEN_B, "same-id", "session.create", json!({}))
        .await;
    assert_eq!(status, 200);
    assert_ne!(
        a["data"]["session"]["sessionId"],
        b["data"]["session"]["sessionId"]
    );
    server.stop().await;
}

#[tokio::test]
async fn cors_preflight_is_answered_before_authentication_for_allowed_origins() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.gateway.cors_allowed_origins = vec!["https://app.example.com".to_owned()];
    let server = TestServer::start(config).await;
    let preflight = server
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/commands", server.base),
        )
        .header("origin", "https://app.example.com")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status().as_u16(), 200);
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );

    let other = server
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/commands", server.base),
        )
        .header("origin", "https://evil.example.com")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());

    let (status, _) = server
        .command(
            TOKEN_A,
            "cors-init",
            "initialize",
            json!({ "client": { "name": "c", "version": "1" } }),
        )
        .await;
    assert_eq!(status, 200);
    server.stop().await;
}
