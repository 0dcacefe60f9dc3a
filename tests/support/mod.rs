//! Test harness: a real `serve` server on a loopback port, an HTTP client, and an SSE reader.

#![allow(dead_code)]

pub mod client;
pub mod executors;
pub mod history;
pub mod history_clients;
pub mod hostile_mcp;
pub mod mcp_server;
pub mod tool_calls;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agent_runtime::protocol::Scope;
use agent_runtime::secret::Secret;
use agent_runtime_cli::config::{ServeConfig, StoreKind};
use agent_runtime_cli::{Overrides, RunningServer, start_with};
use agent_runtime_gateway::TokenGrant;
use futures_util::StreamExt;
use serde_json::{Value, json};

pub const TOKEN_A: &str = "token-tenant-a";
pub const TOKEN_A2: &str = "token-tenant-a-other-subject";
pub const TOKEN_B: &str = "token-tenant-b";
pub const TOKEN_READ_ONLY: &str = "token-read-only";
pub const TOKEN_NO_READ: &str = "token-no-read";
/// Tenant A with every scope, `session:admin` included.
pub const TOKEN_ADMIN: &str = "token-tenant-a-admin";

/// Tokens of the test tenants.
pub fn test_tokens() -> Vec<TokenGrant> {
    let all = [
        Scope::SessionCreate,
        Scope::SessionRead,
        Scope::SessionWrite,
        Scope::PermissionResolve,
    ];
    vec![
        TokenGrant::for_token(TOKEN_A, "tenant-a", "user-a", &all),
        TokenGrant::for_token(TOKEN_A2, "tenant-a", "user-a2", &all),
        TokenGrant::for_token(TOKEN_B, "tenant-b", "user-b", &all),
        TokenGrant::for_token(TOKEN_READ_ONLY, "tenant-a", "reader", &[Scope::SessionRead]),
        TokenGrant::for_token(
            TOKEN_ADMIN,
            "tenant-a",
            "admin",
            &[all.as_slice(), &[Scope::SessionAdmin]].concat(),
        ),
        TokenGrant::for_token(
            TOKEN_NO_READ,
            "tenant-a",
            "writer",
            &[Scope::SessionCreate, Scope::SessionWrite],
        ),
    ]
}

/// A configuration for tests: port 0, fast heartbeats and demo deltas.
pub fn test_config(store: StoreKind, data_dir: &Path) -> ServeConfig {
    let mut config = ServeConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_dir: data_dir.to_path_buf(),
        store,
        tokens: test_tokens(),
        ..ServeConfig::default()
    };
    config.executor.demo_slow_delta_interval = Duration::from_millis(50);
    config.gateway.heartbeat_interval = Duration::from_millis(200);
    config.gateway.shutdown_grace = Duration::from_secs(2);
    config
}

/// [`test_config`] on the memory store (PostgreSQL instead when the run selects it).
pub fn memory_config() -> ServeConfig {
    test_config(StoreKind::Memory, &std::env::temp_dir())
}

/// The environment variable that runs the suite on another backend: `postgres` moves every
/// server that would use the memory store onto a fresh PostgreSQL database, and so does every
/// injected store built by [`selected_store`] (tests that use a JSONL directory on purpose keep
/// theirs).
pub const TEST_STORE_ENV: &str = "AGENT_RUNTIME_TEST_STORE";

pub fn postgres_selected() -> bool {
    std::env::var(TEST_STORE_ENV).is_ok_and(|value| value == "postgres")
}

/// `config` on a fresh PostgreSQL database (see `agent_runtime_store::testing::postgres`).
pub async fn on_fresh_postgres(mut config: ServeConfig) -> ServeConfig {
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    config.store = StoreKind::Postgres;
    config.database_url = Some(Secret::new(url));
    config
}

