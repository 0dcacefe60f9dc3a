//! What one event carries (docs/protocol.md §6.5), from real server output: a model asks for a
//! tool call with 5 MiB of input, then answers with 1.5 M CJK characters (4.5 MB of UTF-8) in one
//! streamed chunk. No SSE frame may reach the 4 MiB of UTF-8 clients refuse, the request must
//! end with its `result`, and each of our three clients (Rust, JavaScript, Python) must read the
//! whole stream under the newest rule and see the same events, the answer whole.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::support::fake_provider::{FakeProvider, Script, text_answer, tool_call};
use crate::support::*;
use agent_runtime::protocol::JsonObject;
use agent_runtime::protocol::command::ClientInfo;
use agent_runtime::protocol::event::MAX_SSE_FRAME_BYTES;
use agent_runtime_client::{AgentClient, ClientOptions, EventsOptions};
use futures_util::StreamExt;
use serde_json::{Value, json};

/// The answer: "漢字" this many times (1.5 M characters).
const ANSWER_REPEATS: usize = 750_000;
const TOOL_INPUT_BYTES: usize = 5 << 20;

fn answer() -> String {
    "漢字".repeat(ANSWER_REPEATS)
}

/// The events of a session as every client reports them: one line per event, `sequence type
/// stream-type`, then whether the joined `content` deltas are the answer.
fn summary_line(sequence: u64, event_type: &str, data: &JsonObject) -> String {
    let kind = data.get("type").and_then(Value::as_str).unwrap_or("-");
    format!("{sequence} {event_type} {kind}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_cjk_answer_and_a_large_tool_input_reach_all_three_clients_in_frames_under_4_mib() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let target = workspace.join("big.txt");
    let arguments = json!({
        "file_path": target.display().to_string(),
        "content": "x".repeat(TOOL_INPUT_BYTES),
    })
    .to_string();
    let script: Script = Arc::new(move |_auth, body| {
        let tool_answered = body["messages"]
            .as_array()
            .is_some_and(|messages| messages.iter().any(|m| m["role"] == "tool"));
        match tool_answered {
            false => (200, vec![], tool_call("Write", &arguments)),
            true => (200, vec![], text_answer(&answer())),
        }
    });
    let (provider, provider_url) = FakeProvider::start(script).await;
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[provider]
kind = "openai"
model = "gpt-test"
base_url = "{provider_url}"
api_key_env = "LARGE_EVENTS_PROVIDER_KEY"

[tools]
builtin_tools = true
roots = ["{workspace}"]
mode = "yolo"
"#,
            workspace = workspace.display(),
        ),
    )
    .unwrap();
    let served = serve_with_env(
        &dir.path().join("data"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
        &[("LARGE_EVENTS_PROVIDER_KEY", "sk-large-events")],
    );

    let created = command(&served, "session.create", json!({})).await;
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    let submitted = command(
        &served,
        "input.submit",
        json!({ "sessionId": session, "input": "write the file, then answer" }),
    )
    .await;
    let request = submitted["requestId"].as_str().unwrap().to_owned();

    // The Rust client follows the request to its end, then the session is closed so that every
    // client's stream ends at `session.closed`.
    let client = rust_client(&served);
    let mut events = client.events(&session, EventsOptions::default());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("the request ends before the deadline")
            .expect("the stream lasts until the request ends")
            .expect("the Rust client reads every frame");
        if event.envelope.request_id.as_deref() == Some(request.as_str()) && event.is_request_end()
        {
            break;
        }
    }
    drop(events);
    command(&served, "session.close", json!({ "sessionId": session })).await;
    assert!(!target.exists(), "the over-large call was not run");
    assert_eq!(
        provider.calls().len(),
        2,
        "the model read the refusal and answered"
    );

    // The raw frames, as the server sent them.
    let raw = raw_stream(&served, &session).await;
    let frames: Vec<&str> = raw
        .split("\n\n")
        .filter(|frame| !frame.is_empty())
        .collect();
    let largest = frames.iter().map(|frame| frame.len()).max().unwrap();
    assert!(
        largest <= MAX_SSE_FRAME_BYTES,
        "a frame of {largest} bytes went out"
    );
    let envelopes: Vec<Value> = frames
        .iter()
        .filter_map(|frame| frame.lines().find_map(|line| line.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let stream = |kind: &'static str| {
        envelopes
            .iter()
            .filter(move |event| event["data"]["type"] == kind)
    };
    let tool_use = stream("tool_use").next().expect("a tool_use event");
    let omitted = tool_use["data"]["input"]["omitted"].as_str().unwrap();
    assert!(omitted.contains("more bytes left out"), "{omitted}");
    let refusal = stream("tool_result").next().expect("a tool_result event");
    assert_eq!(refusal["data"]["isError"], true);
    let refusal_text = refusal["data"]["output"].to_string();
    assert!(
        refusal_text.contains("more than one event may carry")
            && refusal_text.contains("split the work into smaller calls"),
        "{refusal_text}"
    );
    let deltas: Vec<&str> = stream("content")
        .map(|event| event["data"]["delta"].as_str().unwrap())
        .collect();
    assert!(deltas.len() > 4, "the answer went out in several events");
    assert!(deltas.concat() == answer(), "the deltas join to the answer");
    let result = stream("result")
        .next()
        .expect("the request ends with its result");
    assert_eq!(result["data"]["subtype"], "success");
    assert_eq!(result["requestId"], request.as_str());
    assert!(
        result["data"]["content"]
            .as_str()
            .unwrap()
            .ends_with("bytes …]"),
        "the result's copy of the answer is cut with a marker"
    );
    assert_eq!(envelopes.last().unwrap()["type"], "session.closed");

    let expected: Vec<String> = envelopes
        .iter()
        .map(|event| {
            summary_line(
                event["sequence"].as_u64().unwrap(),
                event["type"].as_str().unwrap(),
                event["data"].as_object().unwrap(),
            )
        })
        .chain(["answer whole".to_owned()])
        .collect();
    assert_eq!(rust_summary(&client, &session).await, expected, "Rust");
    assert_eq!(client_summary("node", &served, &session), expected, "JS");
    assert_eq!(
        client_summary("python3", &served, &session),
        expected,
        "Python"
    );
    stop(served);
}

