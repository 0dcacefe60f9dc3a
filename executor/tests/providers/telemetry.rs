//! Telemetry of the executor against a scripted OpenAI-compatible server: the executor's command
//! span continues the caller's trace, each model call gets a client span whose context reaches the
//! provider as `traceparent`, and provider latency and errors are recorded — with no prompt in any
//! of it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{Reply, ScriptedServer, TENANT, fixture};
use agent_runtime::clock;
use agent_runtime::executor_port::{CommandContext, SessionCommands, SessionExecutor};
use agent_runtime::protocol::command::{CreateSessionData, SubmitInputData};
use agent_runtime::protocol::content::UserContent;
use agent_runtime::protocol::{Principal, Scope};
use agent_runtime::telemetry::{
    AttributeValue, ProviderCallMetric, SpanKind, SpanRecord, SpanStatus, Telemetry,
    TelemetryError, TraceContext,
};
use agent_runtime_executor::provider::{
    HttpSettings, ProviderConfig, ProviderKind, build_provider,
};
use agent_runtime_executor::tools::agents::{SubagentTool, builtin_agents};
use agent_runtime_executor::tools::{Tool, ToolRegistry};
use agent_runtime_executor::traced::EXECUTOR_SPAN;
use agent_runtime_executor::{
    ExecutorConfig, ExecutorDeps, InProcessExecutor, NoLeases, StoreSink, TracedExecutor,
};
use agent_runtime_store::{MemoryStore, Store, StoreOptions};

const PROMPT: &str = "prompt-marker-7f3c: what do the notes say?";

#[derive(Debug, Default)]
struct Recorder {
    spans: Mutex<Vec<SpanRecord>>,
    provider_calls: Mutex<Vec<(String, Option<&'static str>)>>,
}

impl Telemetry for Recorder {
    fn record_span(&self, span: &SpanRecord) -> Result<(), TelemetryError> {
        self.spans.lock().unwrap().push(span.clone());
        Ok(())
    }
    fn record_provider_call(&self, metric: &ProviderCallMetric<'_>) -> Result<(), TelemetryError> {
        self.provider_calls
            .lock()
            .unwrap()
            .push((metric.provider.to_owned(), metric.error_code));
        Ok(())
    }
}

impl Recorder {
    fn spans_named(&self, name: &str) -> Vec<SpanRecord> {
        let spans = self.spans.lock().unwrap();
        spans.iter().filter(|s| s.name == name).cloned().collect()
    }
}

fn attribute<'a>(span: &'a SpanRecord, key: &str) -> Option<&'a AttributeValue> {
    span.attributes
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, value)| value)
}

/// Waits until the session has a `result` event after `after`; returns its sequence.
async fn wait_for_result(store: &Arc<dyn Store>, session_id: &str, after: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut cursor = after;
    loop {
        let page = store
            .read_events(TENANT, session_id, cursor, 1000)
            .await
            .unwrap();
        for event in page.events {
            cursor = event.sequence;
            if event.data.get("type").and_then(|t| t.as_str()) == Some("result") {
                return cursor;
            }
        }
        let wait = store.wait_for_events(TENANT, session_id, cursor);
        assert!(
            tokio::time::timeout_at(deadline, wait).await.is_ok(),
            "a result before the deadline"
        );
    }
}

/// Submits [`PROMPT`] to the session.
async fn submit_prompt(traced: &TracedExecutor, context: &CommandContext, session: &str) {
    let traced: &dyn SessionExecutor = traced;
    traced
        .submit(
            context,
            SubmitInputData {
                session_id: session.to_owned(),
                input: UserContent::Text(PROMPT.to_owned()),
                priority: None,
                expected_request_id: None,
                max_turns: None,
            },
        )
        .await
        .unwrap();
}

/// A command of `TENANT`'s admin, in trace `trace`.
fn command_context(trace: TraceContext) -> CommandContext {
    CommandContext {
        principal: Principal::new(TENANT, "user-t", &[Scope::SessionAdmin]),
        command_id: "command-1".to_owned(),
        trace: Some(trace),
        execution_id: None,
        chosen_session_id: None,
    }
}

async fn create_session(traced: &TracedExecutor, context: &CommandContext) -> String {
    let traced: &dyn SessionExecutor = traced;
    traced
        .create(context, CreateSessionData { metadata: None })
        .await
        .unwrap()
        .session_id
}

/// Creates a session and runs [`PROMPT`] to its result, in a trace of its own; returns the
/// session id.
async fn one_traced_request(traced: &TracedExecutor, store: &Arc<dyn Store>) -> String {
    let context = command_context(TraceContext::new_root());
    let session = create_session(traced, &context).await;
    submit_prompt(traced, &context, &session).await;
    wait_for_result(store, &session, 0).await;
    session
}

