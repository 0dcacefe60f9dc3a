//! P0 catalogue entries SEC-01 (canary sweep) and SEC-07 (the provider endpoint cannot be
//! redirected) of docs/reliability.md (the SEC entries), against the real `agent-runtime serve`
//! binary.
//!
//! SEC-01 extends tests/telemetry_secrets.rs (JSONL store, upstream 401 echo) with what it leaves
//! out: the PostgreSQL store (every table dumped and scanned), a real tool call whose arguments
//! and output carry their own canaries, and a fault path (the provider answers 500 with the key
//! in the body, and the call is retried). The catalogue's system-prompt canary has no object
//! here: we have no operator system prompt (no such config; docs/agent.md §2).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::{Client, Server};
use crate::support::fake_provider::{FakeProvider, Script, bash_call, text_answer};
use crate::support::otlp::OtlpReceiver;
use sqlx::Connection;

// ---------------------------------------------------------------------------------------------
// Harness: an OTLP sink, a connection sink, the binary (the fake provider is the support's).
// ---------------------------------------------------------------------------------------------

/// An attacker's host: counts every connection and keeps whatever bytes arrive.
async fn attacker_sink() -> (String, Arc<AtomicUsize>, Arc<Mutex<Vec<u8>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let bytes = Arc::new(Mutex::new(Vec::new()));
    let (counted, kept) = (Arc::clone(&count), Arc::clone(&bytes));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut buffer = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buffer).await {
                    if n == 0 {
                        break;
                    }
                    kept.lock().unwrap().extend_from_slice(&buffer[..n]);
                }
            });
        }
    });
    (url, count, bytes)
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

