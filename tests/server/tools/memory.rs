//! The memory tools end to end (docs/agent.md §6.8), driven by `demo:tool` over HTTP and SSE:
//! memories are kept by the server's store (JSONL here, PostgreSQL in the rerun; never the host
//! disk), outlive a restart, are shared by the sessions of one tenant and never seen by another.

use crate::support::tool_calls::*;
use crate::support::*;
use agent_runtime_executor::tools::{MemoryConfig, MemoryScope};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_live_in_the_store_per_tenant_and_outlive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = durable_config(dir.path()).await;
    config.tools.memory = MemoryConfig {
        enabled: true,
        ..MemoryConfig::default()
    };
    let server = TestServer::start(config.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    let saved = call_tool(
        &server,
        &session,
        "MemoryWrite",
        json!({ "operation": "save", "name": "deploy-steps", "description": "how we deploy",
                "type": "project", "body": "blue-green, then smoke tests" }),
    )
    .await;
    assert!(
        saved.asked(),
        "MemoryWrite is a write tool: it asks in the default mode"
    );
    assert_eq!(returned(&saved, "MemoryWrite")["name"], "deploy-steps");
    server.stop().await;

    let server = TestServer::start(config).await;
    // Another session of the same tenant, after a restart.
    let later = server.create_session(TOKEN_A2).await;
    let read = call_tool_as(
        &server,
        TOKEN_A2,
        &later,
        "MemoryRead",
        json!({ "operation": "get", "name": "deploy-steps" }),
    )
    .await;
    assert!(!read.asked(), "reading memories never prompts");
    assert_eq!(
        returned(&read, "MemoryRead")["body"],
        "blue-green, then smoke tests"
    );

    let other_tenant = server.create_session(TOKEN_B).await;
    let index = call_tool_as(
        &server,
        TOKEN_B,
        &other_tenant,
        "MemoryRead",
        json!({ "operation": "index" }),
    )
    .await;
    assert_eq!(returned(&index, "MemoryRead"), "(no memories saved)");
    let deleted = call_tool_as(
        &server,
        TOKEN_B,
        &other_tenant,
        "MemoryWrite",
        json!({ "operation": "delete", "name": "deploy-steps" }),
    )
    .await;
    assert!(
        deleted.answer.contains("Memory not found: deploy-steps"),
        "{}",
        deleted.answer
    );
    server.stop().await;
    assert!(
        !std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .any(|entry| entry.file_name().to_string_lossy().contains("memory")),
        "nothing but the store's own files on disk"
    );
}

/// Issue 38 item 4: with `memory.scope = "user"`, another user of the tenant can neither read
/// the creator's memories in their own session nor drive the creator's session (whose requests
/// read and write the creator's memories): their input is refused with `403 FORBIDDEN`, nothing
/// is queued, and the creator's memory is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_scoped_memories_stay_with_their_user() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = durable_config(dir.path()).await;
    config.tools.memory = MemoryConfig {
        enabled: true,
        scope: MemoryScope::User,
        ..MemoryConfig::default()
    };
    let server = TestServer::start(config).await;
    let mine = server.create_session(TOKEN_A).await;
    let save = |body: &str| {
        json!({ "operation": "save", "name": "pin", "description": "my pin",
                "type": "user", "body": body })
    };
    let saved = call_tool(&server, &mine, "MemoryWrite", save("1234")).await;
    assert_eq!(returned(&saved, "MemoryWrite")["name"], "pin");

    // The colleague's own session has no memories of the creator's.
    let theirs = server.create_session(TOKEN_A2).await;
    let list = json!({ "operation": "list" });
    let read = call_tool_as(&server, TOKEN_A2, &theirs, "MemoryRead", list.clone()).await;
    assert_eq!(returned(&read, "MemoryRead"), json!([]));

    // Driving the creator's session is refused, in every priority, and nothing is queued.
    for priority in ["now", "next", "later"] {
        let input = "demo:tool MemoryWrite {\"operation\":\"save\",\"name\":\"pin\",\"description\":\"x\",\"type\":\"user\",\"body\":\"0000\"}";
        let (status, body) = server
            .command(
                TOKEN_A2,
                &agent_runtime::ids::nanoid(),
                "input.submit",
                json!({ "sessionId": mine, "input": input, "priority": priority }),
            )
            .await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["code"], "FORBIDDEN", "{body}");
    }
    let state = server.read(TOKEN_A, &mine).await;
    assert_eq!(
        state["pendingInputs"].as_array().map_or(0, Vec::len),
        0,
        "{state}"
    );
    let get = json!({ "operation": "get", "name": "pin" });
    let still = call_tool(&server, &mine, "MemoryRead", get).await;
    assert_eq!(returned(&still, "MemoryRead")["body"], "1234");
    server.stop().await;
}
