//! Per-tenant agent profiles end to end: two tenants on one server, one on the top-level
//! configuration and one on a profile with another model, key, tool set, roots and memory, driven
//! by a real OpenAI-compatible model server on loopback. Neither tenant's model calls carry the
//! other's key or model, list the other's tools, or reach the other's root; the profile recorded
//! with a session survives a restart (the path a handoff takes: another executor loads the session
//! from the store) even when the tenant mapping changes. JSONL here, PostgreSQL in the rerun.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::support::*;
use agent_runtime_cli::config::ProfileConfig;
use agent_runtime_executor::permissions::PermissionPolicy;
use agent_runtime_executor::provider::{ProviderConfig, ProviderKind};
use agent_runtime_executor::tools::{MemoryConfig, ToolsConfig};
use serde_json::{Value, json};

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

/// Answers `read PATH` with a `Read` call of PATH, `skill NAME` with a `Skill` call of NAME,
/// and anything else (a tool result included) with text.
fn answer(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    let text = last["content"].as_str().unwrap_or_default().to_owned();
    let call = |name: &str, arguments: Value| {
        let arguments = arguments.to_string();
        chunk(
            json!({ "role": "assistant", "tool_calls": [{ "index": 0, "id": "call_1",
                "type": "function", "function": { "name": name, "arguments": arguments } }] }),
            None,
        ) + &chunk(json!({}), Some("tool_calls"))
    };
    let user = last["role"] == "user";
    let mut out = match (text.strip_prefix("read "), text.strip_prefix("skill ")) {
        (Some(path), _) if user => call("Read", json!({ "file_path": path })),
        (_, Some(skill)) if user => call("Skill", json!({ "skill": skill })),
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
    let read = server.read(token, session).await;
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
    let read = server.read(TOKEN_A, &session_a).await;
    assert!(
        !read.to_string().contains("acme"),
        "the profile is never shown to clients: {read}"
    );
    server.stop().await;
}

/// A skill the operator gave a `model` switches the session's model calls to it while it is
/// active (the provider's endpoint and key stay); a profile without that skill cannot load it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_with_a_model_switches_the_sessions_model_only_where_the_profile_has_it() {
    use agent_runtime::protocol::stream::PatchScope;
    use agent_runtime_executor::tools::SkillDefinition;
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("key");
    std::fs::write(&key, "sk-key").unwrap();
    let (seen, base_url) = model_server().await;
    let mut config = durable_config(dir.path()).await;
    config.provider = provider(&base_url, "model-base", &key);
    config.tools.skills = vec![SkillDefinition {
        name: "deep-think".into(),
        description: "Thinks harder.".into(),
        instructions: "Think step by step.".into(),
        allowed_tools: None,
        disallowed_tools: Vec::new(),
        scope: PatchScope::Session,
        system_prompt_append: None,
        model: Some("model-deep".into()),
    }];
    config.profiles = vec![ProfileConfig {
        name: "no-skills".into(),
        tenants: vec!["tenant-b".into()],
        provider: provider(&base_url, "model-base", &key),
        tools: ToolsConfig::default(),
        permissions: PermissionPolicy::default(),
    }];
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    let loaded = run(&server, TOKEN_A, &session, "skill deep-think").await;
    let patch = loaded
        .iter()
        .find(|e| stream_type(e) == Some("tool_runtime_patch"))
        .map(|e| e["data"]["patch"].clone())
        .expect("a runtime patch");
    assert_eq!(patch["modelOverride"], json!({ "modelId": "model-deep" }));
    run(&server, TOKEN_A, &session, "hello").await;
    let models: Vec<String> = seen.lock().unwrap().drain(..).map(|c| c.model).collect();
    assert_eq!(models, ["model-base", "model-deep", "model-deep"]);

    let other = server.create_session(TOKEN_B).await;
    let refused = run(&server, TOKEN_B, &other, "skill deep-think").await;
    assert_eq!(
        tool_result(&refused)["isError"],
        true,
        "tenant-b's profile has no skills"
    );
    let models: Vec<String> = seen.lock().unwrap().drain(..).map(|c| c.model).collect();
    assert_eq!(models, ["model-base", "model-base"]);
    server.stop().await;
}

