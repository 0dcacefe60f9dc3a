//! `MemoryRead` and `MemoryWrite` (docs/agent.md §6.8) on the memory store: the reference's
//! operations and outputs, scopes per tenant or per user, the quota and the body cap, and their
//! permission kinds. The same tools run end to end on JSONL and PostgreSQL in
//! tests/server/tools/memory.rs.

use std::sync::Arc;

use crate::support::error_text;
use agent_runtime_executor::tools::{
    MemoryConfig, MemoryScope, ToolContext, ToolEffect, ToolOutcome, ToolRegistry, ToolsConfig,
};
use agent_runtime_store::{AgentMemories, MemoryStore, StoreOptions};
use serde_json::{Value, json};

async fn tools(memory: MemoryConfig) -> ToolRegistry {
    ToolsConfig {
        memory: MemoryConfig {
            enabled: true,
            ..memory
        },
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .unwrap()
}

struct Caller {
    tools: ToolRegistry,
    store: Arc<MemoryStore>,
}

impl Caller {
    async fn call(&self, tenant: &str, creator: &str, name: &str, input: Value) -> ToolOutcome {
        let tool = self.tools.get(name).unwrap();
        if let Err(refused) = tool.check(&input) {
            return ToolOutcome {
                output: json!({ "error": refused }),
                is_error: true,
                summary: refused,
                state: None,
                patch: None,
                context_patch: None,
                new_messages: Vec::new(),
            };
        }
        let context = ToolContext {
            tenant_id: tenant.to_owned(),
            creator: creator.to_owned(),
            memories: Some(Arc::clone(&self.store) as Arc<dyn AgentMemories>),
            ..ToolContext::detached()
        };
        tool.run(input, context).await
    }
}

async fn caller(memory: MemoryConfig) -> Caller {
    Caller {
        tools: tools(memory).await,
        store: Arc::new(MemoryStore::new(StoreOptions::default())),
    }
}

fn get(name: &str) -> Value {
    json!({ "operation": "get", "name": name })
}

fn delete(name: &str) -> Value {
    json!({ "operation": "delete", "name": name })
}

fn save(name: &str, body: &str) -> Value {
    json!({ "operation": "save", "name": name, "description": format!("about {name}"), "type": "project", "body": body })
}

#[tokio::test]
async fn memories_are_saved_listed_searched_indexed_read_and_deleted() {
    let c = caller(MemoryConfig::default()).await;
    let saved = c
        .call(
            "t",
            "alice",
            "MemoryWrite",
            save("build-steps", "cargo nextest"),
        )
        .await;
    assert!(!saved.is_error, "{}", saved.output);
    assert_eq!(saved.output["name"], "build-steps");
    assert_eq!(saved.output["type"], "project");
    assert_eq!(saved.output["body"], "cargo nextest");
    assert!(saved.output["updatedAt"].as_str().unwrap().ends_with('Z'));
    c.call(
        "t",
        "alice",
        "MemoryWrite",
        save("api-style", "camelCase JSON"),
    )
    .await;

    let list = c
        .call("t", "alice", "MemoryRead", json!({ "operation": "list" }))
        .await;
    let names: Vec<&str> = list
        .output
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["api-style", "build-steps"], "sorted by name");
    assert!(
        list.output[0].get("body").is_none(),
        "a list has summaries only"
    );

    let found = c
        .call(
            "t",
            "alice",
            "MemoryRead",
            json!({ "operation": "search", "query": "NEXTEST" }),
        )
        .await;
    assert_eq!(found.output.as_array().unwrap().len(), 1);
    assert_eq!(found.output[0]["name"], "build-steps");

    let index = c
        .call("t", "alice", "MemoryRead", json!({ "operation": "index" }))
        .await;
    assert_eq!(
        index.output,
        "- [api-style](api-style) — about api-style\n- [build-steps](build-steps) — about build-steps"
    );

    let one = c.call("t", "alice", "MemoryRead", get("api-style")).await;
    assert_eq!(one.output["body"], "camelCase JSON");

    let deleted = c
        .call("t", "alice", "MemoryWrite", delete("api-style"))
        .await;
    assert_eq!(
        deleted.output,
        json!({ "name": "api-style", "deleteRequested": true })
    );
    let gone = c.call("t", "alice", "MemoryRead", get("api-style")).await;
    assert!(gone.is_error);
    assert_eq!(gone.output["error"], "Memory not found: api-style");
    c.call("t", "alice", "MemoryWrite", delete("build-steps"))
        .await;
    let empty = c
        .call("t", "alice", "MemoryRead", json!({ "operation": "index" }))
        .await;
    assert_eq!(empty.output, "(no memories saved)");
}

