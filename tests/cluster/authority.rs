//! P0 catalogue entry AUTH-11 (executor authentication and authority, docs/reliability.md) on the
//! in-process cluster shape of tests/cluster/inprocess.rs: real gRPC on loopback, one store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::executors::{
    executor_config, gateway_config, start_demo_executor, start_test_gateway,
};
use crate::support::*;
use agent_runtime::clock::{self, SharedClock};
use agent_runtime_cli::cluster::RunningExecutor;
use agent_runtime_grpc::session_executor_client::SessionExecutorClient;
use agent_runtime_grpc::session_executor_server::{SessionExecutor, SessionExecutorServer};
use agent_runtime_grpc::{
    CallContext, CommandReply, CommandRequest, EventFrame, LoadReply, LoadRequest, Principal,
    ReleaseReply, SessionKey, SubscribeRequest, TakeReply, TenantRequest, ToolsReply,
};
use agent_runtime_store::{MemoryStore, Store, StoreOptions};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Value, json};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

const SECRET: &str = "cluster-secret-for-p0-tests";
/// Text only the fake executor ever produces: it must never reach a client.
const FOREIGN_MARKER: &str = "FOREIGN-FRAME-MARKER-4d1c";

async fn executor(
    store: &Arc<dyn Store>,
    clock: &SharedClock,
    listener: tokio::net::TcpListener,
    advertise: String,
) -> RunningExecutor {
    let config = executor_config("executor-p0", advertise, SECRET);
    start_demo_executor(config, store.clone(), clock, listener).await
}

async fn gateway(store: &Arc<dyn Store>, clock: &SharedClock) -> TestServer {
    start_test_gateway(gateway_config(), store.clone(), clock, SECRET).await
}

fn context(tenant: &str, session: &str) -> Option<CallContext> {
    Some(CallContext {
        principal: Some(Principal {
            tenant_id: tenant.to_owned(),
            subject: "user-a".to_owned(),
            scopes: vec!["session:admin".to_owned()],
        }),
        command_id: format!("grpc-{session}"),
        execution_id: String::new(),
        chosen_session_id: String::new(),
    })
}

/// Calls every RPC of the executor with `authorization` set to `header` (none if `None`);
/// returns each RPC's status code.
async fn every_rpc(address: &str, header: Option<&str>) -> Vec<(&'static str, tonic::Code)> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = SessionExecutorClient::new(channel);
    fn authorized<T>(message: T, header: Option<&str>) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(value) = header {
            request
                .metadata_mut()
                .insert("authorization", MetadataValue::try_from(value).unwrap());
        }
        request
    }
    let command = |kind: &str| CommandRequest {
        context: context("tenant-a", "s"),
        command_type: kind.to_owned(),
        data_json: br#"{"sessionId":"s"}"#.to_vec(),
    };
    let code = |result: Result<(), Status>| match result {
        Ok(()) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    // One RPC's status code, the request sent with the header under test.
    macro_rules! status_of {
        ($rpc:ident, $message:expr) => {
            code(client.$rpc(authorized($message, header)).await.map(drop))
        };
    }
    let create = CommandRequest {
        data_json: b"{}".to_vec(),
        ..command("session.create")
    };
    let subscribe = SubscribeRequest {
        context: context("tenant-a", "s"),
        session_id: "s".to_owned(),
        after: 0,
    };
    vec![
        ("Execute session.create", status_of!(execute, create)),
        (
            "Execute session.read",
            status_of!(execute, command("session.read")),
        ),
        (
            "Execute session.resume",
            status_of!(execute, command("session.resume")),
        ),
        (
            "Execute session.fork",
            status_of!(execute, command("session.fork")),
        ),
        (
            "Execute input.submit",
            status_of!(execute, command("input.submit")),
        ),
        (
            "Execute request.abort",
            status_of!(execute, command("request.abort")),
        ),
        (
            "Execute session.close",
            status_of!(execute, command("session.close")),
        ),
        (
            "Execute permission.resolve",
            status_of!(execute, command("permission.resolve")),
        ),
        ("Subscribe", status_of!(subscribe, subscribe)),
        ("Load", status_of!(load, LoadRequest {})),
        ("Release", status_of!(release, SessionKey::default())),
        ("Take", status_of!(take, SessionKey::default())),
    ]
}