/// A store to inject into a test server: a memory store, or with `AGENT_RUNTIME_TEST_STORE=postgres`
/// a PostgreSQL store on a fresh database, with the same event retention. Tests that inject a store
/// (to append events directly, or to wrap it in a `FaultyStore`) thus run on both backends.
pub async fn selected_store(
    max_events_per_session: u64,
) -> std::sync::Arc<dyn agent_runtime_store::Store> {
    use agent_runtime_store::{MemoryStore, PostgresOptions, PostgresStore, StoreOptions};
    if postgres_selected() {
        let url = agent_runtime_store::testing::postgres::fresh_database_url()
            .await
            .expect("a test database");
        let options = PostgresOptions {
            max_events_per_session,
            ..PostgresOptions::default()
        };
        std::sync::Arc::new(
            PostgresStore::connect(&url, options)
                .await
                .expect("connect"),
        )
    } else {
        std::sync::Arc::new(MemoryStore::new(StoreOptions {
            max_events_per_session,
            ..StoreOptions::default()
        }))
    }
}

/// The default retention of a session's events (decision S4).
pub const DEFAULT_RETENTION: u64 = agent_runtime_store::options::DEFAULT_MAX_EVENTS_PER_SESSION;

/// The configuration of a durable store for restart cases: JSONL in `dir`, or (with
/// `AGENT_RUNTIME_TEST_STORE=postgres`) one fresh database shared by every restart.
pub async fn durable_config(dir: &Path) -> ServeConfig {
    let config = test_config(StoreKind::Jsonl, dir);
    if postgres_selected() {
        on_fresh_postgres(config).await
    } else {
        config
    }
}

pub struct TestServer {
    pub server: Option<RunningServer>,
    pub base: String,
    pub client: reqwest::Client,
}

impl TestServer {
    pub async fn start(config: ServeConfig) -> TestServer {
        TestServer::start_with(config, Overrides::default()).await
    }

    pub async fn start_with(mut config: ServeConfig, overrides: Overrides) -> TestServer {
        if config.store == StoreKind::Memory && overrides.store.is_none() && postgres_selected() {
            config = on_fresh_postgres(config).await;
        }
        let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
        let server = start_with(config, listener, overrides)
            .await
            .expect("server starts");
        TestServer::from_running(server)
    }

    /// Wraps a server started elsewhere (e.g. a cluster gateway).
    pub fn from_running(server: RunningServer) -> TestServer {
        let base = format!("http://{}/v1/agent", server.address);
        TestServer {
            server: Some(server),
            base,
            client: agent_runtime_executor::provider::client_builder()
                .build()
                .unwrap(),
        }
    }

    pub async fn memory() -> TestServer {
        TestServer::start(memory_config()).await
    }

    /// `http://host:port`, without the API prefix.
    pub fn origin(&self) -> &str {
        self.base.trim_end_matches("/v1/agent")
    }

    /// `host:port`, for raw connections.
    pub fn authority(&self) -> String {
        self.origin().trim_start_matches("http://").to_owned()
    }

    /// `GET /metrics` (no token) as text.
    pub async fn metrics_text(&self) -> String {
        let root = self.origin();
        let response = self.client.get(format!("{root}/metrics")).send().await;
        response.unwrap().text().await.unwrap()
    }

    /// `GET readyz` with no token: (status, body).
    pub async fn readyz(&self) -> (u16, Value) {
        self.readyz_with(self.client.get(format!("{}/readyz", self.base)))
            .await
    }

    /// `GET readyz` as `token`'s bearer (`session:admin` sees the details): (status, body).
    pub async fn readyz_as(&self, token: &str) -> (u16, Value) {
        let request = self.client.get(format!("{}/readyz", self.base));
        self.readyz_with(request.bearer_auth(token)).await
    }

