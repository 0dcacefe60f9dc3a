//! The cluster shape inside one test process: two gateways and two executors talking real gRPC on
//! loopback, sharing one store. (The multi-process tests on PostgreSQL live in cli/tests/cluster/processes.rs.)

use std::sync::Arc;
use std::time::Duration;

use crate::support::executors::{
    authorized_client, executor_config, gateway_config, start_demo_executor,
};
use crate::support::*;
use agent_runtime::clock::{self, SharedClock};
use agent_runtime_cli::cluster::{
    ExecutorProcessConfig, GatewayProcessConfig, RunningExecutor, start_gateway,
};
use agent_runtime_cli::config::TelemetryConfig;
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_gateway::auth::testing::{TestKey, claims};
use agent_runtime_gateway::auth::{JwtAlgorithm, JwtConfig, JwtKeySource};
use agent_runtime_gateway::{AuditConfig, AuditTarget, AuthMode, GatewayConfig};
use agent_runtime_store::Operation;
use agent_runtime_store::faulty::FaultyStore;
use agent_runtime_store::{MemoryStore, Store, StoreOptions};
use serde_json::json;

const SECRET: &str = "cluster-secret-for-tests";

async fn executor(store: &Arc<dyn Store>, clock: &SharedClock, id: &str) -> RunningExecutor {
    executor_with(store, clock, id, ExecutorConfig::default()).await
}

async fn executor_with(
    store: &Arc<dyn Store>,
    clock: &SharedClock,
    id: &str,
    executor: ExecutorConfig,
) -> RunningExecutor {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = ExecutorProcessConfig {
        executor,
        ..executor_config(id, address, SECRET)
    };
    start_demo_executor(config, store.clone(), clock, listener).await
}

async fn gateway(store: &Arc<dyn Store>, clock: &SharedClock) -> TestServer {
    gateway_with(store, clock, AuthMode::Static, None).await
}

async fn gateway_with(
    store: &Arc<dyn Store>,
    clock: &SharedClock,
    auth_mode: AuthMode,
    audit: Option<AuditConfig>,
) -> TestServer {
    gateway_configured(store, clock, auth_mode, audit, gateway_config()).await
}

async fn gateway_configured(
    store: &Arc<dyn Store>,
    clock: &SharedClock,
    auth_mode: AuthMode,
    audit: Option<AuditConfig>,
    gateway: GatewayConfig,
) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = GatewayProcessConfig {
        gateway,
        tokens: test_tokens(),
        auth_mode,
        audit,
        secret: agent_runtime::secret::Secret::new(SECRET),
        failover_window: Duration::from_secs(10),
        telemetry: TelemetryConfig::default(),
        webhooks: None,
    };
    let server = start_gateway(config, store.clone(), clock.clone(), listener)
        .await
        .unwrap();
    TestServer::from_running(server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_created_on_one_gateway_streams_on_the_other_and_survives_a_drain() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let first_executor = executor(&store, &clock, "executor-1").await;
    let second_executor = executor(&store, &clock, "executor-2").await;
    let gateway_a = gateway(&store, &clock).await;
    let gateway_b = gateway(&store, &clock).await;

    let session = gateway_a.create_session(TOKEN_A).await;
    gateway_a.submit(TOKEN_A, &session, "demo:deltas=20").await;
    let on_b = gateway_b
        .collect_events(TOKEN_A, &session, 0, is_result)
        .await;
    let sequences: Vec<u64> = on_b
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=on_b.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        on_b.iter()
            .filter(|e| stream_type(e) == Some("content"))
            .count(),
        20
    );

    let route = store
        .get_session_route("tenant-a", &session)
        .await
        .unwrap()
        .unwrap();
    let owner = route
        .worker_id
        .clone()
        .expect("a running session has an owner");
    let (token, attempt) = (route.fencing_token, route.attempt);

    // Drain the owner: the session is handed off, and the next command moves it.
    let (owner_executor, other) = if owner == "executor-1" {
        (first_executor, second_executor)
    } else {
        (second_executor, first_executor)
    };
    owner_executor.shutdown();
    owner_executor.wait().await.unwrap();
    let submitted = gateway_b.submit(TOKEN_A, &session, "after the move").await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    let events = gateway_a
        .until_result(TOKEN_A, &session, 0, &request_id)
        .await;
    let sequences: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(
        sequences,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "contiguous across the move"
    );
    let moved = store
        .get_session_route("tenant-a", &session)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(moved.worker_id, Some(owner));
    assert!(moved.fencing_token > token && moved.attempt > attempt);

    let read = gateway_a.read(TOKEN_A, &session).await;
    assert_eq!(read["recovery"]["routeState"], "running");
    assert_eq!(read["recovery"]["fencingToken"], moved.fencing_token);
    assert_eq!(read["loaded"], true);

    gateway_a.stop().await;
    gateway_b.stop().await;
    other.shutdown();
    other.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_gateway_authenticates_jwts_and_writes_the_audit_log() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let running = executor(&store, &clock, "executor-jwt").await;
    let dir = tempfile::tempdir().unwrap();
    let key = TestKey::generate_ec();
    let pem = dir.path().join("jwt.pem");
    std::fs::write(&pem, key.public_pem()).unwrap();
    let mut jwt = JwtConfig::new(JwtAlgorithm::Es256, JwtKeySource::PemFile(pem));
    jwt.audience = Some("cluster".to_owned());
    let audit_path = dir.path().join("audit.jsonl");
    let audit = AuditConfig::new(AuditTarget::File(audit_path.clone()));
    let server = gateway_with(&store, &clock, AuthMode::Jwt(jwt), Some(audit)).await;

    let now = clock.now_ms() / 1000;
    let token = key.token(None, &claims(now, "issuer", "cluster", "org-1", "dana"));
    let session = server.create_session(&token).await;
    let other_audience = key.token(None, &claims(now, "issuer", "elsewhere", "org-1", "dana"));
    let (status, body) = server
        .command(&other_audience, "jwt-refused", "session.create", json!({}))
        .await;
    assert_eq!(
        (status, body["commandId"].clone()),
        (401, json!("authentication"))
    );
    let (status, _) = server
        .command(TOKEN_A, "static-refused", "session.list", json!({}))
        .await;
    assert_eq!(status, 401, "static tokens mean nothing in jwt mode");
    server.stop().await;
    running.shutdown();
    running.wait().await.unwrap();

    let records: Vec<serde_json::Value> = std::fs::read_to_string(&audit_path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["commandType"], "session.create");
    assert_eq!(records[0]["tenantId"], "org-1");
    assert_eq!(records[0]["subject"], "dana");
    assert_eq!(records[0]["outcome"], "success");
    assert!(records[0].get("sessionId").is_none());
    assert!(!session.is_empty());
}

