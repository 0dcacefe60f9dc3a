//! The memory tools end to end (docs/agent.md §6.8), driven by `demo:tool` over HTTP and SSE:
//! memories are kept by the server's store (JSONL here, PostgreSQL in the rerun; never the host
//! disk), outlive a restart, are shared by the sessions of one tenant and never seen by another.

use crate::support::tool_calls::*;
use crate::support::*;
use agent_runtime_executor::tools::MemoryConfig;
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