/// A cluster executor with the demo model whose default profile has only the demo tool, and
/// `profiles` (each with `Read` beneath `root`).
async fn profiled_executor(
    store: &Arc<dyn agent_runtime_store::Store>,
    clock: &agent_runtime::clock::SharedClock,
    id: &str,
    root: &Path,
    profiles: &[(&str, &[&str])],
) -> agent_runtime_cli::cluster::RunningExecutor {
    use agent_runtime_executor::profiles::AgentProfile;
    use agent_runtime_executor::provider::DemoProvider;
    use agent_runtime_executor::tools::{DemoApprovalTool, Tool, ToolRegistry};
    let demo = || -> Arc<dyn agent_runtime_executor::provider::ModelProvider> {
        Arc::new(DemoProvider {
            slow_delta_interval: std::time::Duration::from_millis(1),
        })
    };
    let mut built = Vec::new();
    for (name, tenants) in profiles {
        let tools = tools(root, &["Read"], false)
            .build(vec![Arc::new(DemoApprovalTool) as Arc<dyn Tool>])
            .await
            .unwrap();
        built.push(AgentProfile {
            name: (*name).to_owned(),
            tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
            provider: demo(),
            tools,
            permissions: PermissionPolicy::default(),
        });
    }
    let runtime = agent_runtime_cli::serve::AgentRuntime {
        provider: demo(),
        tools: ToolRegistry::demo(),
        profiles: built,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = crate::support::executors::executor_config(id, address, CLUSTER_SECRET);
    agent_runtime_cli::cluster::start_executor(
        config,
        &Default::default(),
        runtime,
        store.clone(),
        clock.clone(),
        listener,
    )
    .await
    .unwrap()
}

const CLUSTER_SECRET: &str = "cluster-secret-for-profile-tests";

/// In a cluster, the executor that takes a session over after a handoff runs it with the profile
/// it was created with, even when its own tenant mapping sends the tenant elsewhere; another
/// tenant (on the default profile) never gets the profile's tools. On the memory store and (in
/// the rerun) PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handoff_keeps_a_sessions_profile_and_the_other_tenant_never_gets_its_tools() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "tenant a's file").unwrap();
    let store = selected_store(DEFAULT_RETENTION).await;
    let clock = agent_runtime::clock::system();
    let first = profiled_executor(
        &store,
        &clock,
        "executor-1",
        &root,
        &[("acme", &["tenant-a"])],
    )
    .await;
    let gateway = crate::support::executors::start_test_gateway(
        crate::support::executors::gateway_config(),
        store.clone(),
        &clock,
        CLUSTER_SECRET,
    )
    .await;
    let read = json!({ "file_path": root.join("a.txt") });
    let session = gateway.create_session(TOKEN_A).await;
    let before =
        crate::support::tool_calls::call_tool(&gateway, &session, "Read", read.clone()).await;
    assert!(
        before.answer.contains("tenant a's file"),
        "{}",
        before.answer
    );
    let other = gateway.create_session(TOKEN_B).await;
    let refused =
        crate::support::tool_calls::call_tool_as(&gateway, TOKEN_B, &other, "Read", read.clone())
            .await;
    assert!(
        refused.answer.starts_with("[demo] Read failed: ")
            && refused.answer.contains("Unknown tool"),
        "the default profile has no Read: {}",
        refused.answer
    );

    // The second executor maps tenant-a to another profile: after the handoff the session still
    // runs with the recorded "acme", while a new session of tenant-a gets "acme-next".
    let second = profiled_executor(
        &store,
        &clock,
        "executor-2",
        &root,
        &[("acme", &["tenant-x"]), ("acme-next", &["tenant-a"])],
    )
    .await;
    first.shutdown();
    first.wait().await.unwrap();
    let after = crate::support::tool_calls::call_tool(&gateway, &session, "Read", read).await;
    assert!(after.answer.contains("tenant a's file"), "{}", after.answer);
    let stored = store
        .get_session("tenant-a", &session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.profile.as_deref(), Some("acme"));
    let fresh = gateway.create_session(TOKEN_A).await;
    let stored = store
        .get_session("tenant-a", &fresh)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.profile.as_deref(), Some("acme-next"));
    gateway.stop().await;
    second.shutdown();
    second.wait().await.unwrap();
}
