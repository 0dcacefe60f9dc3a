//! Execution leases under partial partitions (reliability catalogue LEASE-03 and LEASE-04), on
//! the in-process cluster shape (executors and a gateway talking real gRPC on loopback) over a
//! real PostgreSQL database.
//!
//! - LEASE-04: an executor cut off from PostgreSQL (its store wrapped in a `FaultyStore` that
//!   fails every call) but still reachable over gRPC.
//! - LEASE-03: an executor cut off from the gateways (its gRPC port behind a link the test
//!   closes) but still on PostgreSQL.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::executors::{
    authorized_client, executor_config, postgres_store, start_demo_executor,
};
use crate::support::*;
use agent_runtime::clock::{self, SharedClock};
use agent_runtime::protocol::{EventType, JsonObject};
use agent_runtime_cli::cluster::{
    ExecutorProcessConfig, GatewayProcessConfig, RunningExecutor, start_gateway,
};
use agent_runtime_cli::config::TelemetryConfig;
use agent_runtime_gateway::cluster::router::ExecutorClient;
use agent_runtime_gateway::{AuthMode, GatewayConfig};
use agent_runtime_grpc::LoadRequest;
use agent_runtime_store::Operation;
use agent_runtime_store::faulty::FaultyStore;
use agent_runtime_store::{EventLog, ExecutionFence, NewEvent, SessionRoute, Store};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const SECRET: &str = "cluster-secret-for-lease-tests";
const TENANT: &str = "tenant-a";
const TTL: Duration = Duration::from_secs(2);

/// An executor serving on `listener` and advertising `advertise` to gateways.
async fn executor(
    store: Arc<dyn Store>,
    clock: &SharedClock,
    id: &str,
    listener: TcpListener,
    advertise: SocketAddr,
) -> RunningExecutor {
    let config = ExecutorProcessConfig {
        lease_ttl: TTL,
        ..executor_config(id, advertise, SECRET)
    };
    start_demo_executor(config, store, clock, listener).await
}

async fn direct_executor(store: Arc<dyn Store>, clock: &SharedClock, id: &str) -> RunningExecutor {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    executor(store, clock, id, listener, address).await
}

async fn gateway(store: Arc<dyn Store>, clock: &SharedClock, failover: Duration) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = GatewayProcessConfig {
        gateway: GatewayConfig {
            heartbeat_interval: Duration::from_millis(200),
            shutdown_grace: Duration::from_secs(2),
            ..GatewayConfig::default()
        },
        tokens: test_tokens(),
        auth_mode: AuthMode::Static,
        audit: None,
        secret: agent_runtime::secret::Secret::new(SECRET),
        failover_window: failover,
        telemetry: TelemetryConfig::default(),
        webhooks: None,
    };
    TestServer::from_running(
        start_gateway(config, store, clock.clone(), listener)
            .await
            .unwrap(),
    )
}

/// A gRPC client of one executor, with the cluster secret.
async fn grpc_client(address: SocketAddr) -> ExecutorClient {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    authorized_client(channel, SECRET)
}

async fn route(store: &Arc<dyn Store>, session: &str) -> SessionRoute {
    store
        .get_session_route(TENANT, session)
        .await
        .unwrap()
        .expect("the session has a route")
}

/// Polls `check` every 100 ms until it holds; panics after `limit` (a hang guard).
async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn sequences(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect()
}

fn stream_event(session_id: &str, text: &str) -> NewEvent {
    let mut data = JsonObject::new();
    data.insert("type".to_owned(), json!("content"));
    data.insert("delta".to_owned(), json!(text));
    NewEvent {
        session_id: session_id.to_owned(),
        request_id: None,
        occurred_at: "2026-01-01T00:00:00.000Z".to_owned(),
        event_type: EventType::SessionStream,
        data,
    }
}