/// Every row of every table of the public schema, as JSON text per table.
async fn dump_tables(url: &str) -> Vec<(String, String)> {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut out = Vec::new();
    for (table,) in tables {
        let rows: Vec<(String,)> =
            sqlx::query_as(&format!("SELECT row_to_json(t)::text FROM \"{table}\" t"))
                .fetch_all(&mut conn)
                .await
                .unwrap();
        let text = rows
            .into_iter()
            .map(|(r,)| r)
            .collect::<Vec<_>>()
            .join("\n");
        out.push((table, text));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// SEC-01
// ---------------------------------------------------------------------------------------------

/// SEC-01: a provider key (`sk-canary-…`, from an environment variable), a bearer token, a prompt,
/// tool arguments and a tool output each carry a unique canary through a run on PostgreSQL with
/// a real Bash tool call, a provider that fails with 500 (echoing the key) and is retried, an
/// invalid command, a missing session and a refused token. The key and token canaries appear
/// nowhere: logs at debug level, stdout, `/metrics`, exported spans, the audit log, error bodies,
/// the SSE stream, and every PostgreSQL table. The prompt and tool canaries appear in the
/// session's own stream and in the store's content tables only, never in logs or telemetry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sec_01_canary_sweep() {
    let unique = agent_runtime::ids::nanoid().replace(['-', '_'], "x");
    let key = format!("sk-canary-{unique}");
    let token = format!("tokencanary{unique}");
    let prompt = format!("userpromptcanary{unique}");
    let tool_argument = format!("toolargcanary{unique}");
    // The command text holds `$((6*7))`; only Bash's output holds `42`: two distinct canaries.
    let tool_output = format!("tooloutcanary42{unique}");
    let command = format!("echo {tool_argument} >/dev/null; echo tooloutcanary$((6*7)){unique}");

    let script: Script = {
        let command = command.clone();
        Arc::new(move |_auth, body| {
            let messages = body["messages"].to_string();
            if messages.contains("fail-5xx") {
                // The body echoes the key, as some gateways do: it must go nowhere.
                let echo = json!({"error": {"message": format!("upstream broke; saw {_auth}")}});
                return (500, vec![], echo.to_string());
            }
            let tool_answered = body["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
            if messages.contains("run-the-tool") && !tool_answered {
                (200, vec![], bash_call(&command))
            } else {
                (200, vec![], text_answer("done."))
            }
        })
    };
    let (provider, provider_url) = FakeProvider::start(script).await;
    // Spans go to an independent OTLP receiver; what it decoded is scanned.
    let receiver = OtlpReceiver::start();
    let collector_url = receiver.url.clone();
    let database_url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database (CI runs with PostgreSQL)");
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let audit_file = dir.path().join("audit.jsonl");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
data_dir = "{data}"
store = "postgres"

[gateway]
heartbeat_interval_ms = 200

[provider]
kind = "openai"
model = "gpt-test"
base_url = "{provider_url}"
api_key_env = "SEC01_PROVIDER_KEY"
max_retries = 2
initial_backoff_ms = 10
max_backoff_ms = 20

[tools]
builtin_tools = true
roots = ["{workspace}"]
mode = "yolo"

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
            data = dir.path().join("data").display(),
            workspace = workspace.display(),
            audit = audit_file.display(),
            hash = agent_runtime_gateway::token_sha256(&token),
        ),
    )
    .unwrap();
    let server = Server::start(
        &config,
        dir.path(),
        &[
            ("SEC01_PROVIDER_KEY", key.clone()),
            ("AGENT_RUNTIME_DATABASE_URL", database_url.clone()),
        ],
    );
    let url = server.url.clone();
    let mut client = Client::new(&url, &token);

    let created = client.ok("session.create", json!({})).await;
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    // A turn with a real tool call, then a provider fault that is retried.
    client
        .ok(
            "input.submit",
            json!({"sessionId": session, "input": format!("run-the-tool {prompt}")}),
        )
        .await;
    let first = client.events(&session, 1).await;
    assert!(
        first.contains(&tool_output),
        "the tool ran and its output is in the stream: {first}"
    );
    client
        .ok(
            "input.submit",
            json!({"sessionId": session, "input": format!("fail-5xx {prompt}")}),
        )
        .await;
    let stream = client.events(&session, 2).await;
    assert!(stream.contains("\"subtype\":\"error\""), "{stream}");
    let calls = provider.calls();
    assert_eq!(
        calls.len(),
        2 + 3,
        "two calls for the tool turn, three (1 + 2 retries) for the fault"
    );
    assert!(
        calls
            .iter()
            .all(|(auth, _)| *auth == format!("Bearer {key}"))
    );

    // Failing commands: a missing session, an invalid command carrying the prompt, a refused
    // token carrying the token canary, on both routes.
    let (status, _) = client
        .command("session.read", json!({"sessionId": "no-such-session"}))
        .await;
    assert_eq!(status, 404);
    let (status, _) = client
        .command(
            "input.submit",
            json!({"sessionId": session, "input": prompt, "priority": prompt}),
        )
        .await;
    assert_eq!(status, 400);
    let wrong = format!("{token}-wrong");
    let (status, _) = client
        .post(
            &wrong,
            json!({"protocolVersion": 1, "commandId": "w", "type": "session.list", "data": {}}),
        )
        .await;
    assert_eq!(status, 401);
    let events = format!("{url}/v1/agent/sessions/{session}/events");
    let (status, _) = client.get(&events, Some(&wrong)).await;
    assert_eq!(status, 401);

    let (status, metrics) = client.get(&format!("{url}/metrics"), None).await;
    assert_eq!(status, 200);
    receiver
        .wait_for(
            |_| true,
            |spans| spans.iter().any(|span| span["name"] == "chat"),
        )
        .await;
    let (logs, stdout) = server.stop();
    let spans = serde_json::to_string(&receiver.spans().await).unwrap();
    let audit = std::fs::read_to_string(&audit_file).expect("the audit log");

    let credentials = [
        ("provider key", key.as_str()),
        ("bearer token", token.as_str()),
    ];
    let content = [
        ("prompt", prompt.as_str()),
        ("tool argument", tool_argument.as_str()),
        ("tool output", tool_output.as_str()),
    ];
    let everything: Vec<(&str, &str)> = credentials.iter().chain(&content).copied().collect();
    assert!(logs.lines().count() > 10, "debug logs were captured");
    assert_absent(&everything, "the logs", &logs);
    assert_absent(&everything, "stdout", &stdout);
    assert_absent(&everything, "the metrics", &metrics);
    assert_absent(&everything, "the exported spans", &spans);
    assert_absent(&everything, "the audit log", &audit);
    assert!(client.error_bodies.len() >= 4, "{:?}", client.error_bodies);
    for body in &client.error_bodies {
        assert_absent(&everything, "an error body", body);
    }
    // The session's own stream: content yes, credentials never.
    // (User input is not an event: the prompt is in the store's transcript, checked below.)
    assert!(
        stream.contains(&tool_argument),
        "the tool call is in the stream"
    );
    assert_absent(&credentials, "the event stream", &stream);
    // PostgreSQL: credentials in no table; content only in the session's content tables.
    let tables = dump_tables(&database_url).await;
    assert!(tables.len() >= 3, "{tables:?}");
    let mut content_tables = Vec::new();
    for (table, text) in &tables {
        assert_absent(&credentials, &format!("table {table}"), text);
        if content.iter().any(|(_, marker)| text.contains(marker)) {
            content_tables.push(table.as_str());
        }
    }
    for table in &content_tables {
        assert!(
            CONTENT_TABLES.contains(table),
            "content canaries in table {table} (allowed only in {CONTENT_TABLES:?})"
        );
    }
    let prompt_tables: Vec<&str> = tables
        .iter()
        .filter(|(_, text)| text.contains(&prompt))
        .map(|(table, _)| table.as_str())
        .collect();
    assert!(
        !prompt_tables.is_empty(),
        "the store holds the prompt: {content_tables:?}"
    );
}