/// An in-process executor on an OpenAI-compatible provider at `base_url`, wrapped in its tracing
/// layer, with a recorder for its telemetry.
fn traced_executor(base_url: &str) -> (TracedExecutor, Arc<Recorder>, Arc<dyn Store>) {
    traced_executor_with(base_url, ToolRegistry::new([]))
}

fn traced_executor_with(
    base_url: &str,
    tools: ToolRegistry,
) -> (TracedExecutor, Arc<Recorder>, Arc<dyn Store>) {
    let provider = build_provider(&ProviderConfig {
        kind: ProviderKind::OpenAi,
        model: Some("test-model".into()),
        base_url: Some(format!("{base_url}/v1")),
        http: HttpSettings {
            max_retries: 0,
            ..HttpSettings::default()
        },
        ..ProviderConfig::default()
    })
    .unwrap();
    let recorder = Arc::new(Recorder::default());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let executor = Arc::new(InProcessExecutor::new(
        ExecutorConfig::default(),
        ExecutorDeps {
            store: store.clone(),
            sink: Arc::new(StoreSink::new(store.clone(), recorder.clone())),
            provider,
            tools,
            profiles: Vec::new(),
            clock: clock::system(),
            leases: Arc::new(NoLeases),
            telemetry: recorder.clone(),
        },
    ));
    (
        TracedExecutor::new(executor, recorder.clone()),
        recorder,
        store,
    )
}