#[tokio::test]
async fn an_executor_without_the_cluster_secret_answers_unauthenticated() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let running = executor(&store, &clock, "executor-x").await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", running.address))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client =
        agent_runtime_grpc::session_executor_client::SessionExecutorClient::new(channel);
    let status = client
        .load(agent_runtime_grpc::LoadRequest {})
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    running.shutdown();
    running.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_active_session_cap_counts_a_tenant_across_executors() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let capped = ExecutorConfig {
        max_active_sessions_per_tenant: 1,
        ..ExecutorConfig::default()
    };
    let first = executor_with(&store, &clock, "executor-1", capped.clone()).await;
    let second = executor_with(&store, &clock, "executor-2", capped).await;
    let gateway = gateway(&store, &clock).await;

    gateway.create_session(TOKEN_A).await;
    // The second session goes to the other (emptier) executor, which still sees the first.
    let (status, body) = gateway
        .command(TOKEN_A, "second", "session.create", json!({}))
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "OVERLOADED");
    // Another tenant is not affected.
    gateway.create_session(TOKEN_B).await;

    gateway.stop().await;
    for running in [first, second] {
        running.shutdown();
        running.wait().await.unwrap();
    }
}

/// RES-06: a `session.read` whose transcript is larger than tonic's 4 MiB default crosses the
/// gateway-executor link (both ends take up to `MAX_MESSAGE_BYTES`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_06_a_transcript_over_four_mib_is_read_through_the_cluster() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let running = executor(&store, &clock, "executor-1").await;
    let gateway = gateway(&store, &clock).await;
    let session = gateway.create_session(TOKEN_A).await;
    // Each input is echoed back: two copies of ~0.9 MB per turn, five turns.
    let input = "x".repeat(900_000);
    for _ in 0..5 {
        let submitted = gateway.submit(TOKEN_A, &session, &input).await;
        let request = submitted["requestId"].as_str().unwrap().to_owned();
        gateway.until_result(TOKEN_A, &session, 0, &request).await;
    }
    let read = gateway.read(TOKEN_A, &session).await;
    let messages = read["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 10, "five inputs and five answers");
    let size = serde_json::to_vec(&read).unwrap().len();
    assert!(size > 8 << 20, "the read answer is {size} bytes");
    gateway.stop().await;
    running.shutdown();
    running.wait().await.unwrap();
}

