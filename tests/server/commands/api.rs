//! The command API over real HTTP (docs/protocol.md §12 items 1-3, 5, 8-10, 12, and the pipeline).

use crate::support::*;
use serde_json::{Value, json};

#[tokio::test]
async fn item_01_an_identical_create_replays_the_first_result() {
    let server = TestServer::memory().await;
    let (status_1, first) = server
        .command(
            TOKEN_A,
            "create-once",
            "session.create",
            json!({ "metadata": { "k": "v" } }),
        )
        .await;
    let (status_2, second) = server
        .command(
            TOKEN_A,
            "create-once",
            "session.create",
            json!({ "metadata": { "k": "v" } }),
        )
        .await;
    assert_eq!((status_1, status_2), (200, 200));
    assert_eq!(first, second);
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn item_02_a_reused_command_id_with_other_data_conflicts() {
    let server = TestServer::memory().await;
    server
        .command(TOKEN_A, "idempotent-create", "session.create", json!({}))
        .await;
    let (status, body) = server
        .command(
            TOKEN_A,
            "idempotent-create",
            "session.create",
            json!({ "metadata": { "different": true } }),
        )
        .await;
    assert_eq!(status, 409);
    assert_eq!(body["ok"], false);
    assert_eq!(body["commandId"], "idempotent-create");
    assert_eq!(body["error"]["code"], "COMMAND_CONFLICT");
    assert_eq!(body["error"]["retryable"], false);
    server.stop().await;
}

/// §12 item 3, and ATK-06: the cap's `OVERLOADED` is retryable, so it is never the stored outcome
/// of its command id (the reference stores it, so a retry with the same id could never succeed):
/// the same id is refused again while the cap holds, and runs once a slot is free.
#[tokio::test]
async fn atk_06_the_active_session_cap_answers_overloaded_and_the_same_id_runs_once_a_slot_frees() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(agent_runtime_cli::config::StoreKind::Memory, dir.path());
    config.executor.max_active_sessions_per_tenant = 1;
    config.gateway.max_concurrent_commands = 2;
    let server = TestServer::start(config).await;
    let first = server.create_session(TOKEN_A).await;

    let body = json!({ "protocolVersion": 1, "commandId": "second-create", "type": "session.create", "data": {} });
    let (status, retry_after, failure) = server
        .post_raw(TOKEN_A, serde_json::to_vec(&body).unwrap())
        .await;
    assert_eq!(status, 503);
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(failure["error"]["code"], "OVERLOADED");
    assert_eq!(failure["error"]["retryable"], true);
    assert_eq!(failure["error"]["retryAfterMs"], 1000);

    // Not stored: the same command id is refused afresh while the cap holds.
    let (status, _, again) = server
        .post_raw(TOKEN_A, serde_json::to_vec(&body).unwrap())
        .await;
    assert_eq!((status, &again), (503, &failure));
    // Another tenant is not affected by tenant-a's cap.
    server.create_session(TOKEN_B).await;
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);

    // Once a slot is free the same id runs, and from then on replays its success.
    server
        .ok(TOKEN_A, "session.close", json!({ "sessionId": first }))
        .await;
    let (status, _, created) = server
        .post_raw(TOKEN_A, serde_json::to_vec(&body).unwrap())
        .await;
    assert_eq!(status, 200, "{created}");
    let (_, _, replay) = server
        .post_raw(TOKEN_A, serde_json::to_vec(&body).unwrap())
        .await;
    assert_eq!(replay, created);
    server.stop().await;
}