/// A malicious but authenticated executor in front of a real one: unary calls are forwarded,
/// and every `Subscribe` stream is laced with frames the store never held (another tenant's
/// session, sequences far ahead, backwards and zero, bytes that are not JSON).
struct LyingExecutor {
    upstream: SessionExecutorClient<Channel>,
    /// Tenant B's session, set once it exists.
    foreign_session: Arc<std::sync::Mutex<String>>,
    /// Subscribe streams served (the test checks the lies were actually told).
    subscribes: Arc<AtomicUsize>,
    /// When set, every command RPC answers this instead of forwarding (FUZZ-09).
    garbled: Arc<std::sync::Mutex<Option<Result<CommandReply, Status>>>>,
}

impl LyingExecutor {
    fn forward<T>(&self, request: Request<T>) -> Request<T> {
        let mut forwarded = Request::new(request.into_inner());
        forwarded.metadata_mut().insert(
            "authorization",
            MetadataValue::try_from(format!("Bearer {SECRET}")).unwrap(),
        );
        forwarded
    }

    fn garbled(&self) -> Option<Result<Response<CommandReply>, Status>> {
        let garbled = self.garbled.lock().unwrap().clone();
        garbled.map(|answer| answer.map(Response::new))
    }

    fn foreign(&self) -> String {
        self.foreign_session.lock().unwrap().clone()
    }

    fn lies(&self, target: &str, after: u64) -> Vec<EventFrame> {
        let envelope = |session: &str, sequence: u64| {
            serde_json::to_vec(&json!({
                "protocolVersion": 1, "eventId": format!("{session}:{sequence}"),
                "sessionId": session, "sequence": sequence, "type": "session.stream",
                "requestId": "forged", "createdAt": "2026-01-01T00:00:00.000Z",
                "data": {"sessionId": session, "type": "content", "delta": FOREIGN_MARKER},
            }))
            .unwrap()
        };
        vec![
            EventFrame {
                sequence: after + 1,
                envelope_json: envelope(&self.foreign(), after + 1),
            },
            EventFrame {
                sequence: after + 1,
                envelope_json: envelope(target, after + 1),
            },
            EventFrame {
                sequence: after + 1_000,
                envelope_json: envelope(target, after + 1_000),
            },
            EventFrame {
                sequence: after.saturating_sub(1),
                envelope_json: envelope(target, after.saturating_sub(1)),
            },
            EventFrame {
                sequence: 0,
                envelope_json: FOREIGN_MARKER.as_bytes().to_vec(),
            },
        ]
    }
}

/// The executor service of the liar: `Execute` answers the garbled reply when one is set and is
/// forwarded otherwise; `Subscribe` is laced with lies; `Load` is forwarded.
#[tonic::async_trait]
impl SessionExecutor for LyingExecutor {
    async fn execute(
        &self,
        request: Request<CommandRequest>,
    ) -> Result<Response<CommandReply>, Status> {
        if let Some(garbled) = self.garbled() {
            return garbled;
        }
        self.upstream.clone().execute(self.forward(request)).await
    }

    type SubscribeStream = BoxStream<'static, Result<EventFrame, Status>>;

    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        self.laced_subscribe(request).await
    }

    async fn load(&self, request: Request<LoadRequest>) -> Result<Response<LoadReply>, Status> {
        self.upstream.clone().load(self.forward(request)).await
    }

    async fn release(
        &self,
        request: Request<SessionKey>,
    ) -> Result<Response<ReleaseReply>, Status> {
        self.upstream.clone().release(self.forward(request)).await
    }

    async fn take(&self, request: Request<SessionKey>) -> Result<Response<TakeReply>, Status> {
        self.upstream.clone().take(self.forward(request)).await
    }

    async fn tools(&self, request: Request<TenantRequest>) -> Result<Response<ToolsReply>, Status> {
        self.upstream.clone().tools(self.forward(request)).await
    }
}

