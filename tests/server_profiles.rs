//! Per-tenant agent profiles (issue 22 item 9) end to end: two tenants on one server, one on the
//! top-level configuration and one on a profile with another model, key, tool set, roots and
//! memory, driven by a real OpenAI-compatible model server on loopback. Neither tenant's model
//! calls carry the other's key or model, list the other's tools, or reach the other's root; the
//! profile recorded with a session survives a restart (the path a handoff takes: another executor
//! loads the session from the store) even when the tenant mapping changes. JSONL here,
//! PostgreSQL in the rerun.

mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use agent_runtime_cli::config::ProfileConfig;
use agent_runtime_executor::permissions::PermissionPolicy;
use agent_runtime_executor::provider::{ProviderConfig, ProviderKind};
use agent_runtime_executor::tools::{MemoryConfig, ToolsConfig};
use serde_json::{Value, json};
use support::*;

/// What the model server saw of one call: the bearer key, the model and the offered tools.
#[derive(Clone, Debug)]
struct SeenCall {
    authorization: String,
    model: String,
    tools: Vec<String>,
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({ "id": "c1", "object": "chat.completion.chunk",
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] });
    format!("data: {body}\n\n")
}

/// Answers `read PATH` with a `Read` call of PATH, and anything after a tool result with text.
fn answer(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    let text = last["content"].to_string();
    let mut out = match text.find("read ") {
        Some(at) if last["role"] == "user" => {
            let path = text[at + 5..].trim_end_matches('"').to_owned();
            let arguments = json!({ "file_path": path }).to_string();
            chunk(
                json!({ "role": "assistant", "tool_calls": [{ "index": 0, "id": "call_1",
                    "type": "function", "function": { "name": "Read", "arguments": arguments } }] }),
                None,
            ) + &chunk(json!({}), Some("tool_calls"))
        }
        _ => {
            chunk(json!({ "role": "assistant", "content": "done" }), None)
                + &chunk(json!({}), Some("stop"))
        }
    };
    out.push_str("data: [DONE]\n\n");
    out
}