    async fn readyz_with(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.send().await.expect("readyz request sent");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
            server.wait().await.expect("clean shutdown");
        }
    }

    /// Stops a server whose store is gone (a crash injected with `FaultyStore::crash_at`): its
    /// shutdown cannot close the store cleanly, and that is expected.
    pub async fn stop_after_crash(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
            let _ = server.wait().await;
        }
    }

    /// Sends a command body; returns (status, retry-after, body).
    pub async fn post_raw(&self, token: &str, body: Vec<u8>) -> (u16, Option<String>, Value) {
        let response = self
            .client
            .post(format!("{}/commands", self.base))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, retry_after, body)
    }

    /// Sends a command and returns (status, body).
    pub async fn command(
        &self,
        token: &str,
        command_id: &str,
        kind: &str,
        data: Value,
    ) -> (u16, Value) {
        let body =
            json!({ "protocolVersion": 1, "commandId": command_id, "type": kind, "data": data });
        let (status, _, body) = self
            .post_raw(token, serde_json::to_vec(&body).unwrap())
            .await;
        (status, body)
    }

    /// Sends a command that must succeed and returns its `data`.
    pub async fn ok(&self, token: &str, kind: &str, data: Value) -> Value {
        let id = agent_runtime::ids::nanoid();
        let (status, body) = self.command(token, &id, kind, data).await;
        assert_eq!(status, 200, "{kind} failed: {body}");
        assert_eq!(body["ok"], true, "{body}");
        body["data"].clone()
    }

    pub async fn create_session(&self, token: &str) -> String {
        let data = self.ok(token, "session.create", json!({})).await;
        data["session"]["sessionId"].as_str().unwrap().to_owned()
    }

    pub async fn submit(&self, token: &str, session_id: &str, text: &str) -> Value {
        self.ok(
            token,
            "input.submit",
            json!({ "sessionId": session_id, "input": text }),
        )
        .await
    }

    /// Submits `text`; returns its request id and the session's events after `after` up to that
    /// request's `result`.
    pub async fn run_request(
        &self,
        token: &str,
        session_id: &str,
        text: &str,
        after: u64,
    ) -> (String, Vec<Value>) {
        let submitted = self.submit(token, session_id, text).await;
        let request_id = submitted["requestId"].as_str().unwrap().to_owned();
        let events = self
            .until_result(token, session_id, after, &request_id)
            .await;
        (request_id, events)
    }

    /// Reads the session's events after `after` up to the `result` of `request_id`.
    pub async fn until_result(
        &self,
        token: &str,
        session_id: &str,
        after: u64,
        request_id: &str,
    ) -> Vec<Value> {
        self.collect_events(token, session_id, after, |event| {
            is_result(event) && event["requestId"] == request_id
        })
        .await
    }

    /// Reads the session's events after `after` up to a `permission.requested`; returns its
    /// `permissionRequestId`.
    pub async fn permission_request(&self, token: &str, session_id: &str, after: u64) -> String {
        let events = self
            .collect_events(token, session_id, after, |e| {
                e["type"] == "permission.requested"
            })
            .await;
        let last = events.last().expect("a permission.requested event");
        assert_eq!(last["type"], "permission.requested", "{last}");
        last["data"]["permissionRequestId"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Answers a pending permission request (`permission.resolve`, which must succeed).
    pub async fn resolve(&self, token: &str, session_id: &str, permission: &str, approved: bool) {
        let data = json!({
            "sessionId": session_id,
            "permissionRequestId": permission,
            "approved": approved,
        });
        self.ok(token, "permission.resolve", data).await;
    }

    /// `session.read`, which must succeed: its `data`.
    pub async fn read(&self, token: &str, session_id: &str) -> Value {
        self.ok(token, "session.read", json!({ "sessionId": session_id }))
            .await
    }

    /// Opens the SSE stream; returns the raw response.
    pub async fn events(
        &self,
        token: &str,
        session_id: &str,
        query: &str,
        last_event_id: Option<&str>,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .get(format!("{}/sessions/{session_id}/events{query}", self.base))
            .header("authorization", format!("Bearer {token}"));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        request.send().await.expect("events request sent")
    }

    /// Reads events after `after` until `until` matches an event (or the stream ends).
    pub async fn collect_events(
        &self,
        token: &str,
        session_id: &str,
        after: u64,
        until: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let response = self
            .events(token, session_id, &format!("?after={after}"), None)
            .await;
        assert_eq!(response.status().as_u16(), 200);
        let mut reader = SseReader::new(response);
        let mut events = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while let Some(frame) = tokio::time::timeout_at(deadline, reader.next_event())
            .await
            .expect("events arrive before the deadline")
        {
            let done = until(&frame.data);
            events.push(frame.data);
            if done {
                break;
            }
        }
        events
    }
}

/// One parsed SSE frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Value,
}

