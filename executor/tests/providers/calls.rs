//! The `openai` and `anthropic` providers against scripted loopback servers replaying recorded
//! streams, run through the real executor: event sequences, request mapping, retries, error
//! codes, abort, and that the API key never shows.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{Harness, Reply, ScriptedServer, fixture, summary};
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::provider::{
    HttpSettings, ModelProvider, ProviderConfig, ProviderKind, ToolSpec, build_provider,
};
use agent_runtime_executor::tools::{
    Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome, ToolRegistry,
};
use async_trait::async_trait;
use serde_json::{Value, json};

const KEY: &str = "sk-test-Zq8XvL2mN4pR7sT1uW3yA5bC";

/// A read-only tool the scripted model calls.
#[derive(Debug)]
struct Lookup;

#[async_trait]
impl Tool for Lookup {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "lookup".into(),
            description: "Looks a key up.".into(),
            input_schema: json!({ "type": "object", "properties": { "key": { "type": "string" } }, "required": ["key"] }),
        }
    }
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }
    fn check(&self, _input: &Value) -> Result<ToolCheck, String> {
        Ok(ToolCheck::default())
    }
    fn approval_title(&self, _input: &Value) -> String {
        "Look up".into()
    }
    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        ToolOutcome {
            output: json!({ "key": input["key"], "value": "hellö" }),
            is_error: false,
            state: None,
            patch: None,
            context_patch: None,
            new_messages: Vec::new(),
            summary: "Looked up".into(),
        }
    }
}

/// A tool that always fails, as a denied or broken call does.
#[derive(Debug)]
struct Broken;

#[async_trait]
impl Tool for Broken {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "broken".into(),
            description: "Always fails.".into(),
            input_schema: json!({ "type": "object" }),
        }
    }
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }
    fn check(&self, _input: &Value) -> Result<ToolCheck, String> {
        Ok(ToolCheck::default())
    }
    fn approval_title(&self, _input: &Value) -> String {
        "Break".into()
    }
    async fn run(&self, _input: Value, _context: ToolContext) -> ToolOutcome {
        ToolOutcome {
            output: json!({ "error": "no such key" }),
            is_error: true,
            state: None,
            patch: None,
            context_patch: None,
            new_messages: Vec::new(),
            summary: "Failed".into(),
        }
    }
}

fn fast_http() -> HttpSettings {
    HttpSettings {
        connect_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_millis(400),
        max_retries: 2,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
    }
}

struct Setup {
    server: ScriptedServer,
    harness: Harness,
    _key_dir: tempfile::TempDir,
}

async fn setup(kind: ProviderKind, replies: Vec<Reply>) -> Setup {
    setup_with_tools(kind, replies, vec![Arc::new(Lookup)]).await
}

async fn setup_with_tools(
    kind: ProviderKind,
    replies: Vec<Reply>,
    tools: Vec<Arc<dyn Tool>>,
) -> Setup {
    let server = ScriptedServer::start(replies).await;
    let key_dir = tempfile::tempdir().unwrap();
    let key_file = key_dir.path().join("key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let base_url = match kind {
        ProviderKind::OpenAi => format!("{}/v1", server.base_url),
        _ => server.base_url.clone(),
    };
    let config = ProviderConfig {
        kind,
        model: Some("test-model".into()),
        base_url: Some(base_url),
        api_key_file: Some(key_file),
        http: fast_http(),
        ..ProviderConfig::default()
    };
    let provider: Arc<dyn ModelProvider> = build_provider(&config).unwrap();
    assert!(
        !format!("{provider:?} {config:?}").contains(KEY),
        "Debug shows no key"
    );
    let tools = ToolRegistry::new(tools);
    let harness = Harness::new(provider, tools, ExecutorConfig::default());
    Setup {
        server,
        harness,
        _key_dir: key_dir,
    }
}

/// Runs one request and returns its event summary.
async fn run_request(setup: &Setup, text: &str) -> (String, Vec<String>, Vec<Value>) {
    let session = setup.harness.create().await;
    setup.harness.submit(&session, text).await;
    let events = setup.harness.until_result(&session, 0).await;
    let all: Vec<Value> = events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    for event in &all {
        assert!(
            !event.to_string().contains(KEY),
            "the key leaked into {event}"
        );
    }
    (session, summary(&events), all)
}