/// HMAC-SHA256 (RFC 2104) over sha2, to sign test tokens without another dependency.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

fn hs256_token(secret: &str, claims: &Value) -> String {
    use base64::Engine;
    let encode = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let input = format!(
        "{}.{}",
        encode(json!({"alg": "HS256", "typ": "JWT"}).to_string().as_bytes()),
        encode(claims.to_string().as_bytes())
    );
    let signature = encode(&hmac_sha256(secret.as_bytes(), input.as_bytes()));
    format!("{input}.{signature}")
}

/// SEC-01, JWT half: the signing secret of HS256 tokens and the tokens themselves (a valid one,
/// an expired one, one signed with a wrong secret, each carrying a canary claim) never reach the
/// logs, stdout, `/metrics`, the audit log, error bodies or the event stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sec_01_canary_sweep_jwt_bearer() {
    let unique = agent_runtime::ids::nanoid().replace(['-', '_'], "x");
    let secret = format!("jwtsecretcanary{unique}-long-enough-for-hs256");
    let claim = format!("jwtclaimcanary{unique}");
    let dir = tempfile::tempdir().unwrap();
    let audit_file = dir.path().join("audit.jsonl");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
data_dir = "{data}"
store = "memory"

[audit]
path = "{audit}"

[auth]
mode = "jwt"

[auth.jwt]
algorithm = "HS256"
secret_env = "SEC01_JWT_SECRET"
audience = "agent-runtime"
"#,
            data = dir.path().join("data").display(),
            audit = audit_file.display(),
        ),
    )
    .unwrap();
    let server = Server::start(&config, dir.path(), &[("SEC01_JWT_SECRET", secret.clone())]);
    let url = server.url.clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = |exp: u64| {
        json!({"aud": "agent-runtime", "tenant": "tenant-j", "sub": "subject-j",
            "scope": "session:admin", "iat": now, "nbf": now, "exp": exp, "canary": claim})
    };
    let valid = hs256_token(&secret, &claims(now + 600));
    let expired = hs256_token(&secret, &claims(now - 3600));
    let forged = hs256_token(&format!("wrong-{secret}"), &claims(now + 600));
    let mut client = Client::new(&url, &valid);
    let created = client.ok("session.create", json!({})).await;
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    client
        .ok(
            "input.submit",
            json!({"sessionId": session, "input": "demo:deltas=3"}),
        )
        .await;
    let stream = client.events(&session, 1).await;
    for bad in [&expired, &forged] {
        let (status, _) = client
            .post(
                bad,
                json!({"protocolVersion": 1, "commandId": "j", "type": "session.list", "data": {}}),
            )
            .await;
        assert_eq!(status, 401);
        let events = format!("{url}/v1/agent/sessions/{session}/events");
        let (status, _) = client.get(&events, Some(bad.as_str())).await;
        assert_eq!(status, 401);
    }
    let (status, metrics) = client.get(&format!("{url}/metrics"), None).await;
    assert_eq!(status, 200);
    let (logs, stdout) = server.stop();
    let audit = std::fs::read_to_string(&audit_file).expect("the audit log");
    assert!(
        audit.contains("subject-j"),
        "the principal is audited: {audit}"
    );
    let markers = [
        ("JWT signing secret", secret.as_str()),
        ("JWT claim", claim.as_str()),
        ("valid JWT", valid.as_str()),
        ("expired JWT", expired.as_str()),
        ("forged JWT", forged.as_str()),
    ];
    assert!(logs.lines().count() > 10, "debug logs were captured");
    assert_absent(&markers, "the logs", &logs);
    assert_absent(&markers, "stdout", &stdout);
    assert_absent(&markers, "the metrics", &metrics);
    assert_absent(&markers, "the audit log", &audit);
    assert_absent(&markers, "the event stream", &stream);
    assert_eq!(client.error_bodies.len(), 4, "{:?}", client.error_bodies);
    for body in &client.error_bodies {
        assert_absent(&markers, "an error body", body);
    }
}

/// The PostgreSQL tables meant to hold session content (events, transcripts, stored results).
const CONTENT_TABLES: &[&str] = &[
    "agent_events",
    "durable_events",
    "transcripts",
    "transcript_entries",
];

// ---------------------------------------------------------------------------------------------
// SEC-07
// ---------------------------------------------------------------------------------------------

