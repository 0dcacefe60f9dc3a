//! MCP tool servers end to end: a real third-party MCP server (the reference servers' `everything`,
//! started by the test) behind the single-process server, driven over HTTP and SSE with the demo
//! model's `demo:tool NAME {json}`.

use std::time::Duration;

use crate::support::mcp_server::{EverythingServer, everything_entry};
use crate::support::tool_calls::{Call, call_tool, call_tool_traced, returned};
use crate::support::*;
use agent_runtime_executor::tools::ToolsConfig;
use agent_runtime_executor::tools::mcp::{McpServerConfig, McpTransport};
use serde_json::{Value, json};

fn everything(url: String) -> McpServerConfig {
    let mut server = McpServerConfig::new("everything", McpTransport::Http { url });
    // The test server is on loopback.
    server.allow_private_addresses = true;
    server.connect_timeout = Duration::from_secs(10);
    server.health_interval = Duration::from_millis(500);
    server
}

async fn server_with(servers: Vec<McpServerConfig>, tools: ToolsConfig) -> TestServer {
    let mut config = memory_config();
    config.tools = ToolsConfig {
        mcp_servers: servers,
        ..tools
    };
    TestServer::start(config).await
}

/// The `mcp_servers` entry of `readyz` for `server` (an admin's view).
async fn mcp_health(server: &TestServer, name: &str) -> Value {
    let (status, body) = server.readyz_as(TOKEN_ADMIN).await;
    assert_eq!(status, 200, "{body}");
    body["mcp_servers"]
        .as_array()
        .and_then(|list| list.iter().find(|s| s["server"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("readyz reports {name}: {body}"))
}

async fn wait_for_state(server: &TestServer, name: &str, state: &str) -> Value {
    for _ in 0..200 {
        let health = mcp_health(server, name).await;
        if health["state"] == state {
            return health;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{name} never became {state}: {}",
        mcp_health(server, name).await
    );
}

/// `mcp__everything__echo` with `message`.
async fn echo(server: &TestServer, session: &str, message: &str) -> Call {
    let input = json!({ "message": message });
    call_tool(server, session, "mcp__everything__echo", input).await
}

/// The count of ready servers on `/metrics` (the API listener's names no server).
async fn ready_servers_metric(server: &TestServer) -> String {
    let text = server.metrics_text().await;
    let series = "agent_runtime_mcp_servers{state=\"ready\"} ";
    text.lines()
        .find_map(|line| line.strip_prefix(series))
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
        .to_owned()
}

fn failed_with(call: &Call, name: &str) -> String {
    let prefix = format!("[demo] {name} failed: ");
    call.answer
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{name} fails: {}", call.answer))
        .to_owned()
}

/// The `{error, code}` of a failed MCP call, checked to be in the user's words: the server's
/// name, no SDK type or module names.
fn mcp_error(call: &Call, name: &str, server: &str) -> (String, String) {
    failed_with(call, name);
    let results = call.stream("tool_result");
    let output = &results[0]["data"]["output"];
    let error = output["error"].as_str().unwrap_or_default().to_owned();
    let code = output["code"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains(&format!("MCP server {server}")), "{output}");
    for internal in ["rmcp", "Transport [", "::", "Error {", "Some("] {
        assert!(!error.contains(internal), "{internal} in {error}");
    }
    (error, code)
}

#[tokio::test]
async fn tools_of_a_real_mcp_server_are_listed_called_and_mapped() {
    let mcp = EverythingServer::start().await;
    let server = server_with(vec![everything(mcp.url())], ToolsConfig::default()).await;
    let health = wait_for_state(&server, "everything", "ready").await;
    assert!(health["tools"].as_u64().unwrap() >= 5, "{health}");
    assert_eq!(health["profile"], "default");
    let session = server.create_session(TOKEN_A).await;

    // Text; `echo` says it is read-only and the server is trusted: no prompt.
    let echo = echo(&server, &session, "hi").await;
    assert_eq!(returned(&echo, "mcp__everything__echo"), json!("Echo: hi"));
    assert!(!echo.asked(), "a read-only MCP tool runs without asking");
    let sum = call_tool(
        &server,
        &session,
        "mcp__everything__get-sum",
        json!({ "a": 2, "b": 3 }),
    )
    .await;
    assert!(
        returned(&sum, "mcp__everything__get-sum")
            .as_str()
            .unwrap()
            .contains('5'),
        "{}",
        sum.answer
    );
    // An image becomes a placeholder between the text items.
    let image = call_tool(
        &server,
        &session,
        "mcp__everything__get-tiny-image",
        json!({}),
    )
    .await;
    let text = returned(&image, "mcp__everything__get-tiny-image");
    assert!(
        text.as_str().unwrap().contains("[image: image/png]"),
        "{text}"
    );
    // The server's `isError` is an error result.
    let error = call_tool(
        &server,
        &session,
        "mcp__everything__get-resource-reference",
        json!({ "resourceId": -5 }),
    )
    .await;
    failed_with(&error, "mcp__everything__get-resource-reference");
    // Its input schema is enforced before the server sees the call.
    let invalid = call_tool(&server, &session, "mcp__everything__echo", json!({})).await;
    assert!(
        failed_with(&invalid, "mcp__everything__echo").contains("Invalid input"),
        "{}",
        invalid.answer
    );
    // The tool's result reaches the stream as any tool's does.
    let results = echo.stream("tool_result");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["data"]["isError"], false);

    // Resources.
    let listed = call_tool(&server, &session, "ListMcpResources", json!({})).await;
    let listed: Value =
        serde_json::from_str(returned(&listed, "ListMcpResources").as_str().unwrap()).unwrap();
    let uris: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(
        uris.contains(&"demo://resource/static/document/architecture.md"),
        "{uris:?}"
    );
    let read = call_tool(
        &server,
        &session,
        "ReadMcpResource",
        json!({ "server": "everything", "uri": "demo://resource/static/document/architecture.md" }),
    )
    .await;
    assert!(
        returned(&read, "ReadMcpResource").as_str().unwrap().len() > 100,
        "{}",
        read.answer
    );
    let unknown = call_tool(
        &server,
        &session,
        "ReadMcpResource",
        json!({ "server": "everything", "uri": "demo://nothing/here" }),
    )
    .await;
    failed_with(&unknown, "ReadMcpResource");
    server.stop().await;
}

#[tokio::test]
async fn untrusted_annotations_ask_and_filters_hide_tools() {
    let mcp = EverythingServer::start().await;
    let mut untrusted = everything(mcp.url());
    untrusted.trust_annotations = false;
    let server = server_with(
        vec![untrusted],
        ToolsConfig {
            disallowed_tools: vec!["mcp__everything__get-sum".to_owned()],
            ..ToolsConfig::default()
        },
    )
    .await;
    wait_for_state(&server, "everything", "ready").await;
    let session = server.create_session(TOKEN_A).await;
    let echo = echo(&server, &session, "x").await;
    assert!(
        echo.asked(),
        "without trusted annotations every MCP tool asks"
    );
    let hidden = call_tool(
        &server,
        &session,
        "mcp__everything__get-sum",
        json!({ "a": 1, "b": 2 }),
    )
    .await;
    assert!(
        failed_with(&hidden, "mcp__everything__get-sum").contains("Unknown tool"),
        "{}",
        hidden.answer
    );
    server.stop().await;
}

#[tokio::test]
async fn a_server_that_disappears_fails_calls_and_is_used_again_when_it_returns() {
    let mut mcp = EverythingServer::start().await;
    let server = server_with(vec![everything(mcp.url())], ToolsConfig::default()).await;
    wait_for_state(&server, "everything", "ready").await;
    let session = server.create_session(TOKEN_A).await;
    let first = echo(&server, &session, "1").await;
    assert_eq!(returned(&first, "mcp__everything__echo"), json!("Echo: 1"));

    assert_eq!(ready_servers_metric(&server).await, "1");
    mcp.kill().await;
    let down = wait_for_state(&server, "everything", "unavailable").await;
    assert!(down["error"].is_string(), "{down}");
    assert_eq!(down["code"], "MCP_SERVER_UNAVAILABLE", "{down}");
    assert!(!down["error"].as_str().unwrap().contains("rmcp"), "{down}");
    assert_eq!(down["tools"], 0);
    assert_eq!(ready_servers_metric(&server).await, "0");
    // Its tools are not offered, but a call of one says why, not `Unknown tool`.
    let failed = echo(&server, &session, "2").await;
    let (error, code) = mcp_error(&failed, "mcp__everything__echo", "everything");
    assert_eq!(code, "MCP_SERVER_UNAVAILABLE");
    assert!(
        error.starts_with("the MCP server everything is unavailable"),
        "{error}"
    );

    mcp.restart().await;
    wait_for_state(&server, "everything", "ready").await;
    let again = echo(&server, &session, "3").await;
    assert_eq!(returned(&again, "mcp__everything__echo"), json!("Echo: 3"));
    server.stop().await;
}

#[tokio::test]
async fn a_slow_tool_hits_the_call_timeout() {
    let mcp = EverythingServer::start().await;
    let mut config = everything(mcp.url());
    config.call_timeout = Duration::from_millis(700);
    let server = server_with(vec![config], ToolsConfig::default()).await;
    wait_for_state(&server, "everything", "ready").await;
    let session = server.create_session(TOKEN_A).await;
    let slow = call_tool(
        &server,
        &session,
        "mcp__everything__trigger-long-running-operation",
        json!({ "duration": 30, "steps": 3 }),
    )
    .await;
    let error = failed_with(&slow, "mcp__everything__trigger-long-running-operation");
    assert!(error.contains("did not answer within"), "{error}");
    // The connection stays usable.
    let echo = echo(&server, &session, "ok").await;
    assert_eq!(returned(&echo, "mcp__everything__echo"), json!("Echo: ok"));
    server.stop().await;
}

#[tokio::test]
async fn a_server_on_a_private_address_is_refused_unless_allowed() {
    let mcp = EverythingServer::start().await;
    let mut config = everything(mcp.url());
    config.allow_private_addresses = false;
    let server = server_with(vec![config], ToolsConfig::default()).await;
    // A refusal of the configuration: it names the setting, and it is not retried as an outage.
    let health = wait_for_state(&server, "everything", "misconfigured").await;
    let error = health["error"].as_str().unwrap();
    assert!(error.contains("non-public address 127.0.0.1"), "{error}");
    assert!(error.contains("allow_private_addresses = true"), "{error}");
    assert_eq!(health["code"], "MCP_SERVER_MISCONFIGURED");
    let session = server.create_session(TOKEN_A).await;
    let call = echo(&server, &session, "x").await;
    let (error, code) = mcp_error(&call, "mcp__everything__echo", "everything");
    assert_eq!(code, "MCP_SERVER_MISCONFIGURED");
    assert!(error.contains("allow_private_addresses"), "{error}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        mcp_health(&server, "everything").await["state"],
        "misconfigured"
    );
    // A metadata address is refused even when private addresses are allowed.
    let mut metadata = everything("http://169.254.169.254/mcp".to_owned());
    metadata.name = "metadata".to_owned();
    let other = server_with(vec![metadata], ToolsConfig::default()).await;
    let health = wait_for_state(&other, "metadata", "misconfigured").await;
    let error = health["error"].as_str().unwrap();
    assert!(error.contains("metadata"), "{health}");
    assert!(!error.contains("allow_private_addresses"), "{health}");
    server.stop().await;
    other.stop().await;
}

fn stdio_everything() -> McpServerConfig {
    let command = format!("exec node {} stdio", everything_entry().display());
    let mut server = McpServerConfig::new(
        "local",
        McpTransport::Stdio {
            command,
            cwd: None,
            env: Vec::new(),
        },
    );
    server.health_interval = Duration::from_millis(500);
    server
}

#[tokio::test]
async fn a_stdio_server_runs_only_when_the_operator_opts_in() {
    let refused = ToolsConfig {
        mcp_servers: vec![stdio_everything()],
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .expect_err("stdio needs the opt-in");
    assert!(refused.to_string().contains("mcp_allow_stdio"), "{refused}");

    let server = server_with(
        vec![stdio_everything()],
        ToolsConfig {
            mcp_allow_stdio: true,
            ..ToolsConfig::default()
        },
    )
    .await;
    wait_for_state(&server, "local", "ready").await;
    let session = server.create_session(TOKEN_A).await;
    let echo = call_tool(
        &server,
        &session,
        "mcp__local__echo",
        json!({ "message": "stdio" }),
    )
    .await;
    assert_eq!(returned(&echo, "mcp__local__echo"), json!("Echo: stdio"));
    // The child's environment is scrubbed: it does not see ours.
    let env = call_tool(&server, &session, "mcp__local__get-env", json!({})).await;
    let env = returned(&env, "mcp__local__get-env");
    assert!(
        !env.as_str().unwrap().contains("CARGO_MANIFEST_DIR"),
        "the stdio server sees only a scrubbed environment: {env}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_stdio_server_runs_inside_the_sandbox_when_it_is_enabled() {
    let package = everything_entry()
        .ancestors()
        .nth(5)
        .expect("tests/mcp-server")
        .to_path_buf();
    let mut sandboxed = McpServerConfig::new(
        "boxed",
        McpTransport::Stdio {
            // Relative to its working directory: only that, the system directories and a
            // private /tmp are visible inside.
            command:
                "exec node node_modules/@modelcontextprotocol/server-everything/dist/index.js stdio"
                    .to_owned(),
            cwd: Some(package),
            env: Vec::new(),
        },
    );
    sandboxed.health_interval = Duration::from_millis(500);
    let mut tools = ToolsConfig {
        mcp_allow_stdio: true,
        ..ToolsConfig::default()
    };
    tools.sandbox.enabled = true;
    let server = server_with(vec![sandboxed], tools).await;
    wait_for_state(&server, "boxed", "ready").await;
    let session = server.create_session(TOKEN_A).await;
    let env = call_tool(&server, &session, "mcp__boxed__get-env", json!({})).await;
    let env: Value =
        serde_json::from_str(returned(&env, "mcp__boxed__get-env").as_str().unwrap()).unwrap();
    let names: Vec<&String> = env.as_object().unwrap().keys().collect();
    assert!(
        names.iter().all(
            |name| ["PATH", "HOME", "LANG", "PWD", "SHLVL", "_", "OLDPWD"].contains(&name.as_str())
        ),
        "{names:?}"
    );
    server.stop().await;
}

fn hostile(url: String) -> McpServerConfig {
    let mut server = McpServerConfig::new("hostile", McpTransport::Http { url });
    server.allow_private_addresses = true;
    server.call_timeout = Duration::from_millis(800);
    server.health_interval = Duration::from_millis(500);
    server
}

#[tokio::test]
async fn a_hostile_servers_lies_and_floods_stay_bounded() {
    use crate::support::hostile_mcp::{BIG_BYTES, HostileServer};
    let bad = HostileServer::start().await;
    let server = server_with(vec![hostile(bad.url())], ToolsConfig::default()).await;
    let health = wait_for_state(&server, "hostile", "ready").await;
    // Offered: huge, big, slow, odd, wordy, the dotted one (renamed), meta and strict; not the
    // one whose name is too long, the one whose input is not an object, nor the one whose schema
    // is not even a JSON object (left out alone: the rest of the list stands).
    assert_eq!(health["tools"], 8, "{health}");
    let session = server.create_session(TOKEN_A).await;
    let call = |name: &str, input: Value| {
        let name = format!("mcp__hostile__{name}");
        let server = &server;
        let session = session.clone();
        async move { call_tool(server, &session, &name, input).await }
    };

    // A message past the cap fails the call readably; the connection stays usable.
    let huge = call("huge", json!({})).await;
    let (error, code) = mcp_error(&huge, "mcp__hostile__huge", "hostile");
    assert_eq!(code, "MCP_MESSAGE_TOO_LARGE", "{error}");
    assert!(!error.contains("hhhhhhhh"), "no flood in the error");
    assert!(error.len() < 4_000, "{}", error.len());
    // Under the cap, the output is cut at max_output_bytes with a visible marker.
    let big = call("big", json!({})).await;
    let text = returned(&big, "mcp__hostile__big");
    let text = text.as_str().unwrap();
    assert!(text.len() < BIG_BYTES / 2, "{}", text.len());
    assert!(text.contains("output truncated"));
    // A call that never answers ends at the call timeout.
    let slow = call("slow", json!({})).await;
    let (error, code) = mcp_error(&slow, "mcp__hostile__slow", "hostile");
    assert_eq!(code, "MCP_TIMEOUT");
    assert!(error.contains("did not answer within"), "{error}");
    // Content of a type the protocol does not have is refused as a malformed answer.
    let odd = call("odd", json!({})).await;
    let (error, code) = mcp_error(&odd, "mcp__hostile__odd", "hostile");
    assert_eq!(code, "MCP_PROTOCOL_ERROR", "{error}");
    assert!(error.contains("does not follow MCP"), "{error}");
    // The server's schema is enforced on the model's input.
    let strict = call("strict", json!({ "n": "seven" })).await;
    assert!(failed_with(&strict, "mcp__hostile__strict").contains("Invalid input"));
    let strict = call("strict", json!({ "n": 7 })).await;
    assert_eq!(returned(&strict, "mcp__hostile__strict"), json!("n = 7"));
    // What was not offered cannot be called.
    let scalar = call("scalar", json!({})).await;
    assert!(failed_with(&scalar, "mcp__hostile__scalar").contains("Unknown tool"));
    let health = mcp_health(&server, "hostile").await;
    assert_eq!(health["state"], "ready", "{health}");
    server.stop().await;
}

#[tokio::test]
async fn a_tool_list_that_changes_at_run_time_is_picked_up() {
    use crate::support::hostile_mcp::HostileServer;
    use std::sync::atomic::Ordering;
    let bad = HostileServer::start().await;
    let server = server_with(vec![hostile(bad.url())], ToolsConfig::default()).await;
    assert_eq!(
        wait_for_state(&server, "hostile", "ready").await["tools"],
        8
    );
    let session = server.create_session(TOKEN_A).await;
    let before = call_tool(&server, &session, "mcp__hostile__late", json!({})).await;
    assert!(failed_with(&before, "mcp__hostile__late").contains("Unknown tool"));
    bad.state.late.store(true, Ordering::SeqCst);
    for _ in 0..100 {
        if mcp_health(&server, "hostile").await["tools"] == 9 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = call_tool(&server, &session, "mcp__hostile__late", json!({})).await;
    assert_eq!(returned(&after, "mcp__hostile__late"), json!("ok"));
    server.stop().await;
}

/// A traced request's MCP calls carry its trace context as `_meta.traceparent` (MCP SEP-414):
/// the client's trace id, the executor's span as the parent; never the client's `tracestate`.
#[tokio::test]
async fn a_traced_calls_trace_context_reaches_the_mcp_server_in_meta() {
    use crate::support::hostile_mcp::HostileServer;
    const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mcp = HostileServer::start().await;
    let server = server_with(vec![hostile(mcp.url())], ToolsConfig::default()).await;
    wait_for_state(&server, "hostile", "ready").await;
    let session = server.create_session(TOKEN_A).await;
    let call = call_tool_traced(
        &server,
        &session,
        "mcp__hostile__meta",
        json!({}),
        &format!("00-{TRACE_ID}-00f067aa0ba902b7-01"),
        "vendor=secret-state",
    )
    .await;
    // The tool answers the `_meta` object as its text.
    let text = returned(&call, "mcp__hostile__meta");
    let meta: Value = serde_json::from_str(text.as_str().unwrap()).unwrap();
    let traceparent = meta["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("{meta}"));
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!((parts[0], parts[1], parts[3]), ("00", TRACE_ID, "01"));
    assert_ne!(
        parts[2], "00f067aa0ba902b7",
        "the parent is the executor's span"
    );
    assert!(meta.get("tracestate").is_none(), "{meta}");

    // Without the client's trace context the gateway starts a trace: another trace id.
    let call = call_tool(&server, &session, "mcp__hostile__meta", json!({})).await;
    let text = returned(&call, "mcp__hostile__meta");
    let meta: Value = serde_json::from_str(text.as_str().unwrap()).unwrap();
    let traceparent = meta["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("{meta}"));
    assert!(!traceparent.contains(TRACE_ID), "{traceparent}");
    server.stop().await;
}

#[tokio::test]
async fn a_long_mcp_tool_reports_its_progress_as_tool_progress() {
    let mcp = EverythingServer::start().await;
    let server = server_with(vec![everything(mcp.url())], ToolsConfig::default()).await;
    wait_for_state(&server, "everything", "ready").await;
    let session = server.create_session(TOKEN_A).await;
    let name = "mcp__everything__trigger-long-running-operation";
    let call = call_tool(
        &server,
        &session,
        name,
        json!({ "duration": 1, "steps": 4 }),
    )
    .await;
    let done = returned(&call, name);
    assert!(done.as_str().unwrap().contains("completed"), "{done}");
    let progress: Vec<(u64, u64)> = call
        .stream("tool_progress")
        .iter()
        .map(|event| &event["data"]["progress"])
        .filter(|progress| progress["total"].is_number())
        .map(|progress| {
            let count = |key: &str| progress[key].as_f64().unwrap() as u64;
            (count("completed"), count("total"))
        })
        .collect();
    assert_eq!(progress, [(1, 4), (2, 4), (3, 4), (4, 4)]);
    for event in call.stream("tool_progress") {
        assert_eq!(event["data"]["name"], name);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_server_down_since_start_up_answers_unavailable_in_plain_words() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = everything(format!("http://127.0.0.1:{port}/mcp"));
    config.connect_timeout = Duration::from_secs(2);
    let server = server_with(vec![config], ToolsConfig::default()).await;
    let health = wait_for_state(&server, "everything", "unavailable").await;
    assert_eq!(health["code"], "MCP_SERVER_UNAVAILABLE", "{health}");
    let error = health["error"].as_str().unwrap();
    assert!(
        error.starts_with("the MCP server everything cannot be connected"),
        "{error}"
    );
    for internal in ["rmcp", "Transport [", "::"] {
        assert!(!error.contains(internal), "{internal} in {error}");
    }
    let session = server.create_session(TOKEN_A).await;
    let call = echo(&server, &session, "x").await;
    let (error, code) = mcp_error(&call, "mcp__everything__echo", "everything");
    assert_eq!(code, "MCP_SERVER_UNAVAILABLE");
    assert!(
        error.starts_with("the MCP server everything is unavailable"),
        "{error}"
    );
    // A name of no configured server is still unknown.
    let other = call_tool(&server, &session, "mcp__nobody__echo", json!({})).await;
    assert!(failed_with(&other, "mcp__nobody__echo").contains("Unknown tool"));
    server.stop().await;
}

#[tokio::test]
async fn tool_lists_whose_pages_never_end_are_read_to_a_bound() {
    use crate::support::hostile_mcp::{HostileServer, PAGES_ENDLESS, PAGES_REPEAT};
    use std::sync::atomic::Ordering;
    for (pages, most) in [(PAGES_REPEAT, 2), (PAGES_ENDLESS, 100)] {
        let bad = HostileServer::start().await;
        bad.state.pages.store(pages, Ordering::SeqCst);
        let mut config = hostile(bad.url());
        // One listing, the first: no health check in between.
        config.health_interval = Duration::from_secs(3600);
        let server = server_with(vec![config], ToolsConfig::default()).await;
        let health = wait_for_state(&server, "hostile", "ready").await;
        assert!(health["tools"].as_u64().unwrap() >= 8, "{health}");
        let lists = bad.state.tool_lists.load(Ordering::SeqCst);
        assert!(lists <= most, "{lists} tools/list requests for one listing");
        server.stop().await;
    }
}

/// A stdio MCP server (a short Python script) whose `tools/call` answer is one line of 2 MB,
/// over a `max_message_bytes` of 64 KiB.
fn flooding_stdio_server() -> McpServerConfig {
    let script = r#"
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "flood", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "flood", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "f" * 2_000_000}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;
    let mut server = McpServerConfig::new(
        "flood",
        McpTransport::Stdio {
            command: format!("exec python3 -c '{script}'"),
            cwd: None,
            env: Vec::new(),
        },
    );
    server.max_message_bytes = 64 << 10;
    // Far longer than the test: a call that waited for it would answer "did not answer".
    server.call_timeout = Duration::from_secs(120);
    server.health_interval = Duration::from_secs(3600);
    server
}

#[tokio::test]
async fn an_oversized_stdio_line_fails_the_call_at_once_with_its_reason() {
    let tools = ToolsConfig {
        mcp_allow_stdio: true,
        ..ToolsConfig::default()
    };
    let server = server_with(vec![flooding_stdio_server()], tools).await;
    wait_for_state(&server, "flood", "ready").await;
    let session = server.create_session(TOKEN_A).await;
    let call = call_tool(&server, &session, "mcp__flood__flood", json!({})).await;
    let (error, code) = mcp_error(&call, "mcp__flood__flood", "flood");
    assert_eq!(code, "MCP_MESSAGE_TOO_LARGE", "{error}");
    assert!(
        error.contains("over max_message_bytes (65536 bytes)"),
        "{error}"
    );
    assert!(!error.contains("fff"), "no flood in the error");
    server.stop().await;
}
