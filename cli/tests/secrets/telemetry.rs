//! The secrets test (architecture invariant 6, reliability SEC-01/02/04): a full session runs
//! with a provider key, a bearer token and a prompt that each contain a unique marker. Every
//! output of the run — JSON logs at debug level, stdout, `/metrics`, exported spans, the audit log, error bodies,
//! the event stream, the store's files — is scanned: no marker may appear, except the prompt in
//! the session's own event stream and store (the model provider, of course, receives the key and
//! the prompt; what it received is not scanned).

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::fake_provider::{FakeProvider, Script};
use crate::support::otlp::OtlpReceiver;

const TRACE_ID: &str = "5b8efff798038103d269b633813fc60c";

struct Markers {
    key: String,
    token: String,
    prompt: String,
}

impl Markers {
    fn new() -> Self {
        let unique = agent_runtime::ids::nanoid().replace(['-', '_'], "x");
        Self {
            key: format!("keymarker{unique}"),
            token: format!("tokenmarker{unique}"),
            prompt: format!("promptmarker{unique}"),
        }
    }

    fn all(&self) -> [(&str, &str); 3] {
        [
            ("provider key", &self.key),
            ("bearer token", &self.token),
            ("prompt", &self.prompt),
        ]
    }

    /// Fails if `text` (from `what`) contains any of `markers`.
    fn assert_absent(markers: &[(&str, &str)], what: &str, text: &str) {
        for (name, marker) in markers {
            if let Some(at) = text.find(marker) {
                let start = at.saturating_sub(300);
                let end = (at + 300).min(text.len());
                panic!(
                    "the {name} marker appears in {what}: …{}…",
                    text.get(start..end).unwrap_or(text)
                );
            }
        }
    }
}

/// The fake provider's script: it answers normally, except that a prompt containing `fail-now`
/// gets a 401 whose body echoes the key and the prompt (as some APIs do, SEC-02).
fn answer_or_echo() -> Script {
    Arc::new(|authorization, body| {
        let prompt = body["messages"].to_string();
        if prompt.contains("fail-now") {
            let echo = json!({ "error": {
                "message": format!("Incorrect API key provided: {authorization}; request: {prompt}"),
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }});
            return (401, vec![], echo.to_string());
        }
        (200, vec![], ANSWER.to_owned())
    })
}

const ANSWER: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello \"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"there.\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n",
    "data: [DONE]\n\n",
);