/// §12 item 3 as written: the first create holds the tenant's only slot while it is still being
/// set up (its transcript write is held in the store), and a second create meanwhile is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_03_a_create_still_in_flight_holds_the_only_slot() {
    use std::sync::Arc;

    use agent_runtime_cli::Overrides;
    use agent_runtime_store::Operation;
    use agent_runtime_store::Store;
    use agent_runtime_store::faulty::FaultyStore;

    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(agent_runtime_cli::config::StoreKind::Memory, dir.path());
    config.executor.max_active_sessions_per_tenant = 1;
    config.gateway.max_concurrent_commands = 2;
    let faulty = Arc::new(FaultyStore::new(selected_store(DEFAULT_RETENTION).await));
    let overrides = Overrides {
        store: Some(Arc::clone(&faulty) as Arc<dyn Store>),
        ..Overrides::default()
    };
    let server = Arc::new(TestServer::start_with(config, overrides).await);

    faulty.hold(Operation::CreateTranscript);
    let first = tokio::spawn({
        let server = Arc::clone(&server);
        async move {
            server
                .command(TOKEN_A, "first-create", "session.create", json!({}))
                .await
        }
    });
    while faulty.calls(Operation::CreateTranscript) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }

    let (status, second) = server
        .command(TOKEN_A, "second-create", "session.create", json!({}))
        .await;
    assert_eq!(status, 503, "{second}");
    assert_eq!(second["error"]["code"], "OVERLOADED");
    assert_eq!(second["error"]["retryable"], true);

    faulty.release(Operation::CreateTranscript);
    let (status, first) = first.await.unwrap();
    assert_eq!(status, 200, "{first}");
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{list}");
    assert_eq!(
        sessions[0]["sessionId"],
        first["data"]["session"]["sessionId"]
    );
    Arc::into_inner(server).unwrap().stop().await;
}

#[tokio::test]
async fn item_05_a_submitted_input_streams_content_and_a_successful_result() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let submitted = server.submit(TOKEN_A, &session, "hello").await;
    assert_eq!(submitted["status"], "started");
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();

    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let kinds: Vec<_> = events.iter().filter_map(stream_type).collect();
    assert_eq!(kinds.first(), Some(&"turn_start"));
    assert!(kinds.contains(&"content"));
    assert!(kinds.contains(&"usage"));
    assert!(kinds.contains(&"turn_end"));
    let text: String = events
        .iter()
        .filter(|e| stream_type(e) == Some("content"))
        .map(|e| e["data"]["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "[demo] You said: hello");
    let result = events.last().unwrap();
    assert_eq!(result["data"]["subtype"], "success");
    assert_eq!(result["requestId"], request_id.as_str());
    for event in &events {
        agent_runtime::protocol::validate_event(&serde_json::from_value(event.clone()).unwrap())
            .expect("every event is valid protocol v1");
    }
    server.stop().await;
}

#[tokio::test]
async fn item_08_a_bad_session_id_in_the_events_route_is_invalid() {
    let server = TestServer::memory().await;
    let response = server.events(TOKEN_A, "%00bad", "", None).await;
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    assert_eq!(body["commandId"], "events");
    server.stop().await;
}

#[tokio::test]
async fn item_09_an_invalid_principal_is_unauthenticated() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(agent_runtime_cli::config::StoreKind::Memory, dir.path());
    config
        .tokens
        .push(agent_runtime_gateway::TokenGrant::for_token(
            "nul-tenant",
            "tenant-a\u{0}tenant-b",
            "user-a",
            &[agent_runtime::protocol::Scope::SessionAdmin],
        ));
    config
        .tokens
        .push(agent_runtime_gateway::TokenGrant::for_token(
            "space-subject",
            "tenant-a",
            " user-a",
            &[agent_runtime::protocol::Scope::SessionAdmin],
        ));
    let server = TestServer::start(config).await;
    for token in ["nul-tenant", "space-subject", "unknown-token"] {
        let (status, body) = server
            .command(
                token,
                "init",
                "initialize",
                json!({ "client": { "name": "t", "version": "1" } }),
            )
            .await;
        assert_eq!(status, 401, "{token}");
        assert_eq!(body["commandId"], "authentication");
        assert_eq!(body["error"]["code"], "UNAUTHENTICATED");
    }
    server.stop().await;
}