fn rust_client(served: &Served) -> AgentClient {
    let info = ClientInfo {
        name: "large-events-test".into(),
        version: "1".into(),
        title: None,
    };
    AgentClient::new(
        ClientOptions::new(served.base.clone(), info).bearer_token(served.token.clone()),
    )
    .unwrap()
}

async fn rust_summary(client: &AgentClient, session: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut answer_text = String::new();
    let mut events = client.events(session, EventsOptions::default());
    while let Some(event) = events.next().await {
        let event = event.expect("the Rust client reads every frame");
        let data = &event.envelope.data;
        if data.get("type") == Some(&json!("content")) {
            answer_text.push_str(data["delta"].as_str().unwrap());
        }
        lines.push(summary_line(
            event.sequence(),
            event.envelope.event_type.as_str(),
            data,
        ));
    }
    lines.push(format!("answer {}", whole(answer_text == answer())));
    lines
}

fn whole(is_whole: bool) -> &'static str {
    if is_whole { "whole" } else { "changed" }
}

/// Runs the JavaScript or Python client over the session's stream and returns its summary.
fn client_summary(program: &str, served: &Served, session: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut command = Command::new(program);
    match program {
        "node" => command
            .args(["--input-type=module", "-e", JS_SUMMARY])
            .env("CLIENT_MODULE", root.join("clients/js/src/agent-client.js")),
        _ => command
            .args(["-c", PYTHON_SUMMARY])
            .env("PYTHONPATH", root.join("clients/python/src")),
    };
    let output = command
        .env("BASE_URL", &served.base)
        .env("TOKEN", &served.token)
        .env("SESSION_ID", session)
        .env("ANSWER_REPEATS", ANSWER_REPEATS.to_string())
        .output()
        .unwrap_or_else(|error| panic!("{program} runs: {error}"));
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{program} failed: {errors}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

const JS_SUMMARY: &str = r#"
const { AgentClient } = await import(process.env.CLIENT_MODULE);
const client = new AgentClient({
  baseUrl: process.env.BASE_URL,
  client: { name: 'large-events-test', version: '1' },
  headers: () => ({ authorization: `Bearer ${process.env.TOKEN}` }),
});
let answer = '';
const lines = [];
for await (const event of client.events(process.env.SESSION_ID)) {
  const kind = typeof event.data?.type === 'string' ? event.data.type : '-';
  if (kind === 'content') answer += event.data.delta;
  lines.push(`${event.sequence} ${event.type} ${kind}`);
}
lines.push(`answer ${answer === '漢字'.repeat(Number(process.env.ANSWER_REPEATS)) ? 'whole' : 'changed'}`);
console.log(lines.join('\n'));
"#;

const PYTHON_SUMMARY: &str = r#"
import os
from agent_runtime_client import AgentClient

client = AgentClient(
    os.environ["BASE_URL"],
    {"name": "large-events-test", "version": "1"},
    headers={"authorization": "Bearer " + os.environ["TOKEN"]},
)
answer = []
for event in client.events(os.environ["SESSION_ID"]):
    kind = event.data.get("type", "-") if isinstance(event.data.get("type"), str) else "-"
    if kind == "content":
        answer.append(event.data["delta"])
    print(event.sequence, event.type, kind)
whole = "".join(answer) == "漢字" * int(os.environ["ANSWER_REPEATS"])
print("answer", "whole" if whole else "changed")
"#;

/// The session's whole SSE stream as text (it ends after `session.closed`).
async fn raw_stream(served: &Served, session: &str) -> String {
    let response = agent_runtime_executor::provider::client_builder()
        .build()
        .unwrap()
        .get(format!("{}/sessions/{session}/events", served.base))
        .header("authorization", format!("Bearer {}", served.token))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut bytes = Vec::new();
    let mut response = response;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Some(chunk) = tokio::time::timeout_at(deadline, response.chunk())
        .await
        .expect("the stream ends after session.closed")
        .unwrap()
    {
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes).expect("the stream is UTF-8")
}
