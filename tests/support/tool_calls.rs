//! Driving built-in tools end to end without a model: the demo model's `demo:tool NAME {json}`
//! trigger over HTTP and SSE, answering the permission prompts it raises.

use std::path::Path;

use agent_runtime_executor::tools::ToolsConfig;
use serde_json::{Value, json};

use super::*;

/// A server with the built-in tools on, rooted at `root`, in the default permission mode.
pub async fn server_with_tools(root: &Path) -> TestServer {
    let mut config = memory_config();
    config.tools = ToolsConfig {
        builtin_tools: true,
        roots: vec![root.to_path_buf()],
        ..ToolsConfig::default()
    };
    TestServer::start(config).await
}

/// What one `demo:tool` request did.
pub struct Call {
    pub events: Vec<Value>,
    /// The demo model's answer: `[demo] NAME returned: …` or `[demo] NAME failed: …`.
    pub answer: String,
}

impl Call {
    pub fn stream(&self, kind: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| stream_type(e) == Some(kind))
            .collect()
    }

    pub fn asked(&self) -> bool {
        self.events
            .iter()
            .any(|e| e["type"] == "permission.requested")
    }
}

/// Submits `demo:tool NAME input`, approves every permission it asks (`scope: "once"`), and waits
/// for its result.
pub async fn call_tool(server: &TestServer, session: &str, name: &str, input: Value) -> Call {
    call_tool_answering(
        server,
        session,
        name,
        input,
        |_| json!({ "approved": true, "scope": "once" }),
    )
    .await
}

/// [`call_tool`] as the principal of `token`.
pub async fn call_tool_as(
    server: &TestServer,
    token: &str,
    session: &str,
    name: &str,
    input: Value,
) -> Call {
    call_tool_answering_as(
        server,
        token,
        session,
        name,
        input,
        |_| json!({ "approved": true, "scope": "once" }),
        None,
    )
    .await
}

/// Like [`call_tool`], answering each `permission.requested` (its `data`) with the fields
/// `answer` gives it.
pub async fn call_tool_answering(
    server: &TestServer,
    session: &str,
    name: &str,
    input: Value,
    answer: impl Fn(&Value) -> Value,
) -> Call {
    call_tool_answering_as(server, TOKEN_A, session, name, input, answer, None).await
}

/// [`call_tool`] submitted with a W3C trace context (`traceparent`, `tracestate` headers).
pub async fn call_tool_traced(
    server: &TestServer,
    session: &str,
    name: &str,
    input: Value,
    traceparent: &str,
    tracestate: &str,
) -> Call {
    let approve = |_: &Value| json!({ "approved": true, "scope": "once" });
    let trace = Some((traceparent, tracestate));
    call_tool_answering_as(server, TOKEN_A, session, name, input, approve, trace).await
}

/// `input.submit` of `text`, with the trace context headers when given; returns its `data`.
async fn submit(
    server: &TestServer,
    token: &str,
    session: &str,
    text: &str,
    trace: Option<(&str, &str)>,
) -> Value {
    let Some((traceparent, tracestate)) = trace else {
        return server.submit(token, session, text).await;
    };
    let body = json!({
        "protocolVersion": 1,
        "commandId": agent_runtime::ids::nanoid(),
        "type": "input.submit",
        "data": { "sessionId": session, "input": text },
    });
    let response = server
        .client
        .post(format!("{}/commands", server.base))
        .header("authorization", format!("Bearer {token}"))
        .header("traceparent", traceparent)
        .header("tracestate", tracestate)
        .json(&body)
        .send()
        .await
        .unwrap();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    answer["data"].clone()
}

async fn call_tool_answering_as(
    server: &TestServer,
    token: &str,
    session: &str,
    name: &str,
    input: Value,
    answer: impl Fn(&Value) -> Value,
    trace: Option<(&str, &str)>,
) -> Call {
    let read = server.read(token, session).await;
    // The read's cursor is where a client resumes to miss nothing next to the transcript it read;
    // it may lie before the end of the previous request. This request's events start with the
    // first one carrying its request id (`permission.requested` carries none, but only the running
    // request asks).
    let mut after = read["recovery"]["lastEventSequence"].as_u64().unwrap_or(0);
    let submitted = submit(
        server,
        token,
        session,
        &format!("demo:tool {name} {input}"),
        trace,
    )
    .await;
    let request_id = submitted["requestId"].clone();
    let started = std::cell::Cell::new(false);
    let mut events = Vec::new();
    loop {
        let batch = server
            .collect_events(token, session, after, |e| {
                if e["requestId"] == request_id {
                    started.set(true);
                }
                started.get() && (is_result(e) || e["type"] == "permission.requested")
            })
            .await;
        let last = batch.last().expect("events arrive").clone();
        after = last["sequence"].as_u64().unwrap();
        events.extend(batch);
        if is_result(&last) {
            break;
        }
        let mut resolve = answer(&last["data"]);
        resolve["sessionId"] = json!(session);
        resolve["permissionRequestId"] = last["data"]["permissionRequestId"].clone();
        server.ok(token, "permission.resolve", resolve).await;
    }
    let first = events
        .iter()
        .position(|e| e["requestId"] == request_id)
        .unwrap_or(0);
    events.drain(..first);
    let answer = events.last().unwrap()["data"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Call { events, answer }
}

/// The JSON a `[demo] NAME returned: …` answer carries.
pub fn returned(call: &Call, name: &str) -> Value {
    let prefix = format!("[demo] {name} returned: ");
    let json = call
        .answer
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{name} succeeds: {}", call.answer));
    serde_json::from_str(json).unwrap()
}