/// SEC-07: nothing a tenant or a session controls can move the model endpoint. The provider's
/// base URL and key come only from the operator's configuration (docs/configuration.md
/// `[provider]`). Here a session's metadata and input parts name an attacker host as `base_url`,
/// proxy and model endpoint; `data`-level keys of that kind are refused; a workspace and the
/// process's working directory hold config files pointing at the attacker; and the pinned
/// provider itself answers one call with a 307 redirect to the attacker. The pinned provider gets
/// every call with the key; the attacker host gets no connection at all (redirects are never
/// followed, executor/src/provider/http.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sec_07_provider_endpoint_cannot_be_redirected() {
    let (sink, connections, received) = attacker_sink().await;
    let key = format!("sk-canary-{}", agent_runtime::ids::nanoid());
    let script: Script = {
        let sink = sink.clone();
        Arc::new(move |_auth, body| {
            if body["messages"].to_string().contains("redirect-me") {
                let location = format!("{sink}/v1/chat/completions");
                (307, vec![("location", location)], String::new())
            } else {
                (200, vec![], text_answer("pinned."))
            }
        })
    };
    let (provider, provider_url) = FakeProvider::start(script).await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let hostile = format!(
        "[provider]\nkind = \"openai\"\nmodel = \"x\"\nbase_url = \"{sink}/v1\"\napi_key_env = \"SEC07_KEY\"\n"
    );
    for place in [&workspace, &dir.path().to_path_buf()] {
        for name in [".agent-runtime.toml", "agent-runtime.toml", "config.toml"] {
            std::fs::write(place.join(name), &hostile).unwrap();
        }
    }
    let token = "sec07-token-of-a-tenant";
    let config = dir.path().join("operator.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
data_dir = "{data}"
store = "memory"

[provider]
kind = "openai"
model = "gpt-test"
base_url = "{provider_url}"
api_key_env = "SEC07_KEY"
max_retries = 0

[tools]
builtin_tools = true
roots = ["{workspace}"]

[[auth.tokens]]
sha256 = "{hash}"
tenant = "tenant-s"
subject = "subject-s"
scopes = ["session:admin"]
"#,
            data = dir.path().join("data").display(),
            workspace = workspace.display(),
            hash = agent_runtime_gateway::token_sha256(token),
        ),
    )
    .unwrap();
    let server = Server::start(&config, &workspace, &[("SEC07_KEY", key.clone())]);
    let mut client = Client::new(&server.url, token);

    // Endpoint settings as command fields: unknown keys, refused.
    for (kind, data) in [
        ("session.create", json!({"base_url": format!("{sink}/v1")})),
        ("session.create", json!({"provider": {"base_url": sink}})),
        ("session.create", json!({"model_endpoint": sink})),
    ] {
        let (status, body) = client.command(kind, data).await;
        assert_eq!(status, 400, "{kind}: {body}");
        assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    }
    // As metadata: opaque data that configures nothing.
    let hostile_metadata = json!({
        "base_url": format!("{sink}/v1"), "provider_base_url": sink, "baseURL": sink,
        "HTTPS_PROXY": sink, "https_proxy": sink, "proxy": sink, "model_endpoint": sink,
        "provider": {"kind": "openai", "base_url": sink},
    });
    let created = client
        .ok("session.create", json!({"metadata": hostile_metadata}))
        .await;
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    for (field, value) in [("base_url", json!(sink)), ("providerOptions", json!({}))] {
        let mut data = json!({"sessionId": session, "input": "hi"});
        data[field] = value;
        let (status, _) = client.command("input.submit", data).await;
        assert_eq!(status, 400, "input.submit with {field} at data level");
    }
    // A turn whose text part carries provider options naming the attacker (opaque, §2.1).
    client
        .ok(
            "input.submit",
            json!({"sessionId": session, "input": [{"type": "text", "text": "hello",
                "providerOptions": {"base_url": sink, "baseURL": sink, "openai": {"baseURL": sink}}}]}),
        )
        .await;
    let first = client.events(&session, 1).await;
    assert!(first.contains("pinned."), "{first}");
    // The pinned provider redirects: not followed, the request ends in an error.
    client
        .ok(
            "input.submit",
            json!({"sessionId": session, "input": "redirect-me"}),
        )
        .await;
    let stream = client.events(&session, 2).await;
    assert!(stream.contains("\"subtype\":\"error\""), "{stream}");

    let (logs, _) = server.stop();
    let calls = provider.calls();
    assert_eq!(calls.len(), 2, "both turns went to the pinned provider");
    assert!(
        calls
            .iter()
            .all(|(auth, _)| *auth == format!("Bearer {key}"))
    );
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "the attacker host got no connection: {}",
        String::from_utf8_lossy(&received.lock().unwrap())
    );
    assert!(!logs.contains(&key), "and the key was not logged");
}
