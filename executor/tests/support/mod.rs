//! Test harness of the executor: a real `InProcessExecutor` on a `MemoryStore`, and a scripted
//! model-provider HTTP server on loopback that replays recorded SSE bodies.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::clock;
use agent_runtime::executor_port::{CommandContext, SessionCommands};
use agent_runtime::protocol::command::{
    CreateSessionData, PermissionScope, ResolvePermissionData, SessionRef, SubmitInputData,
};
use agent_runtime::protocol::content::UserContent;
use agent_runtime::protocol::{EventEnvelope, Principal, Scope};
use agent_runtime::telemetry::{NoTelemetry, SharedTelemetry};
use agent_runtime_executor::provider::ModelProvider;
use agent_runtime_executor::tools::ToolRegistry;
use agent_runtime_executor::{ExecutorConfig, ExecutorDeps, InProcessExecutor, StoreSink};
use agent_runtime_store::{MemoryStore, Store, StoreOptions};
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::Value;

mod script;

// Not every test binary that includes the support module drives a scripted model.
#[allow(unused_imports)]
pub use script::{ScriptedModel, tool_turn};

pub const TENANT: &str = "tenant-t";

pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

/// An executor with its store, driven through the `SessionExecutor` port.
pub struct Harness {
    pub executor: InProcessExecutor,
    pub store: Arc<dyn Store>,
    context: CommandContext,
}

impl Harness {
    pub fn new(
        provider: Arc<dyn ModelProvider>,
        tools: ToolRegistry,
        config: ExecutorConfig,
    ) -> Self {
        Self::with_telemetry(provider, tools, config, Arc::new(NoTelemetry))
    }

    pub fn with_telemetry(
        provider: Arc<dyn ModelProvider>,
        tools: ToolRegistry,
        config: ExecutorConfig,
        telemetry: SharedTelemetry,
    ) -> Self {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
        let executor = InProcessExecutor::new(
            config,
            ExecutorDeps {
                store: Arc::clone(&store),
                sink: Arc::new(StoreSink::new(Arc::clone(&store), telemetry.clone())),
                provider,
                tools,
                profiles: Vec::new(),
                clock: clock::system(),
                leases: Arc::new(agent_runtime_executor::NoLeases),
                telemetry,
            },
        );
        let scopes = [
            Scope::SessionCreate,
            Scope::SessionRead,
            Scope::SessionWrite,
            Scope::PermissionResolve,
        ];
        Self {
            executor,
            store,
            context: CommandContext {
                principal: Principal::new(TENANT, "user-t", &scopes),
                command_id: "cmd".to_owned(),
                trace: None,
                execution_id: None,
                chosen_session_id: None,
            },
        }
    }

    pub async fn create(&self) -> String {
        let session = self
            .executor
            .create(&self.context, CreateSessionData { metadata: None })
            .await
            .expect("session created");
        session.session_id
    }

    pub async fn submit(&self, session_id: &str, text: &str) {
        self.executor
            .submit(
                &self.context,
                SubmitInputData {
                    session_id: session_id.to_owned(),
                    input: UserContent::Text(text.to_owned()),
                    priority: None,
                    expected_request_id: None,
                    max_turns: None,
                },
            )
            .await
            .expect("input accepted");
    }

    pub async fn abort(&self, session_id: &str) {
        self.executor
            .abort(&self.context, SessionRef::new(session_id))
            .await
            .expect("abort accepted");
    }

    pub async fn resolve(&self, session_id: &str, permission_request_id: &str, approved: bool) {
        self.executor
            .resolve_permission(
                &self.context,
                ResolvePermissionData {
                    session_id: session_id.to_owned(),
                    permission_request_id: permission_request_id.to_owned(),
                    approved,
                    reason: None,
                    scope: Some(PermissionScope::Once),
                },
            )
            .await
            .expect("permission resolved");
    }