fn files_under(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.push((
                path.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_marker_of_a_key_a_token_or_a_prompt_reaches_any_output() {
    let markers = Markers::new();
    let (provider, provider_url) = FakeProvider::start(answer_or_echo()).await;
    // Spans go to an independent OTLP receiver; what it decoded is scanned.
    let receiver = OtlpReceiver::start();
    let collector_url = receiver.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let key_file = dir.path().join("provider-key");
    std::fs::write(&key_file, format!("sk-{}\n", markers.key)).unwrap();
    let token = format!("tok-{}", markers.token);
    let config = dir.path().join("config.toml");
    let audit_file = dir.path().join("audit.jsonl");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
data_dir = "{data}"
store = "jsonl"

[gateway]
heartbeat_interval_ms = 200

[provider]
kind = "openai"
model = "gpt-test"
base_url = "{provider_url}"
api_key_file = "{key}"
max_retries = 0

[telemetry]
otlp_endpoint = "{collector_url}"
otlp_flush_interval_ms = 100

[audit]
path = "{audit}"

[[auth.tokens]]
sha256 = "{hash}"
tenant = "tenant-s"
subject = "subject-s"
scopes = ["session:admin"]
"#,
            data = data_dir.display(),
            key = key_file.display(),
            audit = audit_file.display(),
            hash = agent_runtime_gateway::token_sha256(&token),
        ),
    )
    .unwrap();
    let server = super::Server::start(&config, dir.path(), &[]);
    let url = server.url.clone();
    let traceparent = format!("00-{TRACE_ID}-00f067aa0ba902b7-01");
    let mut client = super::Client::new(&url, &token).with_header("traceparent", traceparent);

    // A full session: create, a prompt answered, a prompt the provider refuses (echoing the key
    // and the prompt), the stream of both.
    let created = client.ok("session.create", json!({})).await;
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    let prompt = format!("Please remember {}", markers.prompt);
    client
        .ok(
            "input.submit",
            json!({ "sessionId": session, "input": prompt }),
        )
        .await;
    let first = client.events(&session, 1).await;
    let failing = format!("fail-now {}", markers.prompt);
    client
        .ok(
            "input.submit",
            json!({ "sessionId": session, "input": failing }),
        )
        .await;
    let stream = client.events(&session, 2).await;
    assert!(stream.starts_with(&first), "one stream, replayed");
    assert!(stream.contains("PROVIDER_AUTH_FAILED"), "{stream}");

    // Failing commands: unknown session, an invalid command carrying the prompt, a wrong token
    // carrying the token marker, and an anonymous event stream.
    let (_, missing) = client
        .command("session.read", json!({ "sessionId": "no-such-session" }))
        .await;
    assert_eq!(missing["error"]["code"], "SESSION_NOT_FOUND");
    let (_, invalid) = client
        .command(
            "input.submit",
            json!({ "sessionId": session, "input": markers.prompt, "priority": markers.prompt }),
        )
        .await;
    assert_eq!(invalid["ok"], false, "{invalid}");
    let wrong_token = format!("{token}-wrong");
    let body = json!({ "protocolVersion": 1, "commandId": "wrong-token", "type": "session.list", "data": {} });
    let (_, refused) = client.post(&wrong_token, body).await;
    assert_eq!(refused["error"]["code"], "UNAUTHENTICATED");
    let (status, _) = client
        .get(
            &format!("{url}/v1/agent/sessions/{session}/events"),
            Some(&wrong_token),
        )
        .await;
    assert_eq!(status, 401);
    assert_eq!(client.error_bodies.len(), 4, "{:?}", client.error_bodies);

    // The metrics, then a graceful stop (flushes spans and logs).
    let (status, metrics) = client.get(&format!("{url}/metrics"), None).await;
    assert_eq!(status, 200);
    assert!(metrics.contains("agent_runtime_provider_errors_total{provider=\"openai\",code=\"PROVIDER_AUTH_FAILED\"} 1"), "{metrics}");
    receiver
        .wait_for(
            |_| true,
            |spans| spans.iter().any(|span| span["name"] == "chat"),
        )
        .await;
    let (logs, stdout) = server.stop();
    let spans = serde_json::to_string(&receiver.spans().await).unwrap();

    // The provider did get the key and the prompt, and the trace context.
    let received = provider.requests();
    assert_eq!(received.len(), 2);
    assert_eq!(
        received[0].0["authorization"],
        format!("Bearer sk-{}", markers.key).as_str()
    );
    assert!(received[0].1.to_string().contains(&markers.prompt));
    let traceparent = received[0].0["traceparent"].to_str().unwrap();
    assert!(
        traceparent.starts_with(&format!("00-{TRACE_ID}-")),
        "{traceparent}"
    );

    // Logs are JSON lines with timestamp, level, target and span context.
    let mut traced_lines = 0;
    for line in logs.lines().filter(|line| !line.trim().is_empty()) {
        let entry: Value = serde_json::from_str(line)
            .unwrap_or_else(|_| panic!("a log line that is not JSON: {line}"));
        for field in ["timestamp", "level", "target"] {
            assert!(entry.get(field).is_some(), "{field} in {line}");
        }
        let in_trace = entry["spans"]
            .as_array()
            .is_some_and(|spans| spans.iter().any(|span| span["trace_id"] == TRACE_ID));
        traced_lines += usize::from(in_trace);
    }
    assert!(
        traced_lines > 0,
        "log lines inside a command carry its trace id"
    );
    assert!(
        logs.contains("the model provider refused the call"),
        "the refusal is logged (without its body)"
    );

    let all = markers.all();
    Markers::assert_absent(&all, "the logs", &logs);
    Markers::assert_absent(&all, "stdout", &stdout);
    Markers::assert_absent(&all, "the metrics", &metrics);
    Markers::assert_absent(&all, "the exported spans", &spans);
    let audit = std::fs::read_to_string(&audit_file).expect("the audit log was written");
    assert!(
        audit.lines().count() >= 4,
        "one audit record per executed command: {audit}"
    );
    Markers::assert_absent(&all, "the audit log", &audit);
    for body in &client.error_bodies {
        Markers::assert_absent(&all, "an error body", body);
    }
    // The session's own stream and store hold the prompt, never the key or the token.
    let credentials = [all[0], all[1]];
    Markers::assert_absent(&credentials, "the event stream", &stream);
    let mut files = Vec::new();
    files_under(&data_dir, &mut files);
    assert!(!files.is_empty());
    for (path, text) in &files {
        Markers::assert_absent(&credentials, path, text);
    }
}