/// RES-06: a gRPC message over `MAX_MESSAGE_BYTES` is refused by the executor without taking it
/// down; the next call is served.
#[tokio::test]
async fn res_06_an_oversized_grpc_message_is_refused_and_the_executor_goes_on() {
    use agent_runtime_grpc::{CommandRequest, LoadRequest, MAX_MESSAGE_BYTES};

    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let running = executor(&store, &clock, "executor-1").await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", running.address))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = authorized_client(channel, SECRET);
    let oversized = CommandRequest {
        context: None,
        command_type: "session.create".to_owned(),
        data_json: vec![b' '; MAX_MESSAGE_BYTES + 1],
    };
    let status = client.execute(oversized).await.unwrap_err();
    assert!(
        matches!(
            status.code(),
            tonic::Code::ResourceExhausted | tonic::Code::OutOfRange
        ),
        "{status:?}"
    );
    client
        .load(LoadRequest {})
        .await
        .expect("the executor still serves");
    running.shutdown();
    running.wait().await.unwrap();
}

/// R5: a gateway that ran a command and then could not store its result (as if it crashed
/// between the executor's commit and the receipt's completion) leaves the receipt sealed. A
/// gateway's sweep finds the stored effect of a command sealed longer than
/// `reconcile_sealed_after` and completes the receipt with it, so a retry answers the result
/// instead of `COMMAND_IN_PROGRESS` for the whole abandonment window (10 minutes) and then an
/// abandonment of a command whose input ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn r5_a_command_whose_result_was_not_stored_answers_its_effect_on_retry() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let _executor = executor(&store, &clock, "executor-1").await;
    let faulty = Arc::new(FaultyStore::new(store.clone()));
    let config = GatewayConfig {
        reconcile_sealed_after: Duration::from_secs(1),
        ..gateway_config()
    };
    let gateway_store = faulty.clone() as Arc<dyn Store>;
    let gateway = gateway_configured(&gateway_store, &clock, AuthMode::Static, None, config).await;
    let session = gateway.create_session(TOKEN_A).await;

    faulty.fail_next(Operation::CompleteCommand, 1);
    let data = json!({ "sessionId": session, "input": "r5 input" });
    let (status, first) = gateway
        .command(TOKEN_A, "r5-command", "input.submit", data.clone())
        .await;
    assert_eq!(status, 409, "{first}");
    assert_eq!(first["error"]["code"], "COMMAND_IN_PROGRESS", "{first}");
    let ran = gateway
        .collect_events(TOKEN_A, &session, 0, is_result)
        .await;
    let request_id = ran.last().unwrap()["requestId"].clone();

    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let (_, answer) = gateway
            .command(TOKEN_A, "r5-command", "input.submit", data.clone())
            .await;
        if answer["ok"] == true {
            break answer;
        }
        assert_eq!(answer["error"]["code"], "COMMAND_IN_PROGRESS", "{answer}");
        assert!(
            std::time::Instant::now() < deadline,
            "the retry still answers in progress after 30 s: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(answer["data"]["status"], "started", "{answer}");
    assert_eq!(answer["data"]["requestId"], request_id, "{answer}");
    let journal = store
        .read_durable("tenant-a", &session, 0, 100)
        .await
        .unwrap();
    let accepted: Vec<_> = journal
        .events
        .iter()
        .filter(|event| event.event_type == "request_accepted")
        .collect();
    assert_eq!(accepted.len(), 1, "the input ran once: {accepted:?}");
}

/// A cluster gateway serves the events its executor pushes with each wake-up (the `Subscribe`
/// frames carry them, read once by the executor after their commit) instead of reading each one
/// back from the store: a live follower of a streaming request costs the gateway's store no event
/// read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_gateway_serves_pushed_events_without_reading_them_back() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let _executor = executor(&store, &clock, "executor-1").await;
    let faulty = Arc::new(FaultyStore::new(store.clone()));
    let gateway_store = faulty.clone() as Arc<dyn Store>;
    let gateway = gateway_configured(
        &gateway_store,
        &clock,
        AuthMode::Static,
        None,
        gateway_config(),
    )
    .await;
    let session = gateway.create_session(TOKEN_A).await;
    let response = gateway.events(TOKEN_A, &session, "", None).await;
    assert_eq!(response.status().as_u16(), 200);
    let mut stream = SseReader::new(response);
    // The stream is open and its tail has read the (empty) log.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reads = faulty.calls(Operation::ReadEvents);

    let submitted = gateway
        .submit(TOKEN_A, &session, "demo:deltas=8 demo:interval=20")
        .await;
    let mut events = Vec::new();
    while let Some(frame) = stream.next_event().await {
        let done = is_result(&frame.data) && frame.data["requestId"] == submitted["requestId"];
        events.push(frame.data);
        if done {
            break;
        }
    }
    let sequences: Vec<u64> = events
        .iter()
        .map(|event| event["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(events.len() >= 10, "{events:?}");
    assert_eq!(
        faulty.calls(Operation::ReadEvents),
        reads,
        "the follower's events came with the wake-ups"
    );
}