#[tokio::test]
async fn tenants_never_share_memories_and_the_user_scope_separates_users() {
    let tenant_wide = caller(MemoryConfig::default()).await;
    tenant_wide
        .call("acme", "alice", "MemoryWrite", save("shared", "x"))
        .await;
    let colleague = tenant_wide
        .call("acme", "bob", "MemoryRead", get("shared"))
        .await;
    assert!(
        !colleague.is_error,
        "the tenant scope is shared by its users"
    );
    let stranger = tenant_wide
        .call("globex", "alice", "MemoryRead", get("shared"))
        .await;
    assert!(stranger.is_error, "another tenant never sees it");

    let per_user = caller(MemoryConfig {
        scope: MemoryScope::User,
        ..MemoryConfig::default()
    })
    .await;
    per_user
        .call("acme", "alice", "MemoryWrite", save("mine", "x"))
        .await;
    let bob = per_user
        .call("acme", "bob", "MemoryRead", json!({ "operation": "list" }))
        .await;
    assert_eq!(bob.output, json!([]));
    let alice = per_user
        .call(
            "acme",
            "alice",
            "MemoryRead",
            json!({ "operation": "list" }),
        )
        .await;
    assert_eq!(alice.output.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn the_quota_and_the_body_cap_refuse_with_clear_errors() {
    let c = caller(MemoryConfig {
        max_entries: 2,
        max_body_bytes: 10,
        ..MemoryConfig::default()
    })
    .await;
    c.call("t", "a", "MemoryWrite", save("one", "x")).await;
    c.call("t", "a", "MemoryWrite", save("two", "x")).await;
    let full = c.call("t", "a", "MemoryWrite", save("three", "x")).await;
    assert!(full.is_error);
    assert_eq!(full.output["code"], "TOOL_QUOTA_EXCEEDED");
    let replaced = c.call("t", "a", "MemoryWrite", save("two", "y")).await;
    assert!(!replaced.is_error, "replacing does not need room");
    let big = c
        .call("t", "a", "MemoryWrite", save("four", "12345678901"))
        .await;
    assert!(big.is_error);
    assert!(error_text(&big).contains("at most 10"), "{}", big.output);
    let bad = c
        .call("t", "a", "MemoryWrite", save("Not A Slug", "x"))
        .await;
    assert!(bad.is_error);
    assert!(error_text(&bad).contains("Invalid memory name"));
    let missing = c
        .call(
            "t",
            "a",
            "MemoryWrite",
            json!({ "operation": "save", "name": "n" }),
        )
        .await;
    assert_eq!(
        missing.output["error"],
        "operation \"save\" needs description"
    );
}

#[tokio::test]
async fn memory_tools_exist_only_when_enabled_and_have_their_kinds() {
    let off = ToolsConfig {
        builtin_tools: true,
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .unwrap();
    assert!(off.get("MemoryRead").is_none());
    // Enabled, they come even without the other built-in tools, unless disallowed.
    let on = tools(MemoryConfig::default()).await;
    assert_eq!(on.get("MemoryRead").unwrap().effect(), ToolEffect::ReadOnly);
    assert_eq!(on.get("MemoryWrite").unwrap().effect(), ToolEffect::Edit);
    assert_eq!(
        on.get("MemoryWrite")
            .unwrap()
            .check(&save("style", "x"))
            .unwrap()
            .subject
            .as_deref(),
        Some("style")
    );
    let narrowed = ToolsConfig {
        memory: MemoryConfig {
            enabled: true,
            ..MemoryConfig::default()
        },
        disallowed_tools: vec!["MemoryWrite".into()],
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .unwrap();
    assert!(narrowed.get("MemoryRead").is_some());
    assert!(narrowed.get("MemoryWrite").is_none());
    // Without a store in the session, a clear error.
    let outcome = on
        .get("MemoryRead")
        .unwrap()
        .run(json!({ "operation": "list" }), ToolContext::detached())
        .await;
    assert_eq!(
        outcome.output["error"],
        "No memory store is available to this session"
    );
}