fn expected_tool_flow(thinking_first_turn: bool, thinking_second_turn: bool) -> Vec<String> {
    let mut expected = vec!["turn_start:1"];
    if thinking_first_turn {
        expected.push("thinking:I should look it up.");
    }
    expected.extend([
        "content:Let me ",
        "content:check.",
        "usage",
        "tool_use:lookup",
        "tool_result:lookup",
        "turn_end:1",
        "turn_start:2",
    ]);
    if thinking_second_turn {
        expected.push("thinking:The tool said hello.");
    }
    expected.extend([
        "content:The notes ",
        "content:say: hellö.",
        "usage",
        "turn_end:2",
        "result:success",
    ]);
    expected.into_iter().map(str::to_owned).collect()
}

#[tokio::test]
async fn openai_tool_using_request_streams_the_exact_events_and_maps_the_conversation() {
    let setup = setup(
        ProviderKind::OpenAi,
        vec![
            Reply::Sse(fixture("openai/tool_call.sse")),
            Reply::Sse(fixture("openai/answer.sse")),
        ],
    )
    .await;
    let (_, events, all) = run_request(&setup, "What do the notes say?").await;
    assert_eq!(events, expected_tool_flow(false, true));
    let tool_use = all
        .iter()
        .find(|e| e["data"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(tool_use["data"]["input"], json!({ "key": "notes" }));
    assert_eq!(tool_use["data"]["id"], "call_7Hq2mNfE");
    let usage = all.iter().find(|e| e["data"]["type"] == "usage").unwrap();
    assert_eq!(usage["data"]["usage"]["inputTokens"], 182);
    assert_eq!(usage["data"]["usage"]["outputTokens"], 21);
    let result = all.last().unwrap();
    assert_eq!(result["data"]["content"], "The notes say: hellö.");

    let received = setup.server.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].path, "/v1/chat/completions");
    assert_eq!(
        received[0].headers["authorization"],
        format!("Bearer {KEY}").as_str()
    );
    let first = &received[0].body;
    assert_eq!(first["stream"], true);
    assert_eq!(first["stream_options"]["include_usage"], true);
    assert_eq!(first["model"], "test-model");
    assert_eq!(first["tools"][0]["function"]["name"], "lookup");
    assert_eq!(first["tools"][0]["type"], "function");
    let second = &received[1].body["messages"];
    assert_eq!(second[0]["role"], "user");
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["tool_calls"][0]["id"], "call_7Hq2mNfE");
    assert_eq!(
        second[1]["tool_calls"][0]["function"]["arguments"],
        "{\"key\": \"notes\"}"
    );
    assert_eq!(second[2]["role"], "tool");
    assert_eq!(second[2]["tool_call_id"], "call_7Hq2mNfE");
    assert!(second[2]["content"].as_str().unwrap().contains("hellö"));
}