#[tokio::test]
async fn item_10_another_tenant_cannot_read_a_session() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let (status, body) = server
        .command(
            TOKEN_B,
            "read-other",
            "session.read",
            json!({ "sessionId": session }),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "SESSION_NOT_FOUND");
    server.stop().await;
}

#[tokio::test]
async fn item_12_an_approval_round_trip_ends_in_a_result_and_close_succeeds() {
    let server = TestServer::memory().await;
    let created = server
        .ok(
            TOKEN_A,
            "session.create",
            json!({ "metadata": { "purpose": "approval" } }),
        )
        .await;
    assert_eq!(created["session"]["metadata"]["purpose"], "approval");
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    server.submit(TOKEN_A, &session, "needs approval").await;

    let requested = server
        .collect_events(TOKEN_A, &session, 0, |e| {
            e["type"] == "permission.requested"
        })
        .await;
    let request = requested.last().unwrap();
    assert!(
        request.get("requestId").is_none(),
        "permission.requested carries no requestId"
    );
    let permission_id = request["data"]["permissionRequestId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(request["data"]["toolName"], "demo_approval");
    let after = request["sequence"].as_u64().unwrap();

    let resolved = server
        .ok(
            TOKEN_A,
            "permission.resolve",
            json!({ "sessionId": session, "permissionRequestId": permission_id, "approved": true, "scope": "once" }),
        )
        .await;
    assert_eq!(
        resolved,
        json!({ "sessionId": session, "permissionRequestId": permission_id, "resolved": true })
    );

    let rest = server
        .collect_events(TOKEN_A, &session, after, is_result)
        .await;
    assert!(
        rest.iter()
            .any(|e| stream_type(e) == Some("content") && e["data"]["delta"] == "approved")
    );
    assert!(
        rest.iter()
            .any(|e| stream_type(e) == Some("tool_result") && e["data"]["isError"] == false)
    );
    assert_eq!(rest.last().unwrap()["data"]["subtype"], "success");

    let closed = server
        .ok(TOKEN_A, "session.close", json!({ "sessionId": session }))
        .await;
    assert_eq!(closed["session"]["status"], "closed");
    server.stop().await;
}

#[tokio::test]
async fn a_denied_approval_gives_the_model_an_error_tool_result() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "demo:approval").await;
    let permission_id = server.permission_request(TOKEN_A, &session, 0).await;
    server
        .ok(TOKEN_A, "permission.resolve", json!({ "sessionId": session, "permissionRequestId": permission_id, "approved": false, "reason": "no" }))
        .await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let tool_result = events
        .iter()
        .find(|e| stream_type(e) == Some("tool_result"))
        .unwrap();
    assert_eq!(tool_result["data"]["isError"], true);
    assert!(events.iter().any(|e| e["data"]["delta"] == "denied"));
    // A second resolve of the same id is not pending.
    let (status, body) = server
        .command(
            TOKEN_A,
            "again",
            "permission.resolve",
            json!({ "sessionId": session, "permissionRequestId": permission_id, "approved": true }),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "PERMISSION_NOT_FOUND");
    server.stop().await;
}

#[tokio::test]
async fn initialize_describes_the_server_strictly() {
    let server = TestServer::memory().await;
    let data = server
        .ok(
            TOKEN_A,
            "initialize",
            json!({ "client": { "name": "test", "version": "1.0.0" } }),
        )
        .await;
    let parsed: agent_runtime::protocol::result::InitializeResult =
        serde_json::from_value(data.clone()).expect("the initialize result parses strictly");
    assert_eq!(data["commands"].as_array().unwrap().len(), 10);
    assert_eq!(data["transports"], json!(["http-sse"]));
    drop(parsed);
    server.stop().await;
}