async fn model_server() -> (Arc<Mutex<Vec<SeenCall>>>, String) {
    let seen: Arc<Mutex<Vec<SeenCall>>> = Arc::default();
    let record = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let record = Arc::clone(&record);
                async move {
                    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let tools = body["tools"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                        .collect();
                    record.lock().unwrap().push(SeenCall {
                        authorization: headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned(),
                        model: body["model"].as_str().unwrap_or_default().to_owned(),
                        tools,
                    });
                    ([("content-type", "text/event-stream")], answer(&body))
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (seen, format!("http://{address}/v1"))
}

fn provider(base_url: &str, model: &str, key_file: &Path) -> ProviderConfig {
    ProviderConfig {
        kind: ProviderKind::OpenAi,
        model: Some(model.to_owned()),
        base_url: Some(base_url.to_owned()),
        api_key_file: Some(key_file.to_path_buf()),
        ..ProviderConfig::default()
    }
}

fn tools(root: &Path, allowed: &[&str], memory: bool) -> ToolsConfig {
    ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(allowed.iter().map(|t| (*t).to_owned()).collect()),
        roots: vec![root.to_path_buf()],
        memory: MemoryConfig {
            enabled: memory,
            ..MemoryConfig::default()
        },
        ..ToolsConfig::default()
    }
}

/// Submits `text` and returns the request's events up to its result.
async fn run(server: &TestServer, token: &str, session: &str, text: &str) -> Vec<Value> {
    let read = server
        .ok(token, "session.read", json!({ "sessionId": session }))
        .await;
    let after = read["recovery"]["lastEventSequence"].as_u64().unwrap_or(0);
    server.submit(token, session, text).await;
    server
        .collect_events(token, session, after, is_result)
        .await
}

fn tool_result(events: &[Value]) -> Value {
    events
        .iter()
        .find(|e| stream_type(e) == Some("tool_result"))
        .map(|e| e["data"].clone())
        .expect("a tool_result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_run_with_their_own_profiles_and_a_session_keeps_its_profile() {
    let dir = tempfile::tempdir().unwrap();
    let roots = tempfile::tempdir().unwrap();
    let root_a = roots.path().join("a");
    let root_b = roots.path().join("b");
    for root in [&root_a, &root_b] {
        std::fs::create_dir_all(root).unwrap();
    }
    let root_a = root_a.canonicalize().unwrap();
    let root_b = root_b.canonicalize().unwrap();
    std::fs::write(root_a.join("a.txt"), "tenant a's file").unwrap();
    std::fs::write(root_b.join("b.txt"), "tenant b's file").unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = |name: &str| {
        let path = keys.path().join(name);
        std::fs::write(&path, format!("sk-{name}")).unwrap();
        path
    };
    let (seen, base_url) = model_server().await;

    let mut config = durable_config(dir.path()).await;
    // The top-level configuration: tenant-b's (every tenant without a profile).
    config.provider = provider(&base_url, "model-b", &key("key-b"));
    config.tools = tools(&root_b, &["Read", "Glob", "Grep"], false);
    let acme = |name: &str, model: &str, tenants: &[&str]| ProfileConfig {
        name: name.to_owned(),
        tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
        provider: provider(&base_url, model, &key(&format!("key-{name}"))),
        tools: tools(&root_a, &["Read", "MemoryRead", "MemoryWrite"], true),
        permissions: PermissionPolicy::default(),
    };
    config.profiles = vec![acme("acme", "model-a", &["tenant-a"])];
    let server = TestServer::start(config.clone()).await;

    let session_a = server.create_session(TOKEN_A).await;
    let session_b = server.create_session(TOKEN_B).await;
    let own = run(
        &server,
        TOKEN_A,
        &session_a,
        &format!("read {}", root_a.join("a.txt").display()),
    )
    .await;
    assert_eq!(tool_result(&own)["isError"], false, "{own:?}");
    let foreign = run(
        &server,
        TOKEN_A,
        &session_a,
        &format!("read {}", root_b.join("b.txt").display()),
    )
    .await;
    let refused = tool_result(&foreign);
    assert_eq!(
        refused["isError"], true,
        "tenant-a cannot reach tenant-b's root"
    );
    let b_reads_a = run(
        &server,
        TOKEN_B,
        &session_b,
        &format!("read {}", root_a.join("a.txt").display()),
    )
    .await;
    assert_eq!(
        tool_result(&b_reads_a)["isError"],
        true,
        "tenant-b cannot reach tenant-a's root"
    );
    for event in own.iter().chain(&foreign).chain(&b_reads_a) {
        assert!(
            !event.to_string().contains("tenant b's file"),
            "no file of the other tenant leaks: {event}"
        );
    }

    {
        let calls = seen.lock().unwrap();
        let (a_calls, b_calls): (Vec<&SeenCall>, Vec<&SeenCall>) =
            calls.iter().partition(|c| c.model == "model-a");
        assert_eq!(a_calls.len(), 4, "{calls:?}");
        assert_eq!(b_calls.len(), 2, "{calls:?}");
        for call in &a_calls {
            assert_eq!(call.authorization, "Bearer sk-key-acme");
            assert_eq!(call.tools, ["MemoryRead", "MemoryWrite", "Read"]);
        }
        for call in &b_calls {
            assert_eq!(call.model, "model-b");
            assert_eq!(call.authorization, "Bearer sk-key-b");
            assert_eq!(
                call.tools,
                ["Glob", "Grep", "Read"],
                "no memory tools for tenant-b"
            );
        }
    }
    server.stop().await;

    // The operator moves tenant-a to a new profile: its existing session keeps the one it was
    // created with; a new session gets the new one.
    config.profiles = vec![
        acme("acme", "model-a", &["tenant-x"]),
        acme("acme-next", "model-a-next", &["tenant-a"]),
    ];
    let server = TestServer::start(config).await;
    seen.lock().unwrap().clear();
    run(&server, TOKEN_A, &session_a, "hello again").await;
    let fresh = server.create_session(TOKEN_A).await;
    run(&server, TOKEN_A, &fresh, "hello").await;
    let models: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.model.clone())
        .collect();
    assert_eq!(models, ["model-a", "model-a-next"]);
    let read = server
        .ok(TOKEN_A, "session.read", json!({ "sessionId": session_a }))
        .await;
    assert!(
        !read.to_string().contains("acme"),
        "the profile is never shown to clients: {read}"
    );
    server.stop().await;
}
