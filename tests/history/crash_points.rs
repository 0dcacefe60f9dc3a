//! The crash-point suite (WP-01 in docs/reliability.md): a process stops at each boundary between
//! two store writes of one `input.submit` and the request it starts, on JSONL and PostgreSQL, in
//! `serve` and in the cluster, and the history checker (tests/support/history.rs) judges the whole
//! run.
//!
//! How a crash is made: `FaultyStore::crash_at(operation, n, applied)` lets the process reach
//! its n-th call of a write operation (the claim, the seal, the accepting journal entry, each
//! transcript write, each event batch, the journal's terminal entry, the receipt's completion),
//! fails that call (after it took effect with an unknown outcome, or before it reached the
//! store), and from then on fails every call of every operation: as the store sees it, the
//! process died right there. It is then stopped, and a new process starts on the same store.
//! The client retries its command with the same id until it gets a definite answer, the session
//! is resumed and settles, and every acknowledged command is replayed.
//!
//! Which calls the write path makes, and how many, is measured first on a probe command, so
//! every boundary of the path as it is built is covered. What the checker holds every run to:
//! no acknowledged command lost (its input is in the final transcript, or its request ended with
//! an error `result`), no sequence gap and no event seen that is not durable, no request that
//! ended twice, no stale-fence write, every replay answering the first answer, and (here) no
//! effect without its receipt: every input in the final transcript belongs to a command whose
//! id answers it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::executors::{
    executor_config, gateway_config, start_demo_executor, start_test_gateway,
};
use crate::support::history::*;
use crate::support::history_clients::*;
use crate::support::*;
use agent_runtime::clock::{self, SharedClock};
use agent_runtime::protocol::message_compat;
use agent_runtime_cli::Overrides;
use agent_runtime_cli::cluster::RunningExecutor;
use agent_runtime_cli::config::StoreKind;
use agent_runtime_gateway::GatewayConfig;
use agent_runtime_store::Operation;
use agent_runtime_store::faulty::FaultyStore;
use agent_runtime_store::{JsonlStore, PostgresOptions, PostgresStore, Store, StoreOptions};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const TENANT: &str = "tenant-a";
const SECRET: &str = "crash-points-secret";

/// The store operations of a command's write path. The gateway's: the receipt's claim, seal and
/// completion; the executor's: the journal (accept, terminal entry), the transcript (the input
/// applied, the assistant's message) and the event batches. On PostgreSQL a request's start and
/// its end are one write each (`RequestStep`): the start, counted as `append_durable`, completes
/// the receipt of the input and applies it to the transcript; the end, counted as `append_events`,
/// writes the answer's message. That path has no `complete_command` or `mutate_transcript` call,
/// and a crash at either write leaves all of it or none.
const GATEWAY_WRITES: &[Operation] = &[
    Operation::ClaimCommand,
    Operation::SealCommand,
    Operation::CompleteCommand,
];
const EXECUTOR_WRITES: &[Operation] = &[
    Operation::AppendDurable,
    Operation::MutateTranscript,
    Operation::AppendEvents,
];

/// One place to crash: the `nth` call of `operation` in a command's write path.
#[derive(Clone, Copy, Debug)]
struct CrashPoint {
    operation: Operation,
    nth: u32,
    /// Whether the call takes effect before the crash (a COMMIT whose reply was lost).
    applied: bool,
}

impl CrashPoint {
    fn label(&self) -> String {
        let when = if self.applied { "after" } else { "before" };
        format!("{when} {} #{}", self.operation.name(), self.nth)
    }

    fn on_gateway(&self) -> bool {
        GATEWAY_WRITES.contains(&self.operation)
    }
}

/// Where the suite runs.
enum Deployment {
    Jsonl(tempfile::TempDir),
    PostgresServe(String),
    Cluster { url: String, clock: SharedClock },
}