impl LyingExecutor {
    async fn laced_subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<BoxStream<'static, Result<EventFrame, Status>>>, Status> {
        self.subscribes.fetch_add(1, Ordering::SeqCst);
        let target = request.get_ref().session_id.clone();
        let after = request.get_ref().after;
        let real = self
            .upstream
            .clone()
            .subscribe(self.forward(request))
            .await?
            .into_inner();
        let first = futures_util::stream::iter(self.lies(&target, after).into_iter().map(Ok));
        let foreign = self.foreign();
        // After every real frame, more lies about the frames around it.
        let laced = real.flat_map(move |frame| {
            let mut frames = vec![frame.clone()];
            if let Ok(frame) = frame {
                let liar = LyingFrames(foreign.clone());
                frames.extend(liar.around(&target, frame.sequence).into_iter().map(Ok));
            }
            futures_util::stream::iter(frames)
        });
        Ok(Response::new(first.chain(laced).boxed()))
    }
}

/// The lies told after each real frame.
struct LyingFrames(String);

impl LyingFrames {
    fn around(&self, target: &str, sequence: u64) -> Vec<EventFrame> {
        let frame = |session: &str, sequence: u64| EventFrame {
            sequence,
            envelope_json: serde_json::to_vec(&json!({
                "sessionId": session, "sequence": sequence, "type": "session.stream",
                "data": {"sessionId": session, "type": "content", "delta": FOREIGN_MARKER},
            }))
            .unwrap(),
        };
        vec![
            frame(&self.0, sequence),
            frame(target, sequence + 1),
            frame(target, sequence.saturating_sub(2)),
        ]
    }
}

/// A [`LyingExecutor`] served on `listener`, in front of the real executor at `real`.
struct Liar {
    subscribes: Arc<AtomicUsize>,
    foreign: Arc<std::sync::Mutex<String>>,
    garbled: Arc<std::sync::Mutex<Option<Result<CommandReply, Status>>>>,
    serving: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

/// A real executor on one store, advertising the address the liar will listen on (so the gateway
/// only ever talks to the liar): the store, the clock, the executor, its own address and the
/// liar's listener.
async fn real_behind_a_liar() -> (
    Arc<dyn Store>,
    SharedClock,
    RunningExecutor,
    std::net::SocketAddr,
    tokio::net::TcpListener,
) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let real_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let real_address = real_listener.local_addr().unwrap();
    let liar_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let liar_address = liar_listener.local_addr().unwrap();
    let real = executor(&store, &clock, real_listener, liar_address.to_string()).await;
    (store, clock, real, real_address, liar_listener)
}

async fn serve_liar(real: std::net::SocketAddr, listener: tokio::net::TcpListener) -> Liar {
    let subscribes = Arc::new(AtomicUsize::new(0));
    let foreign = Arc::new(std::sync::Mutex::new(String::from("not-yet")));
    let garbled = Arc::default();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{real}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let liar = LyingExecutor {
        upstream: SessionExecutorClient::new(channel),
        foreign_session: Arc::clone(&foreign),
        subscribes: Arc::clone(&subscribes),
        garbled: Arc::clone(&garbled),
    };
    let incoming = futures_util::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| stream);
        Some((accepted, listener))
    });
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SessionExecutorServer::new(liar))
            .serve_with_incoming(incoming),
    );
    Liar {
        subscribes,
        foreign,
        garbled,
        serving,
    }
}