#[tokio::test]
async fn a_missing_scope_is_forbidden_with_the_real_command_id() {
    let server = TestServer::memory().await;
    let (status, body) = server
        .command(
            TOKEN_READ_ONLY,
            "create-no-scope",
            "session.create",
            json!({}),
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(body["commandId"], "create-no-scope");
    assert_eq!(body["error"]["code"], "FORBIDDEN");
    assert_eq!(
        body["error"]["message"],
        "Missing required scope: session:create"
    );
    server.stop().await;
}

#[tokio::test]
async fn bad_bodies_get_protocol_errors_with_the_invalid_pseudo_id() {
    let server = TestServer::memory().await;
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "INVALID_COMMAND"),
        (
            br#"{"protocolVersion":1,"commandId":"a","type":"session.list","data":{},"data":{}}"#
                .to_vec(),
            400,
            "INVALID_COMMAND",
        ),
        (
            br#"{"protocolVersion":2,"commandId":"a","type":"session.list","data":{}}"#.to_vec(),
            400,
            "PROTOCOL_VERSION_UNSUPPORTED",
        ),
        (
            br#"{"protocolVersion":1,"commandId":"../unsafe","type":"session.list","data":{}}"#
                .to_vec(),
            400,
            "INVALID_COMMAND",
        ),
        (
            br#"{"protocolVersion":1,"commandId":"a","type":"session.list","data":{},"extra":1}"#
                .to_vec(),
            400,
            "INVALID_COMMAND",
        ),
        (vec![b' '; 1_048_577], 413, "INVALID_COMMAND"),
    ];
    for (body, status, code) in cases {
        let (got_status, _, got) = server.post_raw(TOKEN_A, body).await;
        assert_eq!(got_status, status, "{got}");
        assert_eq!(got["error"]["code"], code);
        assert_eq!(got["commandId"], "invalid");
    }
    server.stop().await;
}

#[tokio::test]
async fn unknown_routes_need_authentication_first() {
    let server = TestServer::memory().await;
    let anonymous = server
        .client
        .get(format!("{}/nowhere", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let known = server
        .client
        .get(format!("{}/nowhere", server.base))
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .send()
        .await
        .unwrap();
    assert_eq!(known.status().as_u16(), 404);
    let body: Value = known.json().await.unwrap();
    assert_eq!(body["commandId"], "routing");
    let trailing = server
        .client
        .post(format!("{}/commands/", server.base))
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .send()
        .await
        .unwrap();
    assert_eq!(trailing.status().as_u16(), 404);
    let health = server
        .client
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(
        health.json::<Value>().await.unwrap(),
        json!({ "status": "ok" })
    );
    server.stop().await;
}

#[tokio::test]
async fn list_pages_newest_first_and_rejects_a_bad_cursor() {
    let server = TestServer::memory().await;
    let mut created = Vec::new();
    for _ in 0..3 {
        created.push(server.create_session(TOKEN_A).await);
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let first = server
        .ok(TOKEN_A, "session.list", json!({ "limit": 2 }))
        .await;
    let ids: Vec<_> = first["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, vec![created[2].clone(), created[1].clone()]);
    let cursor = first["nextCursor"].as_str().unwrap();
    let second = server
        .ok(
            TOKEN_A,
            "session.list",
            json!({ "limit": 2, "cursor": cursor }),
        )
        .await;
    assert_eq!(second["sessions"][0]["sessionId"], created[0].as_str());
    assert!(second.get("nextCursor").is_none());
    for session in first["sessions"].as_array().unwrap() {
        assert!(session.get("tenantId").is_none() && session.get("createdBy").is_none());
    }
    let (status, body) = server
        .command(
            TOKEN_A,
            "bad-cursor",
            "session.list",
            json!({ "cursor": "not-a-cursor" }),
        )
        .await;
    assert_eq!(status, 400, "decision P5");
    assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    server.stop().await;
}

#[tokio::test]
async fn closing_twice_publishes_one_session_closed() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    server
        .ok(TOKEN_A, "session.close", json!({ "sessionId": session }))
        .await;
    let again = server
        .ok(TOKEN_A, "session.close", json!({ "sessionId": session }))
        .await;
    assert_eq!(again["session"]["status"], "closed");
    let events = server.collect_events(TOKEN_A, &session, 0, |_| false).await;
    let closed: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "session.closed")
        .collect();
    assert_eq!(closed.len(), 1, "decision P4");
    assert_eq!(closed[0]["data"], json!({ "reason": "user" }));
    // A closed session cannot be resumed or fed.
    let (status, body) = server
        .command(
            TOKEN_A,
            "resume-closed",
            "session.resume",
            json!({ "sessionId": session }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("SESSION_CONFLICT"))
    );
    let (status, body) = server
        .command(
            TOKEN_A,
            "submit-closed",
            "input.submit",
            json!({ "sessionId": session, "input": "x" }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("SESSION_NOT_FOUND"))
    );
    server.stop().await;
}

#[tokio::test]
async fn abort_ends_the_request_with_an_error_and_a_result() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "demo:slow").await;
    server
        .collect_events(TOKEN_A, &session, 0, |e| stream_type(e) == Some("content"))
        .await;
    let aborted = server
        .ok(TOKEN_A, "request.abort", json!({ "sessionId": session }))
        .await;
    assert_eq!(aborted, json!({ "sessionId": session, "aborted": true }));
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let error = events
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .expect("an error event");
    assert_eq!(error["data"]["code"], "REQUEST_ABORTED");
    assert_eq!(events.last().unwrap()["data"]["subtype"], "error");
    // The session takes new input as soon as the aborted request's result is out (a submission
    // that races the request's last writes waits for them, so it starts rather than queues).
    let again = server.submit(TOKEN_A, &session, "again").await;
    assert_eq!(again["status"], "started", "{again}");
    let after = events.last().unwrap()["sequence"].as_u64().unwrap();
    let next = server
        .collect_events(TOKEN_A, &session, after, is_result)
        .await;
    assert_eq!(next.last().unwrap()["data"]["subtype"], "success");
    server.stop().await;
}