/// The running processes of a deployment, each behind its own fault-injecting store.
struct Running {
    server: TestServer,
    executor: Option<RunningExecutor>,
    gateway_store: Arc<FaultyStore>,
    executor_store: Arc<FaultyStore>,
}

impl Running {
    fn store_of(&self, point: &CrashPoint) -> &Arc<FaultyStore> {
        if point.on_gateway() {
            &self.gateway_store
        } else {
            &self.executor_store
        }
    }

    fn calls(&self, operation: Operation) -> u64 {
        let store = if GATEWAY_WRITES.contains(&operation) {
            &self.gateway_store
        } else {
            &self.executor_store
        };
        store.calls(operation)
    }

    /// Stops every process (crashed ones too) and records what its writers were acknowledged.
    async fn stop(self, history: &History) {
        self.server.stop_after_crash().await;
        if let Some(executor) = self.executor {
            executor.shutdown();
            let _ = executor.wait().await;
        }
        let mut stores = vec![&self.gateway_store];
        if !Arc::ptr_eq(&self.gateway_store, &self.executor_store) {
            stores.push(&self.executor_store);
        }
        for store in stores {
            history.writes_from(store.acknowledged_appends());
            history.aborted_from(store.refused_appends());
        }
    }
}

impl Deployment {
    fn label(&self) -> &'static str {
        match self {
            Deployment::Jsonl(_) => "jsonl serve",
            Deployment::PostgresServe(_) => "postgres serve",
            Deployment::Cluster { .. } => "postgres cluster",
        }
    }

    async fn store(&self) -> Arc<dyn Store> {
        match self {
            Deployment::Jsonl(dir) => {
                // The previous process released the directory lock when it closed its store.
                let mut last_error = None;
                for _ in 0..50 {
                    match JsonlStore::open(dir.path(), StoreOptions::default()).await {
                        Ok(store) => return Arc::new(store),
                        Err(error) => last_error = Some(error),
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                panic!("the JSONL store does not open: {last_error:?}");
            }
            Deployment::PostgresServe(url) | Deployment::Cluster { url, .. } => Arc::new(
                PostgresStore::connect(url, PostgresOptions::default())
                    .await
                    .expect("PostgreSQL store"),
            ),
        }
    }

    /// Starts the deployment's processes on its store.
    async fn start(&self, generation: usize) -> Running {
        let faulty = async || Arc::new(FaultyStore::new(self.store().await).recording_appends());
        match self {
            Deployment::Jsonl(_) | Deployment::PostgresServe(_) => {
                let store = faulty().await;
                let config = match self {
                    Deployment::Jsonl(dir) => test_config(StoreKind::Jsonl, dir.path()),
                    _ => memory_config(),
                };
                let overrides = Overrides {
                    store: Some(store.clone() as Arc<dyn Store>),
                    ..Overrides::default()
                };
                Running {
                    server: TestServer::start_with(config, overrides).await,
                    executor: None,
                    gateway_store: store.clone(),
                    executor_store: store,
                }
            }
            Deployment::Cluster { clock, .. } => {
                let executor_store = faulty().await;
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let address = listener.local_addr().unwrap();
                let worker_id = format!("crash-executor-{generation}");
                let config = executor_config(&worker_id, address, SECRET);
                let store = executor_store.clone() as Arc<dyn Store>;
                let executor = start_demo_executor(config, store, clock, listener).await;

                let gateway_store = faulty().await;
                let gateway = GatewayConfig {
                    // A cluster cannot tell a command a dead gateway sealed from one a live
                    // gateway is still running: an unsealed claim waits out its TTL, a sealed
                    // command whose effect is stored is completed by the sweep, and one whose
                    // effect is not is abandoned. Short windows keep the run short.
                    command_lease_ttl_ms: 3_000,
                    reconcile_sealed_after: Duration::from_secs(2),
                    abandon_sealed_after: Duration::from_secs(4),
                    ..gateway_config()
                };
                let store = gateway_store.clone() as Arc<dyn Store>;
                let server = start_test_gateway(gateway, store, clock, SECRET).await;
                Running {
                    server,
                    executor: Some(executor),
                    gateway_store,
                    executor_store,
                }
            }
        }
    }
}

/// Sends a command once; its answer when definite (a success or a non-retryable error).
async fn send_once(target: &Target, body: &[u8]) -> Option<Value> {
    let response = target
        .http
        .post(format!("{}/commands", target.base()))
        .bearer_auth(TOKEN_A)
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    let value: Value = serde_json::from_str(&response.text().await.ok()?).ok()?;
    let retryable = status >= 500 || value["error"]["retryable"] == true;
    (value["ok"] == true || (value["ok"] == false && !retryable)).then_some(value)
}

/// How many calls of each write operation one command and its request make (on a fresh session,
/// from the answer to the end of the request and the receipt's completion).
async fn probe(
    running: &Running,
    target: &Target,
    history: &Arc<History>,
) -> (Vec<CrashPoint>, String) {
    let session_id = create_session(target, history, "crash-create").await;
    let operations = GATEWAY_WRITES.iter().chain(EXECUTOR_WRITES).copied();
    let before: BTreeMap<&str, u64> = operations
        .clone()
        .map(|operation| (operation.name(), running.calls(operation)))
        .collect();
    let command_id = format!("crash-probe-{}", agent_runtime::ids::nanoid());
    let text = format!("demo:deltas=3 {command_id}");
    let body = command_body(
        &command_id,
        "input.submit",
        json!({ "sessionId": session_id, "input": text }),
    );
    let never = CancellationToken::new();
    let response = target
        .send_or_last(&body, &never, Duration::from_secs(30))
        .await
        .expect("the probe command is answered");
    let request_id = response["data"]["requestId"].clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    assert!(wait_for_result(target, &session_id, &request_id, deadline).await);
    history.acked(AckedCommand::untimed(
        command_id,
        "input.submit",
        Some(session_id.clone()),
        body,
        response,
        Some(text),
    ));
    // The request's last writes (the journal's terminal entry) follow its `result` event.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut points = Vec::new();
    for operation in operations {
        let calls = running.calls(operation) - before[operation.name()];
        let optional = matches!(
            operation,
            Operation::CompleteCommand | Operation::MutateTranscript
        );
        assert!(
            calls > 0 || optional,
            "the write path makes no {} call",
            operation.name()
        );
        for nth in 1..=calls as u32 {
            for applied in [false, true] {
                points.push(CrashPoint {
                    operation,
                    nth,
                    applied,
                });
            }
        }
    }
    (points, session_id)
}

/// One crash: a command on a fresh session, the process dying at `point`, a new process, the
/// client retrying its command with the same id, the session resumed and settled.
async fn crash_once(
    deployment: &Deployment,
    mut running: Running,
    generation: &mut usize,
    point: CrashPoint,
    target: &Target,
    history: &Arc<History>,
) -> (Running, String) {
    let session_id = create_session(target, history, "crash-create").await;
    let stop = CancellationToken::new();
    let follower = follow(
        target,
        history,
        "crash-follower",
        &session_id,
        0,
        stop.clone(),
    );
    running
        .store_of(&point)
        .crash_at(point.operation, point.nth, point.applied);

    let command_id = format!("crash-{}", agent_runtime::ids::nanoid());
    let text = format!("demo:deltas=3 {command_id}");
    let data = json!({ "sessionId": session_id, "input": text });
    let body = command_body(&command_id, "input.submit", data);
    let first = send_once(target, &body).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !running.store_of(&point).crashed() {
        assert!(
            Instant::now() < deadline,
            "{}: the process never reached {}",
            deployment.label(),
            point.label()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.stop(history).await;
    stop.cancel();
    let cursor = follower.await.unwrap();

    *generation += 1;
    running = deployment.start(*generation).await;
    target.set_base(&running.server.base);
    let stop = CancellationToken::new();
    let follower = follow(
        target,
        history,
        "crash-follower",
        &session_id,
        cursor,
        stop.clone(),
    );
    let never = CancellationToken::new();
    let retried = target
        .send_or_last(&body, &never, Duration::from_secs(60))
        .await
        .unwrap_or_else(|last| {
            panic!(
                "{} {}: the retry gets no definite answer: {last}",
                deployment.label(),
                point.label()
            )
        });
    let acked = |response: Value| {
        AckedCommand::untimed(
            command_id.clone(),
            "input.submit",
            Some(session_id.clone()),
            body.clone(),
            response,
            Some(text.clone()),
        )
    };
    match first {
        Some(first) => {
            history.acked(acked(first));
            history.replay(Replay {
                command_id: command_id.clone(),
                response: retried,
            });
        }
        None => history.acked(acked(retried)),
    }
    let sessions = [session_id.clone()];
    resume_all(target, history, &sessions).await;
    settle(target, history, &sessions).await;
    stop.cancel();
    follower.await.unwrap();
    (running, session_id)
}

/// Inputs in the final transcripts that no acknowledged command answers for: an effect without
/// its receipt.
fn effects_without_receipt(recorded: &Recorded, final_log: &FinalLog) -> Vec<String> {
    let answered: std::collections::HashSet<&str> = recorded
        .acked
        .iter()
        .filter(|command| command.kind == "input.submit" && command.response["ok"] == true)
        .filter_map(|command| command.response["data"]["inputId"].as_str())
        .collect();
    let mut orphans = Vec::new();
    for (session_id, session) in final_log {
        let Ok(transcript) = serde_json::from_str::<Value>(&session.transcript) else {
            continue;
        };
        let applied = transcript["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                entry["message"]
                    .as_object()
                    .and_then(message_compat::correlated_input_id)
            });
        let pending = transcript["pendingInputs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|pending| pending["inputId"].as_str());
        for input_id in applied.chain(pending) {
            if !answered.contains(input_id) {
                orphans.push(format!("{session_id}: input {input_id}"));
            }
        }
    }
    orphans
}

async fn crash_point_suite(deployment: Deployment) {
    let label = deployment.label();
    let history = Arc::new(History::new());
    let mut generation = 0;
    let mut running = deployment.start(generation).await;
    let target = Target::new(&running.server.base);
    let (points, probed) = probe(&running, &target, &history).await;
    eprintln!("{label}: {} crash points: {points:?}", points.len());
    let mut sessions = vec![probed];
    for point in points {
        let session;
        (running, session) = crash_once(
            &deployment,
            running,
            &mut generation,
            point,
            &target,
            &history,
        )
        .await;
        eprintln!("{label}: {} done", point.label());
        sessions.push(session);
    }
    replay_acknowledged(&target, &history).await;
    running.stop(&history).await;

    let store = deployment.store().await;
    let final_log = read_final(store.as_ref(), TENANT, &sessions).await;
    let recorded = history.snapshot();
    let violations = check(&recorded, &final_log);
    assert!(
        violations.is_empty(),
        "{label}: {} violations: {:#?}",
        violations.len(),
        &violations[..violations.len().min(20)]
    );
    let orphans = effects_without_receipt(&recorded, &final_log);
    assert!(
        orphans.is_empty(),
        "{label}: effects without a receipt: {orphans:?}"
    );
    let ended: usize = final_log
        .values()
        .flat_map(|session| &session.events)
        .filter(|event| is_result(event))
        .count();
    assert!(ended >= sessions.len(), "{label}: too few requests ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_points_on_jsonl_serve() {
    crash_point_suite(Deployment::Jsonl(tempfile::tempdir().unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_points_on_postgres_serve() {
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    crash_point_suite(Deployment::PostgresServe(url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_points_in_the_postgres_cluster() {
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    crash_point_suite(Deployment::Cluster {
        url,
        clock: clock::system(),
    })
    .await;
}