/// AUTH-11: every executor RPC refuses calls without the cluster secret (none, a wrong one of the
/// same length, a short one, another scheme, the secret with extra bytes) with UNAUTHENTICATED;
/// the cluster secret is no tenant credential on the gateway (401, AUTH-03's executor clause).
///
/// The catalogue's authority half assumes executors call the gateway; in our architecture the
/// gateway is the gRPC client and executors never send it writes (docs/architecture.md; executors
/// write to the store under their lease fence, which LEASE-02's tests prove). What an executor
/// can send the gateway is `Subscribe` frames: the gateway takes a frame's event only when it
/// parses, is the event of the session and sequence the frame names and follows the one before,
/// and otherwise reads the store by the (tenant, session, sequence) it chose
/// (gateway/src/cluster/hub.rs). So an authenticated executor that lies in its frames (another
/// tenant's session, sequences ahead, backwards and zero, non-JSON bytes) changes nothing a client
/// sees: the SSE stream is exactly the store's event log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn auth_11_executor_authentication_and_authority() {
    let (store, clock, real, real_address, liar_listener) = real_behind_a_liar().await;

    // 1. Authentication of every RPC.
    let wrong_same_length = "x".repeat(SECRET.len());
    let longer = format!("Bearer {SECRET}x");
    let basic = format!("Basic {SECRET}");
    let wrong = format!("Bearer {wrong_same_length}");
    let refused: [(&str, Option<&str>); 6] = [
        ("none", None),
        ("wrong", Some(&wrong)),
        ("short", Some("Bearer short")),
        ("empty", Some("Bearer ")),
        ("other-scheme", Some(&basic)),
        ("longer", Some(&longer)),
    ];
    for (name, header) in refused {
        let codes = every_rpc(&real_address.to_string(), header).await;
        assert_eq!(codes.len(), 12, "every RPC of the service");
        for (rpc, code) in codes {
            assert_eq!(code, tonic::Code::Unauthenticated, "{rpc} with {name}");
        }
    }
    let good = format!("Bearer {SECRET}");
    let codes = every_rpc(&real_address.to_string(), Some(&good)).await;
    assert!(
        codes
            .iter()
            .all(|(_, code)| *code != tonic::Code::Unauthenticated),
        "the secret passes: {codes:?}"
    );

    let liar = serve_liar(real_address, liar_listener).await;
    let (subscribes, foreign_slot, serving) = (liar.subscribes, liar.foreign, liar.serving);
    let server = gateway(&store, &clock).await;
    let (status, body) = server
        .command(SECRET, "secret-as-bearer", "session.list", json!({}))
        .await;
    assert_eq!(status, 401, "the cluster secret is no tenant token: {body}");
    let events = server.events(SECRET, "any", "", None).await;
    assert_eq!(events.status().as_u16(), 401);

    // 2. A lying executor cannot put foreign bytes into a client's stream.
    let foreign = server.create_session(TOKEN_B).await;
    *foreign_slot.lock().unwrap() = foreign.clone();
    let session = server.create_session(TOKEN_A).await;
    // Paced, so the request is still streaming when the client follows it: the gateway then
    // waits for new events through the executor's `Subscribe` (an unpaced request can end before
    // the client connects, and the gateway reads everything from the store without subscribing).
    server
        .submit(TOKEN_A, &session, "demo:deltas=8 demo:interval=100")
        .await;
    let streamed = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let stored = store
        .read_events("tenant-a", &session, 0, 1_000)
        .await
        .unwrap()
        .events;
    let stored: Vec<Value> = stored
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_eq!(
        streamed,
        stored[..streamed.len()],
        "exactly the store's events"
    );
    let text = serde_json::to_string(&streamed).unwrap();
    assert!(
        !text.contains(FOREIGN_MARKER),
        "no forged frame reached the client"
    );
    assert!(
        !text.contains(&foreign),
        "no foreign session reached the client"
    );
    // A second reader joining mid-way (a live hub) also sees only the store's events.
    let again = server.collect_events(TOKEN_A, &session, 2, is_result).await;
    assert_eq!(again, stored[2..2 + again.len()]);
    assert!(
        subscribes.load(Ordering::SeqCst) > 0,
        "the gateway followed the session through the lying executor"
    );
    let (status, _) = server.readyz().await;
    assert_eq!(status, 200, "the gateway is unharmed");

    server.stop().await;
    serving.abort();
    real.shutdown();
    real.wait().await.unwrap();
}