#[tokio::test]
async fn an_input_submitted_the_moment_a_result_arrives_starts_a_request() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let mut after = 0;
    for round in 0..10 {
        let submitted = server.submit(TOKEN_A, &session, "hello").await;
        assert_eq!(submitted["status"], "started", "round {round}: {submitted}");
        let events = server
            .collect_events(TOKEN_A, &session, after, is_result)
            .await;
        let result = events.last().unwrap();
        assert_eq!(result["requestId"], submitted["requestId"]);
        after = result["sequence"].as_u64().unwrap();
    }
    server.stop().await;
}

#[tokio::test]
async fn inputs_while_a_request_runs_are_steered_or_queued() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let first = server.submit(TOKEN_A, &session, "demo:slow").await;
    let request_id = first["requestId"].as_str().unwrap().to_owned();
    let steered = server
        .ok(
            TOKEN_A,
            "input.submit",
            json!({ "sessionId": session, "input": "steer", "priority": "next" }),
        )
        .await;
    assert_eq!(steered["status"], "steered");
    assert_eq!(steered["requestId"], request_id.as_str());
    assert_eq!(steered["priority"], "next");
    let queued = server
        .ok(
            TOKEN_A,
            "input.submit",
            json!({ "sessionId": session, "input": "later one", "priority": "later" }),
        )
        .await;
    assert_eq!(queued["status"], "queued");
    assert_eq!(queued["priority"], "later");
    assert!(queued.get("requestId").is_none());
    let mismatched = server
        .ok(TOKEN_A, "input.submit", json!({ "sessionId": session, "input": "x", "priority": "now", "expectedRequestId": "other" }))
        .await;
    assert_eq!(
        mismatched["status"], "queued",
        "a wrong expectedRequestId is retargeted to later"
    );
    assert_eq!(mismatched["priority"], "later");
    let stale_next = server
        .ok(TOKEN_A, "input.submit", json!({ "sessionId": session, "input": "y", "priority": "next", "expectedRequestId": "other" }))
        .await;
    assert_eq!(stale_next["status"], "queued");
    assert_eq!(stale_next["priority"], "later");

    let read = server.read(TOKEN_A, &session).await;
    assert_eq!(read["pendingInputs"].as_array().unwrap().len(), 4);
    assert_eq!(read["recovery"]["pendingInputCount"], 4);

    server
        .ok(TOKEN_A, "request.abort", json!({ "sessionId": session }))
        .await;
    // The aborted request ends, then the four waiting inputs run as requests of their own.
    let results = std::cell::Cell::new(0);
    let events = server
        .collect_events(TOKEN_A, &session, 0, |e| {
            if is_result(e) {
                results.set(results.get() + 1);
            }
            results.get() == 5
        })
        .await;
    let request_ids: std::collections::BTreeSet<_> = events
        .iter()
        .filter(|e| is_result(e))
        .map(|e| e["requestId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(request_ids.len(), 5, "every input ended in its own request");
    server.stop().await;
}

#[tokio::test]
async fn the_suite_runs_on_the_backend_it_was_asked_for() {
    let server = TestServer::memory().await;
    let (_, ready) = server.readyz().await;
    let expected = if postgres_selected() {
        "postgresql"
    } else {
        "memory"
    };
    assert_eq!(ready["backend"], expected, "{ready}");
    server.stop().await;
}

/// Starts a slow request, waits for its first delta, then steers `text` into it with `priority`
/// (naming the request). Returns the request id, the steered input's id and every event through
/// the request's result.
async fn steer_a_slow_request(
    server: &TestServer,
    priority: &str,
    text: &str,
) -> (String, String, Vec<Value>) {
    let session = server.create_session(TOKEN_A).await;
    let first = server.submit(TOKEN_A, &session, "demo:slow").await;
    let request_id = first["requestId"].as_str().unwrap().to_owned();
    server
        .collect_events(TOKEN_A, &session, 0, |e| stream_type(e) == Some("content"))
        .await;
    let steered = server
        .ok(TOKEN_A, "input.submit", json!({ "sessionId": session, "input": text, "priority": priority, "expectedRequestId": request_id }))
        .await;
    assert_eq!(steered["status"], "steered");
    assert_eq!(steered["priority"], priority);
    let input_id = steered["inputId"].as_str().unwrap().to_owned();
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    (request_id, input_id, events)
}

#[tokio::test]
async fn a_now_input_interrupts_the_running_model_step() {
    let server = TestServer::memory().await;
    let (request_id, input_id, events) = steer_a_slow_request(&server, "now", "hello now").await;
    let interrupted = events
        .iter()
        .find(|e| stream_type(e) == Some("turn_interrupted"))
        .expect("the slow step is interrupted");
    assert_eq!(interrupted["data"]["inputId"], input_id.as_str());
    let applied = events
        .iter()
        .find(|e| stream_type(e) == Some("input_applied"))
        .expect("the input is applied");
    assert_eq!(applied["data"]["priority"], "now");
    assert!(applied["sequence"].as_u64() > interrupted["sequence"].as_u64());
    // The same request goes on and answers the new input.
    let result = events.last().unwrap();
    assert_eq!(result["requestId"], request_id.as_str());
    assert_eq!(result["data"]["content"], "[demo] You said: hello now");
    // Far fewer than the 40 slow deltas were streamed before the interruption.
    let slow = events
        .iter()
        .filter(|e| {
            e["data"]["delta"]
                .as_str()
                .is_some_and(|d| d.starts_with("slow-"))
        })
        .count();
    assert!(slow < 40, "{slow} slow deltas");
    server.stop().await;
}

/// docs/agent.md §1, steering: a `next` input waits for the running model step to finish (nothing
/// is interrupted), then the same request applies it and answers it.
#[tokio::test]
async fn a_next_input_is_applied_after_the_running_step_without_interrupting_it() {
    let server = TestServer::memory().await;
    let (request_id, input_id, events) = steer_a_slow_request(&server, "next", "steer next").await;
    assert!(
        !events
            .iter()
            .any(|e| stream_type(e) == Some("turn_interrupted")),
        "a next input never interrupts"
    );
    let slow: Vec<_> = events
        .iter()
        .filter(|e| {
            e["data"]["delta"]
                .as_str()
                .is_some_and(|d| d.starts_with("slow-"))
        })
        .collect();
    assert_eq!(slow.len(), 40, "the running step streamed to its end");
    let applied = events
        .iter()
        .find(|e| stream_type(e) == Some("input_applied"))
        .expect("the input is applied");
    assert_eq!(applied["data"]["inputId"], input_id.as_str());
    assert_eq!(applied["data"]["priority"], "next");
    assert_eq!(applied["requestId"], request_id.as_str());
    let last_slow = slow.last().unwrap()["sequence"].as_u64().unwrap();
    let first_turn_end = events
        .iter()
        .find(|e| stream_type(e) == Some("turn_end"))
        .expect("the slow step ends")["sequence"]
        .as_u64()
        .unwrap();
    let applied_at = applied["sequence"].as_u64().unwrap();
    assert!(
        applied_at > last_slow && applied_at > first_turn_end,
        "applied at the safe point after the step"
    );
    let result = events.last().unwrap();
    assert_eq!(
        result["requestId"],
        request_id.as_str(),
        "the same request answers it"
    );
    assert_eq!(result["data"]["content"], "[demo] You said: steer next");
    server.stop().await;
}

/// IDEM-10: a command that fails validation stores nothing under its id, so the corrected command
/// with the same id executes (no `COMMAND_CONFLICT`), and only the executed one is replayed.
#[tokio::test]
async fn idem_10_a_validation_failure_does_not_consume_the_command_id() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let invalid = [
        json!({ "sessionId": session }),
        json!({ "sessionId": session, "input": "hi", "unknown": true }),
        json!({ "sessionId": session, "input": 42 }),
        json!({ "sessionId": "../not-an-id", "input": "hi" }),
    ];
    for data in invalid {
        let (status, body) = server
            .command(TOKEN_A, "idem-10", "input.submit", data.clone())
            .await;
        assert_eq!(status, 400, "{data}: {body}");
        assert_eq!(body["error"]["code"], "INVALID_COMMAND", "{data}");
    }
    let corrected = json!({ "sessionId": session, "input": "hi" });
    let (status, first) = server
        .command(TOKEN_A, "idem-10", "input.submit", corrected.clone())
        .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["ok"], true);
    let (status, replayed) = server
        .command(TOKEN_A, "idem-10", "input.submit", corrected)
        .await;
    assert_eq!(
        (status, &replayed),
        (200, &first),
        "the executed command is the one stored"
    );
    // A malformed body after that is still a validation error, not a conflict with the stored one.
    let (status, body) = server
        .command(
            TOKEN_A,
            "idem-10",
            "input.submit",
            json!({ "sessionId": session }),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    server.stop().await;
}