#[tokio::test]
async fn anthropic_tool_using_request_streams_the_exact_events_and_maps_the_conversation() {
    let setup = setup(
        ProviderKind::Anthropic,
        vec![
            Reply::Sse(fixture("anthropic/tool_use.sse")),
            Reply::Sse(fixture("anthropic/answer.sse")),
        ],
    )
    .await;
    let (_, events, all) = run_request(&setup, "What do the notes say?").await;
    assert_eq!(events, expected_tool_flow(true, false));
    let usage = all.iter().find(|e| e["data"]["type"] == "usage").unwrap();
    assert_eq!(usage["data"]["usage"]["inputTokens"], 472);
    assert_eq!(usage["data"]["usage"]["outputTokens"], 89);
    assert_eq!(usage["data"]["usage"]["maxContextTokens"], 200_000);

    let received = setup.server.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].path, "/v1/messages");
    assert_eq!(received[0].headers["x-api-key"], KEY);
    assert_eq!(received[0].headers["anthropic-version"], "2023-06-01");
    let first = &received[0].body;
    assert_eq!(first["stream"], true);
    assert_eq!(first["max_tokens"], 4096);
    assert_eq!(first["tools"][0]["name"], "lookup");
    assert_eq!(first["tools"][0]["input_schema"]["type"], "object");
    let second = &received[1].body["messages"];
    assert_eq!(
        second.as_array().unwrap().len(),
        3,
        "user, assistant, user(tool_result): {second}"
    );
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(
        second[1]["content"][0],
        json!({ "type": "text", "text": "Let me check." })
    );
    assert_eq!(
        second[1]["content"][1],
        json!({ "type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "lookup", "input": { "key": "notes" } })
    );
    assert_eq!(second[2]["role"], "user");
    assert_eq!(second[2]["content"][0]["type"], "tool_result");
    assert_eq!(
        second[2]["content"][0]["tool_use_id"],
        "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
    );
    assert_eq!(second[2]["content"][0].get("is_error"), None);
}

/// An OpenAI-compatible proxy in front of an Anthropic-format server reports 0 input tokens in
/// `message_start` and the real (cumulative) count in `message_delta`; a failed tool call's result
/// goes back with `is_error: true` (a successful one without it, as the test above shows).
#[tokio::test]
async fn anthropic_counts_input_tokens_from_message_delta_and_marks_failed_tool_results() {
    let calls_broken = fixture("anthropic/tool_use.sse").replace("\"lookup\"", "\"broken\"");
    let proxied_answer = fixture("anthropic/answer.sse")
        .replace(
            "\"usage\":{\"input_tokens\":610,\"output_tokens\":1}",
            "\"usage\":{\"input_tokens\":0,\"output_tokens\":1}",
        )
        .replace(
            "\"usage\":{\"output_tokens\":12}",
            "\"usage\":{\"input_tokens\":610,\"output_tokens\":12}",
        );
    assert_ne!(proxied_answer, fixture("anthropic/answer.sse"));
    let setup = setup_with_tools(
        ProviderKind::Anthropic,
        vec![Reply::Sse(calls_broken), Reply::Sse(proxied_answer)],
        vec![Arc::new(Broken)],
    )
    .await;
    let (_, _, all) = run_request(&setup, "What do the notes say?").await;
    let usages: Vec<&Value> = all
        .iter()
        .filter(|e| e["data"]["type"] == "usage")
        .collect();
    assert_eq!(usages.len(), 2);
    assert_eq!(usages[1]["data"]["usage"]["inputTokens"], 610);
    assert_eq!(usages[1]["data"]["usage"]["outputTokens"], 12);

    let received = setup.server.received();
    let tool_result = &received[1].body["messages"][2]["content"][0];
    assert_eq!(tool_result["type"], "tool_result");
    assert_eq!(tool_result["is_error"], true, "{tool_result}");
    assert!(
        tool_result["content"]
            .as_str()
            .unwrap()
            .contains("no such key")
    );
}

fn final_error(all: &[Value]) -> (String, String) {
    let error = all
        .iter()
        .find(|e| e["data"]["type"] == "error")
        .expect("an error event");
    let result = all.last().unwrap();
    assert_eq!(result["data"]["subtype"], "error");
    (
        error["data"]["code"].as_str().unwrap().to_owned(),
        error["data"]["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn transient_failures_are_retried_until_one_succeeds() {
    let setup = setup(
        ProviderKind::OpenAi,
        vec![
            Reply::Status(
                429,
                Some("0"),
                "{\"error\":{\"type\":\"rate_limit\"}}".into(),
            ),
            Reply::Status(503, None, "busy".into()),
            Reply::Sse(fixture("openai/answer.sse")),
        ],
    )
    .await;
    let (_, events, _) = run_request(&setup, "hi").await;
    assert_eq!(events.last().unwrap(), "result:success");
    assert_eq!(setup.server.received().len(), 3);
}

#[tokio::test]
async fn persistent_failures_end_in_the_documented_error_codes_after_retries() {
    // Per provider: a chunk cut inside its JSON, and a stream that opens (headers and a first
    // event without output) and then goes silent until the idle timeout.
    let dialects = [
        (
            ProviderKind::OpenAi,
            "data: {\"choices\":[{\"delta\":{\"content\":\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n",
        ),
        (
            ProviderKind::Anthropic,
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":\n\n",
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
        ),
    ];
    for (kind, malformed, silent_after) in dialects {
        let cases: Vec<(Reply, &str)> = vec![
            (
                Reply::Status(429, Some("0.01"), String::new()),
                "PROVIDER_RATE_LIMITED",
            ),
            (
                Reply::Status(500, None, "oops".into()),
                "PROVIDER_UNAVAILABLE",
            ),
            (Reply::Stall, "PROVIDER_UNAVAILABLE"),
            (
                Reply::SseThenHang(silent_after.to_owned()),
                "PROVIDER_UNAVAILABLE",
            ),
            (Reply::Sse(malformed.to_owned()), "PROVIDER_BAD_RESPONSE"),
        ];
        for (reply, code) in cases {
            let setup = setup(kind, vec![reply.clone(), reply.clone(), reply]).await;
            let (_, _, all) = run_request(&setup, "hi").await;
            let (got, message) = final_error(&all);
            assert_eq!(got, code, "{kind:?}: {message}");
            assert!(message.contains("after 3 attempts"), "{kind:?}: {message}");
            assert_eq!(
                setup.server.received().len(),
                3,
                "{kind:?} {code}: the first try and two retries"
            );
        }
    }
}

#[tokio::test]
async fn auth_failures_and_bad_requests_are_not_retried_and_never_show_the_key() {
    for (kind, status, code) in [
        (ProviderKind::OpenAi, 401, "PROVIDER_AUTH_FAILED"),
        (ProviderKind::Anthropic, 403, "PROVIDER_AUTH_FAILED"),
        (ProviderKind::Anthropic, 400, "PROVIDER_BAD_RESPONSE"),
    ] {
        // Real APIs echo (part of) a wrong key in their error body.
        let body = format!("{{\"error\":{{\"message\":\"Incorrect API key provided: {KEY}\"}}}}");
        let setup = setup(kind, vec![Reply::Status(status, None, body)]).await;
        let (_, _, all) = run_request(&setup, "hi").await;
        let (got, message) = final_error(&all);
        assert_eq!(got, code);
        assert!(!message.contains(KEY));
        assert_eq!(setup.server.received().len(), 1, "{status} is not retried");
    }
}

#[tokio::test]
async fn a_failure_after_streamed_output_is_not_retried() {
    let partial =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hal\"}}]}\n\n".to_owned();
    let setup = setup(
        ProviderKind::OpenAi,
        vec![Reply::Sse(partial.clone()), Reply::Sse(partial)],
    )
    .await;
    let (_, events, all) = run_request(&setup, "hi").await;
    assert!(events.contains(&"content:Hal".to_owned()));
    let (code, _) = final_error(&all);
    assert_eq!(code, "PROVIDER_UNAVAILABLE");
    assert_eq!(
        setup.server.received().len(),
        1,
        "a retry would show a second answer"
    );
}

#[tokio::test]
async fn abort_mid_stream_closes_the_provider_connection() {
    let first = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Thinking hard\"}}\n\n";
    let mut setup = setup(
        ProviderKind::Anthropic,
        vec![Reply::SseThenHang(first.to_owned())],
    )
    .await;
    // The stream stays open: the idle timeout must not end it before the abort does.
    setup.harness = {
        let config = ProviderConfig {
            kind: ProviderKind::Anthropic,
            model: Some("m".into()),
            base_url: Some(setup.server.base_url.clone()),
            api_key_file: Some(setup._key_dir.path().join("key")),
            http: HttpSettings {
                idle_timeout: Duration::from_secs(60),
                ..fast_http()
            },
            ..ProviderConfig::default()
        };
        Harness::new(
            build_provider(&config).unwrap(),
            ToolRegistry::default(),
            ExecutorConfig::default(),
        )
    };
    let session = setup.harness.create().await;
    setup.harness.submit(&session, "go").await;
    setup
        .harness
        .events_until(&session, 0, |e| e.data["type"] == "content")
        .await;
    assert!(!setup.server.disconnected());
    setup.harness.abort(&session).await;
    let events = setup.harness.until_result(&session, 0).await;
    let events = summary(&events);
    assert_eq!(
        &events[events.len() - 2..],
        ["error:REQUEST_ABORTED", "result:error"]
    );
    assert!(
        setup.server.wait_disconnected().await,
        "the provider saw the connection close"
    );
}