/// FUZZ-09: an authenticated executor that answers commands with garbage (no outcome, bytes that
/// are not JSON, an array, duplicate keys, nesting past the limit, an unknown failure code, an
/// internal error carrying internals, a gRPC error with a message) gets each of them turned into
/// a typed protocol error for the client, which never shows the executor's text; the gateway does
/// not panic and serves the next command through the same executor. Unknown protobuf fields are
/// skipped by the decoder by design; oversized messages are RES-06; lying `Subscribe` frames are
/// AUTH-11.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fuzz_09_garbage_from_an_executor_is_a_typed_error_and_changes_nothing() {
    let (store, clock, real, real_address, liar_listener) = real_behind_a_liar().await;
    let liar = serve_liar(real_address, liar_listener).await;
    let server = gateway(&store, &clock).await;
    let session = server.create_session(TOKEN_A).await;

    let data = |bytes: Vec<u8>| {
        Ok(CommandReply {
            outcome: Some(agent_runtime_grpc::command_reply::Outcome::DataJson(bytes)),
        })
    };
    let failure = |code: &str| {
        Ok(CommandReply {
            outcome: Some(agent_runtime_grpc::command_reply::Outcome::Failure(
                agent_runtime_grpc::Failure {
                    code: code.to_owned(),
                    message: format!("{FOREIGN_MARKER} SELECT secret FROM keys"),
                    retryable: false,
                    retry_after_ms: None,
                    details_json: None,
                },
            )),
        })
    };
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let garbage: Vec<(&str, Result<CommandReply, Status>)> = vec![
        ("no outcome", Ok(CommandReply { outcome: None })),
        ("not JSON", data(b"\xff\xfe{not json".to_vec())),
        ("an array", data(b"[1,2,3]".to_vec())),
        (
            "duplicate keys",
            data(br#"{"session":1,"session":2}"#.to_vec()),
        ),
        ("too deep", data(deep.into_bytes())),
        ("wrong shape", data(br#"{"unexpected":"field"}"#.to_vec())),
        ("unknown code", failure("NOT_A_CODE")),
        ("internal error", failure("INTERNAL_ERROR")),
        (
            "grpc error",
            Err(Status::internal(format!("{FOREIGN_MARKER} /etc/secret"))),
        ),
    ];
    for (name, answer) in garbage {
        *liar.garbled.lock().unwrap() = Some(answer);
        for (kind, data) in [
            ("session.read", json!({ "sessionId": session })),
            (
                "input.submit",
                json!({ "sessionId": session, "input": "hello" }),
            ),
        ] {
            let (status, body) = server
                .command(TOKEN_A, &agent_runtime::ids::nanoid(), kind, data)
                .await;
            let text = body.to_string();
            assert!(
                (400..600).contains(&status) && body["ok"] == false,
                "{name} / {kind}: {status} {text}"
            );
            assert!(has_protocol_code(&body), "{name} / {kind}: {text}");
            assert!(!text.contains(FOREIGN_MARKER), "{name} / {kind}: {text}");
            assert!(!text.contains("SELECT"), "{name} / {kind}: {text}");
        }
        *liar.garbled.lock().unwrap() = None;
        let (status, _) = server.readyz().await;
        assert_eq!(status, 200, "the gateway is unharmed after {name}");
        let read = server.read(TOKEN_A, &session).await;
        assert_eq!(
            read["session"]["sessionId"],
            session.as_str(),
            "after {name}"
        );
    }
    server.stop().await;
    liar.serving.abort();
    real.shutdown();
    real.wait().await.unwrap();
}

/// Whether an error body carries one of the protocol's codes (docs/protocol.md §3).
fn has_protocol_code(body: &Value) -> bool {
    body["error"]["code"]
        .as_str()
        .is_some_and(|code| agent_runtime::protocol::ErrorCode::parse(code).is_some())
}