/// IDEM-09: the idempotency key is the body's `commandId`. Missing, empty, over 256 characters,
/// non-ASCII, with a control character, CR/LF (a header-injection attempt) or a path: `400
/// INVALID_COMMAND` under the pseudo id `invalid` (the bad key is never echoed), no header
/// comes back from it, and nothing is stored or run.
#[tokio::test]
async fn idem_09_invalid_command_ids_are_refused_unechoed_and_store_nothing() {
    let server = TestServer::memory().await;
    let long = "k".repeat(257);
    let bad: Vec<Value> = vec![
        Value::Null,
        json!(""),
        json!(long),
        json!("caf\u{e9}"),
        json!("a\u{0}b"),
        json!("a\tb"),
        json!("key\r\nx-injected: yes"),
        json!("../unsafe"),
        json!(".hidden"),
        json!(42),
    ];
    for id in bad {
        let mut body = json!({ "protocolVersion": 1, "type": "session.create", "data": {} });
        if !id.is_null() {
            body["commandId"] = id.clone();
        }
        let response = server
            .client
            .post(format!("{}/commands", server.base))
            .header("authorization", format!("Bearer {TOKEN_A}"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400, "{id}");
        assert!(response.headers().get("x-injected").is_none(), "{id}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], "INVALID_COMMAND", "{id}");
        assert_eq!(
            answer["commandId"], "invalid",
            "{id}: the bad key is not echoed"
        );
    }
    // The longest valid key works, and nothing before it ran.
    let longest = "k".repeat(256);
    let (status, body) = server
        .command(TOKEN_A, &longest, "session.create", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["commandId"], longest.as_str());
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(
        list["sessions"].as_array().unwrap().len(),
        1,
        "only the valid command ran"
    );
    server.stop().await;
}

/// ATK-06 and WP-07: a store failure is never the stored outcome of a command, and what a retry
/// with the same id gets depends on what the failure proves. A write refused before it took
/// effect (`put_session` failing retry-safe) answers `500 INTERNAL_ERROR`, retryable, and reopens
/// the command: the retry runs it, once (it does not stay sealed, answering `COMMAND_IN_PROGRESS`
/// for the abandonment window, when nothing ran). A write whose outcome is unknown (applied,
/// acknowledgement lost) answers `409 COMMAND_IN_PROGRESS` and keeps the command sealed: retries
/// answer that too, and the command does not run twice.
#[tokio::test]
async fn atk_06_a_store_failure_reopens_the_command_only_when_nothing_took_effect() {
    use std::sync::Arc;

    use agent_runtime_cli::Overrides;
    use agent_runtime_store::Operation;
    use agent_runtime_store::Store;
    use agent_runtime_store::faulty::FaultyStore;

    let dir = tempfile::tempdir().unwrap();
    let config = test_config(agent_runtime_cli::config::StoreKind::Memory, dir.path());
    let faulty = Arc::new(FaultyStore::new(selected_store(DEFAULT_RETENTION).await));
    let overrides = Overrides {
        store: Some(Arc::clone(&faulty) as Arc<dyn Store>),
        ..Overrides::default()
    };
    let server = TestServer::start_with(config, overrides).await;
    let sessions = async || {
        let list = server.ok(TOKEN_A, "session.list", json!({})).await;
        list["sessions"].as_array().unwrap().len()
    };

    faulty.fail_next(Operation::PutSession, 1);
    let (status, failed) = server
        .command(TOKEN_A, "create-refused", "session.create", json!({}))
        .await;
    assert_eq!(status, 500, "{failed}");
    assert_eq!(failed["error"]["code"], "INTERNAL_ERROR");
    assert_eq!(failed["error"]["retryable"], true);
    assert_eq!(sessions().await, 0);
    let (status, created) = server
        .command(TOKEN_A, "create-refused", "session.create", json!({}))
        .await;
    assert_eq!(status, 200, "the retry runs: {created}");
    let (_, replayed) = server
        .command(TOKEN_A, "create-refused", "session.create", json!({}))
        .await;
    assert_eq!(replayed, created);
    assert_eq!(sessions().await, 1);

    faulty.fail_after_applying(Operation::PutSession, 1);
    for attempt in 0..2 {
        let (status, uncertain) = server
            .command(TOKEN_A, "create-unknown", "session.create", json!({}))
            .await;
        assert_eq!(status, 409, "attempt {attempt}: {uncertain}");
        assert_eq!(uncertain["error"]["code"], "COMMAND_IN_PROGRESS");
        assert_eq!(uncertain["error"]["retryable"], true);
    }
    assert_eq!(sessions().await, 2, "created once");
    server.stop().await;
}