#[tokio::test]
async fn model_calls_continue_the_command_trace_up_to_the_provider() {
    let server = ScriptedServer::start(vec![
        Reply::Sse(fixture("openai/answer.sse")),
        // The refusal echoes the prompt, as some APIs do; it must not reach any telemetry.
        Reply::Status(401, None, format!(r#"{{"error":{{"message":"{PROMPT}","type":"invalid_request_error","code":"invalid_api_key"}}}}"#)),
    ])
    .await;
    let (traced, recorder, store) = traced_executor(&server.base_url);

    // The gateway's command span, as it arrives in the call context.
    let gateway_span = TraceContext::new_root();
    let context = command_context(gateway_span.clone());
    let session = create_session(&traced, &context).await;
    let mut after = 0;
    for _ in 0..2 {
        submit_prompt(&traced, &context, &session).await;
        after = wait_for_result(&store, &session, after).await;
    }

    // Executor spans: children of the gateway span, one per command.
    let executor_spans = recorder.spans_named(EXECUTOR_SPAN);
    let types: Vec<_> = executor_spans
        .iter()
        .map(|s| attribute(s, "blade.agent.command.type").cloned())
        .collect();
    assert_eq!(
        types,
        [
            Some(AttributeValue::Str("session.create")),
            Some(AttributeValue::Str("input.submit")),
            Some(AttributeValue::Str("input.submit")),
        ]
    );
    for span in &executor_spans {
        assert_eq!(span.trace_id, gateway_span.trace_id);
        assert_eq!(span.parent_span_id, Some(gateway_span.span_id));
        assert_eq!(span.status, SpanStatus::Ok);
    }

    // Model-call spans: children of their submit's executor span; their context is what the
    // provider received.
    let calls = recorder.spans_named("chat");
    assert_eq!(calls.len(), 2);
    let received = server.received();
    assert_eq!(received.len(), 2);
    for ((call, submit), request) in calls.iter().zip(&executor_spans[1..]).zip(&received) {
        assert_eq!(call.kind, SpanKind::Client);
        assert_eq!(call.trace_id, gateway_span.trace_id);
        assert_eq!(call.parent_span_id, Some(submit.span_id));
        let header = request.headers["traceparent"].to_str().unwrap();
        let sent = TraceContext::parse(header, None).expect("a valid traceparent");
        assert_eq!((sent.trace_id, sent.span_id), (call.trace_id, call.span_id));
        assert!(request.headers.get("tracestate").is_none());
        assert_eq!(
            attribute(call, "gen_ai.system"),
            Some(&AttributeValue::String("openai".to_owned()))
        );
        assert_eq!(
            attribute(call, "gen_ai.request.model"),
            Some(&AttributeValue::String("test-model".to_owned()))
        );
    }
    assert_eq!(calls[0].status, SpanStatus::Ok);
    assert!(attribute(&calls[0], "gen_ai.usage.output_tokens").is_some());
    assert_eq!(calls[1].status, SpanStatus::Error);
    assert_eq!(
        attribute(&calls[1], "error.type"),
        Some(&AttributeValue::Str("PROVIDER_AUTH_FAILED"))
    );

    assert_eq!(
        *recorder.provider_calls.lock().unwrap(),
        vec![
            ("openai".to_owned(), None),
            ("openai".to_owned(), Some("PROVIDER_AUTH_FAILED")),
        ]
    );
    let everything = format!("{:?}", recorder.spans.lock().unwrap());
    assert!(!everything.contains("prompt-marker"), "{everything}");
}

/// SEC-08: content capture is off, and no setting turns it on (so the catalogue's "flag on" half
/// does not apply). A turn where the model calls a tool and then answers gives model-call spans
/// with the model, token counts and a duration, and none of the prompt, the tool call's
/// arguments, the tool's result or the answer's text appears in any span or metric.
#[tokio::test]
async fn sec_08_spans_carry_model_tokens_and_timing_but_no_content() {
    const ARGUMENT: &str = "argument-marker-41d2";
    let tool_call = fixture("openai/tool_call.sse").replace("notes", ARGUMENT);
    assert!(tool_call.contains(ARGUMENT));
    let answer = fixture("openai/answer.sse");
    let server =
        ScriptedServer::start(vec![Reply::Sse(tool_call), Reply::Sse(answer.clone())]).await;
    let (traced, recorder, store) = traced_executor(&server.base_url);
    let session = one_traced_request(&traced, &store).await;

    // The session's own log holds the content (that is where it belongs).
    let log = store.read_events(TENANT, &session, 0, 1000).await.unwrap();
    let log = format!("{:?}", log.events);
    assert!(
        log.contains(ARGUMENT),
        "the tool call reached the session's log"
    );
    assert!(
        log.contains("say: hell"),
        "the answer reached the session's log"
    );

    let calls = recorder.spans_named("chat");
    assert_eq!(calls.len(), 2, "one span per model call");
    for call in &calls {
        assert!(call.end_unix_nanos >= call.start_unix_nanos, "a duration");
        assert_eq!(
            attribute(call, "gen_ai.request.model"),
            Some(&AttributeValue::String("test-model".to_owned()))
        );
    }
    assert!(
        calls
            .iter()
            .any(|call| attribute(call, "gen_ai.usage.output_tokens").is_some()),
        "token counts"
    );
    let everything = format!(
        "{:?} {:?}",
        recorder.spans.lock().unwrap(),
        recorder.provider_calls.lock().unwrap()
    );
    for content in ["prompt-marker", ARGUMENT, "say: hell", "The tool said"] {
        assert!(
            !everything.contains(content),
            "{content} in telemetry: {everything}"
        );
    }
}

/// A subagent's model calls belong to the request's trace like the parent's: a `chat` span under
/// the submit's executor span, named after the agent (`gen_ai.agent.name`), whose context reaches
/// the provider; and each is counted as a provider call.
#[tokio::test]
async fn a_subagents_model_calls_are_traced_and_counted_in_the_request() {
    // The parent calls `Task`; the child answers at once; the parent answers.
    let task = fixture("openai/tool_call.sse")
        .replace(r#""name":"lookup""#, r#""name":"Task""#)
        .replace(
            r#""arguments":"{\"ke""#,
            r#""arguments":"{\"subagent_type\":\"Explore\",\"description\":\"look around\",\"prompt\":\"find the notes, please""#,
        )
        .replace(r#""arguments":"y\": \"notes\"}""#, r#""arguments":"\"}""#);
    let answer = fixture("openai/answer.sse");
    let server = ScriptedServer::start(vec![
        Reply::Sse(task),
        Reply::Sse(answer.clone()),
        Reply::Sse(answer),
    ])
    .await;
    let subagents: Arc<dyn Tool> = Arc::new(SubagentTool {
        agents: builtin_agents(),
        timeout: Duration::from_secs(60),
    });
    let (traced, recorder, store) =
        traced_executor_with(&server.base_url, ToolRegistry::new([subagents]));
    one_traced_request(&traced, &store).await;

    let submit = recorder.spans_named(EXECUTOR_SPAN).pop().unwrap();
    let calls = recorder.spans_named("chat");
    let received = server.received();
    assert_eq!((calls.len(), received.len()), (3, 3), "{calls:#?}");
    let children: Vec<&SpanRecord> = calls
        .iter()
        .filter(|call| attribute(call, "gen_ai.agent.name").is_some())
        .collect();
    assert_eq!(children.len(), 1, "{calls:#?}");
    let child = children[0];
    assert_eq!(
        attribute(child, "gen_ai.agent.name"),
        Some(&AttributeValue::String("Explore".to_owned()))
    );
    for call in &calls {
        assert_eq!(call.trace_id, submit.trace_id);
        assert_eq!(call.parent_span_id, Some(submit.span_id));
        assert_eq!(call.status, SpanStatus::Ok);
    }
    // The child's call is the second request the provider received, with the child's span.
    assert!(
        received[1]
            .body
            .to_string()
            .contains("find the notes, please")
    );
    let header = received[1].headers["traceparent"].to_str().unwrap();
    let sent = TraceContext::parse(header, None).expect("a valid traceparent");
    assert_eq!(
        (sent.trace_id, sent.span_id),
        (child.trace_id, child.span_id)
    );
    assert_eq!(recorder.provider_calls.lock().unwrap().len(), 3);
}