/// LEASE-04: E1 loses PostgreSQL in the middle of a long request and stays reachable over gRPC.
/// Its renewals fail; it drops the session by its local (monotonic) deadline while PostgreSQL is
/// still out of reach, so it learns of the loss without the store; the gateway's gRPC calls to
/// it meanwhile extend nothing; the lease runs out in the store and E2 takes the session over
/// with a newer fencing token; the interrupted request ends with an error `result` and the log
/// stays contiguous; once E1 reaches PostgreSQL again it writes nothing more for the session, and
/// a write under its old fence is rejected by the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_04_an_executor_cut_off_from_postgres_loses_its_lease_and_is_fenced() {
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    let clock = clock::system();
    let observer = postgres_store(&url).await;
    let e1_store = Arc::new(FaultyStore::new(postgres_store(&url).await).recording_appends());
    let e1 = direct_executor(e1_store.clone(), &clock, "executor-1").await;
    let gateway = gateway(postgres_store(&url).await, &clock, Duration::from_secs(10)).await;

    let session = gateway.create_session(TOKEN_A).await;
    // About 10 s of deltas: still running when the partition starts.
    let submitted = gateway
        .submit(TOKEN_A, &session, "demo:deltas=200 demo:interval=50")
        .await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    let before = route(&observer, &session).await;
    assert_eq!(before.worker_id.as_deref(), Some("executor-1"));
    let old_fence = ExecutionFence {
        lease_id: before
            .lease_id
            .clone()
            .expect("a running route has a lease"),
        fencing_token: before.fencing_token,
    };
    let mut e1_grpc = grpc_client(e1.address).await;
    let held = e1_grpc.load(LoadRequest {}).await.unwrap().into_inner();
    assert!(held.sessions.iter().any(|s| s.session_id == session));
    // Let some deltas land first.
    eventually("E1 streams deltas", Duration::from_secs(20), || async {
        observer
            .read_events(TENANT, &session, 0, 100)
            .await
            .unwrap()
            .events
            .len()
            > 5
    })
    .await;
    let e2 = direct_executor(postgres_store(&url).await, &clock, "executor-2").await;

    // The cut: every E1 store call fails from here on. gRPC to E1 still works.
    e1_store.fail_everything();

    // Gateways keep calling E1 over gRPC meanwhile (reads of the session, routed to the owner
    // while its worker record looks live): none of that renews anything.
    let pinging = {
        let base = gateway.base.clone();
        let session = session.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            for i in 0..40 {
                let body = json!({ "protocolVersion": 1, "commandId": format!("read-{i}"),
                    "type": "session.read", "data": { "sessionId": session } });
                let _ = client
                    .post(format!("{base}/commands"))
                    .bearer_auth(TOKEN_A)
                    .json(&body)
                    .timeout(Duration::from_secs(5))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // E1 learns the lease is lost on its own, while PostgreSQL is still out of its reach: it no
    // longer holds the session, and the session is no longer loaded there (its request stopped).
    eventually(
        "E1 drops the session by its local deadline",
        Duration::from_secs(30),
        || {
            let mut e1_grpc = e1_grpc.clone();
            let session = session.clone();
            async move {
                let load = e1_grpc.load(LoadRequest {}).await.unwrap().into_inner();
                !load.sessions.iter().any(|s| s.session_id == session) && load.active_sessions == 0
            }
        },
    )
    .await;
    assert!(
        e1_store.calls(Operation::RenewSessionLeases) > 0,
        "E1 tried to renew and could not"
    );

    // The lease runs out in the store; E2 takes the session over with a newer token.
    eventually(
        "E2 takes the session over",
        Duration::from_secs(60),
        || async {
            let now = route(&observer, &session).await;
            now.worker_id.as_deref() == Some("executor-2")
                && now.fencing_token > old_fence.fencing_token
        },
    )
    .await;
    pinging.await.unwrap();
    // Nothing E1 wrote for the session got through under a token other than its old one.
    let appends_at_takeover = e1_store.acknowledged_appends().len();
    assert!(
        e1_store
            .acknowledged_appends()
            .iter()
            .filter(|append| append.session_id == session)
            .all(|append| append
                .fence
                .as_ref()
                .is_none_or(|fence| fence.fencing_token <= old_fence.fencing_token)),
        "E1 wrote under a newer token"
    );

    // The client sees the interrupted request end, and the log is contiguous.
    let events = gateway
        .until_result(TOKEN_A, &session, 0, &request_id)
        .await;
    assert_eq!(
        sequences(&events),
        (1..=events.len() as u64).collect::<Vec<_>>()
    );
    let result = events.last().unwrap();
    assert!(is_result(result), "{result}");
    assert_eq!(result["data"]["subtype"], "error", "{result}");

    // E1 reaches PostgreSQL again: it writes nothing more for the session, and a write under its
    // old fence is refused by the store (the second layer, independent of the self-fence).
    e1_store.heal();
    let takeover = route(&observer, &session).await;
    tokio::time::sleep(TTL * 2).await;
    let after_heal: Vec<_> = e1_store.acknowledged_appends()[appends_at_takeover..]
        .iter()
        .filter(|append| append.session_id == session)
        .cloned()
        .collect();
    assert!(
        after_heal.is_empty(),
        "E1 wrote after the takeover: {after_heal:?}"
    );
    let stale = e1_store
        .append_events(
            TENANT,
            &session,
            vec![stream_event(&session, "stale")],
            Some(&old_fence),
        )
        .await;
    assert!(stale.is_err(), "a write under the old fence was accepted");
    assert_eq!(
        route(&observer, &session).await.fencing_token,
        takeover.fencing_token
    );

    // The session goes on, on E2.
    let (_, events) = gateway
        .run_request(TOKEN_A, &session, "after the takeover", 0)
        .await;
    assert_eq!(
        sequences(&events),
        (1..=events.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    assert!(events.iter().all(|e| e["data"]["delta"] != "stale"));

    gateway.stop().await;
    for running in [e1, e2] {
        running.shutdown();
        running.wait().await.unwrap();
    }
}

/// A TCP link in front of an executor's gRPC port that the test can cut (connections refused,
/// open ones reset) and restore: the gateway-executor partition of LEASE-03.
struct GrpcLink {
    address: SocketAddr,
    upstream: SocketAddr,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl GrpcLink {
    async fn start(upstream: SocketAddr) -> GrpcLink {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let link = GrpcLink {
            address: listener.local_addr().unwrap(),
            upstream,
            task: Mutex::new(None),
        };
        link.serve(listener);
        link
    }

    fn serve(&self, listener: TcpListener) {
        let upstream = self.upstream;
        let task = tokio::spawn(async move {
            let mut pipes = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                pipes.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        *self.task.lock().unwrap() = Some(task);
    }

    /// Closes the listener and every open connection (dropping the task drops them all).
    async fn cut(&self) {
        let task = self.task.lock().unwrap().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    async fn restore(&self) {
        let listener = TcpListener::bind(self.address).await.unwrap();
        self.serve(listener);
    }
}

/// LEASE-03: E1 is cut off from the gateway (its gRPC port unreachable) but stays on PostgreSQL,
/// in the middle of a request. In this design the lease lives in PostgreSQL and E1 renews it
/// there itself, so losing the gateway does not cost it the lease and it must not self-fence:
/// its request runs to the end and is stored under its unchanged token, no other executor takes
/// the session (no second writer), and the gateway answers commands for the session with a
/// retryable refusal instead of a wrong answer. When the link comes back, the session goes on
/// on E1 and a client sees one contiguous log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_03_an_executor_cut_off_from_the_gateway_keeps_its_lease_and_no_one_else_writes() {
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    let clock = clock::system();
    let observer = postgres_store(&url).await;
    let e1_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let link = GrpcLink::start(e1_listener.local_addr().unwrap()).await;
    let e1 = executor(
        postgres_store(&url).await,
        &clock,
        "executor-1",
        e1_listener,
        link.address,
    )
    .await;
    let gateway = gateway(postgres_store(&url).await, &clock, Duration::from_secs(3)).await;

    let session = gateway.create_session(TOKEN_A).await;
    // About 4 s of deltas, longer than the lease TTL.
    let submitted = gateway
        .submit(TOKEN_A, &session, "demo:deltas=80 demo:interval=50")
        .await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    let before = route(&observer, &session).await;
    assert_eq!(before.worker_id.as_deref(), Some("executor-1"));
    let e2 = direct_executor(postgres_store(&url).await, &clock, "executor-2").await;

    link.cut().await;
    // While cut off: a command for the session is refused as retryable (the gateway cannot reach
    // the owner, which is alive on PostgreSQL, and must not hand the session to E2).
    let (status, body) = gateway
        .command(
            TOKEN_A,
            "during-the-cut",
            "input.submit",
            json!({ "sessionId": session, "input": "during the cut" }),
        )
        .await;
    assert!(
        status == 503 || status == 409,
        "refused as retryable while the owner is unreachable: {status} {body}"
    );
    assert!(
        matches!(
            body["error"]["code"].as_str(),
            Some("OVERLOADED" | "COMMAND_IN_PROGRESS")
        ),
        "{body}"
    );
    // E1 finishes the request on its own and stores it, past several TTLs, under the same token.
    eventually(
        "E1 finishes its request while cut off from the gateway",
        Duration::from_secs(30),
        || async {
            let page = observer
                .read_events(TENANT, &session, 0, 1000)
                .await
                .unwrap();
            page.events.iter().any(|event| {
                let value = serde_json::to_value(event).unwrap();
                is_result(&value) && value["requestId"] == request_id.as_str()
            })
        },
    )
    .await;
    tokio::time::sleep(TTL * 2).await;
    let during = route(&observer, &session).await;
    assert_eq!(
        during.worker_id.as_deref(),
        Some("executor-1"),
        "no takeover"
    );
    assert_eq!(during.fencing_token, before.fencing_token, "no new writer");
    assert_eq!(during.lease_id, before.lease_id);
    let mut e2_grpc = grpc_client(e2.address).await;
    let e2_load = e2_grpc.load(LoadRequest {}).await.unwrap().into_inner();
    assert!(
        !e2_load.sessions.iter().any(|s| s.session_id == session),
        "E2 never held the session"
    );

    link.restore().await;
    let events = gateway
        .until_result(TOKEN_A, &session, 0, &request_id)
        .await;
    assert_eq!(
        sequences(&events),
        (1..=events.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    // The session goes on, on E1 under the same lease: the retried command now runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let (status, body) = gateway
            .command(
                TOKEN_A,
                &format!("after-the-cut-{}", agent_runtime::ids::nanoid()),
                "input.submit",
                json!({ "sessionId": session, "input": "after the cut" }),
            )
            .await;
        if status == 200 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "the retried command runs: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let next_id = answer["data"]["requestId"].as_str().unwrap().to_owned();
    let events = gateway.until_result(TOKEN_A, &session, 0, &next_id).await;
    assert_eq!(
        sequences(&events),
        (1..=events.len() as u64).collect::<Vec<_>>()
    );
    let after = route(&observer, &session).await;
    assert_eq!(after.worker_id.as_deref(), Some("executor-1"));
    assert_eq!(after.fencing_token, before.fencing_token);

    gateway.stop().await;
    for running in [e1, e2] {
        running.shutdown();
        running.wait().await.unwrap();
    }
}