impl Frame {
    /// One event frame's text (its `id:`, `event:` and `data:` lines; `data` must be JSON).
    pub fn parse(raw: &str) -> Frame {
        let mut frame = Frame {
            id: None,
            event: None,
            data: Value::Null,
        };
        for line in raw.lines() {
            if let Some(value) = line.strip_prefix("id: ") {
                frame.id = Some(value.to_owned());
            } else if let Some(value) = line.strip_prefix("event: ") {
                frame.event = Some(value.to_owned());
            } else if let Some(value) = line.strip_prefix("data: ") {
                frame.data = serde_json::from_str(value).expect("data is JSON");
            }
        }
        frame
    }
}

/// A minimal SSE parser over a response body (frames end at a blank line).
pub struct SseReader {
    stream: futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
    pub heartbeats: usize,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            stream: response.bytes_stream().boxed(),
            buffer: String::new(),
            heartbeats: 0,
        }
    }

    /// The next event frame, skipping heartbeats; `None` at the end of the stream.
    pub async fn next_event(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let raw: String = self.buffer.drain(..end + 2).collect();
                if raw.starts_with(':') {
                    self.heartbeats += 1;
                    continue;
                }
                return Some(Frame::parse(&raw));
            }
            match self.stream.next().await {
                Some(Ok(bytes)) => self
                    .buffer
                    .push_str(std::str::from_utf8(&bytes).expect("UTF-8")),
                Some(Err(_)) | None => return None,
            }
        }
    }
}

pub fn stream_type(event: &Value) -> Option<&str> {
    if event["type"] == "session.stream" {
        event["data"]["type"].as_str()
    } else {
        None
    }
}

pub fn is_result(event: &Value) -> bool {
    stream_type(event) == Some("result")
}

/// The resident set of this test process (an in-process server runs inside it), in bytes.
pub fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

pub const REPLAY_HEADER: &str = "idempotent-replayed";

/// One raw answer: status, the replay header, `retry-after`, and the exact body bytes.
pub struct Raw {
    pub status: u16,
    pub replayed: bool,
    pub retry_after: Option<String>,
    pub bytes: Vec<u8>,
}

impl Raw {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap()
    }
}

/// Sends a command body and keeps the whole answer.
pub async fn post(server: &TestServer, token: &str, body: &[u8]) -> Raw {
    let response = server
        .client
        .post(format!("{}/commands", server.base))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    };
    let replayed = match header(REPLAY_HEADER) {
        None => false,
        Some(value) => {
            assert_eq!(value, "true");
            true
        }
    };
    let retry_after = header("retry-after");
    let bytes = response.bytes().await.unwrap().to_vec();
    Raw {
        status,
        replayed,
        retry_after,
        bytes,
    }
}

/// A Python that can import `modules` (scripts/test.sh installs the test tools with pip, or else
/// Debian's packages for the system Python).
pub fn python_with(modules: &str) -> &'static str {
    ["python3", "/usr/bin/python3"]
        .into_iter()
        .find(|python| {
            std::process::Command::new(python)
                .args(["-c", &format!("import {modules}")])
                .output()
                .is_ok_and(|output| output.status.success())
        })
        .unwrap_or_else(|| panic!("no Python has {modules}: scripts/test.sh installs them"))
}