    /// Every event after `after` up to and including the first one `until` accepts.
    pub async fn events_until(
        &self,
        session_id: &str,
        after: u64,
        until: impl Fn(&EventEnvelope) -> bool,
    ) -> Vec<EventEnvelope> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        let mut cursor = after;
        loop {
            let page = self
                .store
                .read_events(TENANT, session_id, cursor, 1000)
                .await
                .expect("events readable");
            for event in page.events {
                cursor = event.sequence;
                let done = until(&event);
                seen.push(event);
                if done {
                    return seen;
                }
            }
            let wait = self.store.wait_for_events(TENANT, session_id, cursor);
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                panic!(
                    "no matching event before the deadline; saw {}",
                    summary(&seen).join(", ")
                );
            }
        }
    }

    /// The events of one request, through its `result`.
    pub async fn until_result(&self, session_id: &str, after: u64) -> Vec<EventEnvelope> {
        self.events_until(session_id, after, |e| stream_type(e) == "result")
            .await
    }
}

pub fn stream_type(event: &EventEnvelope) -> String {
    event
        .data
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| event.event_type.as_str().to_owned())
}

/// `type` or `type:detail` per event, for comparing sequences.
pub fn summary(events: &[EventEnvelope]) -> Vec<String> {
    events
        .iter()
        .map(|event| {
            let kind = stream_type(event);
            let detail = match kind.as_str() {
                "content" | "thinking" => event.data["delta"].as_str().map(str::to_owned),
                "tool_use" | "tool_result" | "tool_progress" => {
                    event.data["name"].as_str().map(str::to_owned)
                }
                "turn_start" | "turn_end" => Some(event.data["turn"].to_string()),
                "result" => event.data["subtype"].as_str().map(str::to_owned),
                "error" => event.data["code"].as_str().map(str::to_owned),
                "permission.requested" => event.data["toolName"].as_str().map(str::to_owned),
                _ => None,
            };
            match detail {
                Some(detail) => format!("{kind}:{detail}"),
                None => kind,
            }
        })
        .collect()
}

/// What the scripted provider answers to one call.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 with this SSE body.
    Sse(String),
    /// 200, this body, then the body stays open forever.
    SseThenHang(String),
    /// This status, an optional `retry-after`, and a body.
    Status(u16, Option<&'static str>, String),
    /// Never answers (the client's timeout must fire).
    Stall,
}

/// One call the scripted server received.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Clone, Default)]
struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    received: Arc<Mutex<Vec<Received>>>,
    /// Set when the client dropped a body the server was still streaming.
    disconnected: Arc<AtomicBool>,
}

pub struct ScriptedServer {
    pub base_url: String,
    script: Script,
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl ScriptedServer {
    pub async fn start(replies: Vec<Reply>) -> Self {
        let script = Script {
            replies: Arc::new(Mutex::new(replies.into())),
            ..Script::default()
        };
        let state = script.clone();
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: HeaderMap, body: axum::body::Bytes| {
                let state = state.clone();
                async move { answer(state, uri, headers, body).await }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            base_url: format!("http://{address}"),
            script,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.script.received.lock().unwrap().clone()
    }

    pub fn disconnected(&self) -> bool {
        self.script.disconnected.load(Ordering::SeqCst)
    }

    /// Waits (bounded) until the client closed a streaming body.
    pub async fn wait_disconnected(&self) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < deadline {
            if self.disconnected() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

async fn answer(
    script: Script,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    script.received.lock().unwrap().push(Received {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers,
        body,
    });
    let reply = script.replies.lock().unwrap().pop_front();
    let sse = |body: Body| {
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap()
    };
    match reply {
        Some(Reply::Sse(text)) => sse(Body::from(text)),
        Some(Reply::SseThenHang(text)) => {
            let flag = DropFlag(Arc::clone(&script.disconnected));
            let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(
                axum::body::Bytes::from(text),
            )])
            .chain(futures_util::stream::pending())
            .map(move |chunk| {
                let _keep = &flag;
                chunk
            });
            sse(Body::from_stream(chunks))
        }
        Some(Reply::Status(status, retry_after, text)) => {
            let mut response = Response::builder().status(status);
            if let Some(value) = retry_after {
                response = response.header("retry-after", value);
            }
            response.body(Body::from(text)).unwrap()
        }
        Some(Reply::Stall) => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        None => Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("script exhausted"))
            .unwrap(),
    }
}

/// The error a failed tool call reports to the model (empty when there is none).
pub fn error_text(outcome: &agent_runtime_executor::tools::ToolOutcome) -> &str {
    outcome.output["error"].as_str().unwrap_or_default()
}
