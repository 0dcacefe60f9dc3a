//! The history checker of the event log: concurrent clients submit inputs and follow SSE with
//! random disconnects while store faults and restarts happen; everything they were told is recorded
//! and checked against the store's final log (tests/support/history.rs).
//!
//! - `history_jsonl_*`: one server on a JSONL directory, restarted on the same directory;
//! - `history_postgres_*`: an in-process cluster (a gateway and two executors over gRPC) on
//!   PostgreSQL, with executors drained and replaced (handoffs);
//! - `pg_10_*`: the PostgreSQL cluster run with database-level faults in turns (PostgreSQL
//!   restarts, `pg_terminate_backend` of every store connection, the gateway replaced) and a
//!   reader whose `session.read`s feed the real-time (read-your-writes) check (reliability
//!   catalogue PG-10);
//! - `history_checker_*`: the checker itself, on hand-made histories with each kind of violation,
//!   and the proof that it catches a stale writer when fencing is disabled.
//!
//! At the end faults are healed, the JSONL server restarts once more and resumes every session,
//! every session settles, every acknowledged command is replayed, and the final log is read by a
//! fresh store. `AGENT_RUNTIME_HISTORY_FAULTS=op1,op2` limits the
//! injected faults to those store operations (`none`: no fault), e.g. to bisect a violation.
//!
//! Each run lasts `AGENT_RUNTIME_HISTORY_SECONDS` (default 120: the acceptance asks for at least
//! two minutes per backend in CI; set it lower while developing, higher to soak).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::executors::{
    executor_config, gateway_config, postgres_store, start_demo_executor, start_test_gateway,
};
use crate::support::history::*;
use crate::support::history_clients::*;
use crate::support::*;
use agent_runtime::clock::{self, ManualClock, SharedClock};
use agent_runtime::protocol::{EventType, JsonObject};
use agent_runtime_cli::Overrides;
use agent_runtime_cli::cluster::RunningExecutor;
use agent_runtime_cli::config::StoreKind;
use agent_runtime_store::Operation;
use agent_runtime_store::faulty::FaultyStore;
use agent_runtime_store::{
    AcquireLease, EventLog, ExecutionLeases, JsonlStore, NewEvent, PostgresOptions, PostgresStore,
    Store, StoreOptions,
};
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const TENANT: &str = "tenant-a";
const SESSIONS: usize = 3;
const SUBMITTERS: usize = 3;
const FOLLOWERS_PER_SESSION: usize = 2;

fn history_duration() -> Duration {
    let seconds = std::env::var("AGENT_RUNTIME_HISTORY_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(120);
    Duration::from_secs(seconds)
}

// ---------------------------------------------------------------------------------------------
// The clients

/// Creates the sessions of a run (recorded as acknowledged commands).
async fn create_sessions(target: &Target, history: &History) -> Vec<String> {
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(create_session(target, history, "hist-create").await);
    }
    sessions
}

/// Submits inputs (short demo outputs, sometimes a slow one so that others steer or queue, with
/// random priorities) and reads sessions, until `stop`.
async fn submitter(
    target: Target,
    history: Arc<History>,
    sessions: Vec<String>,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        let session_id = sessions[rand::random_range(0..sessions.len())].clone();
        let command_id = format!("hist-{}", agent_runtime::ids::nanoid());
        let (kind, data, input_text) = if rand::random_range(0..10) == 0 {
            ("session.read", json!({ "sessionId": session_id }), None)
        } else {
            let output = if rand::random_range(0..12) == 0 {
                "demo:slow".to_owned()
            } else {
                format!("demo:deltas={}", rand::random_range(1..8))
            };
            let text = format!("{output} {command_id}");
            let mut data = json!({ "sessionId": session_id, "input": text });
            let priority = ["now", "next", "later", ""][rand::random_range(0..4)];
            if !priority.is_empty() {
                data["priority"] = json!(priority);
            }
            ("input.submit", data, Some(text))
        };
        let body = command_body(&command_id, kind, data);
        let sent_at = std::time::Instant::now();
        match target.send(&body, &stop, Duration::from_secs(5)).await {
            Some(response) => history.acked(AckedCommand {
                command_id,
                kind: kind.to_owned(),
                session_id: Some(session_id),
                body,
                response,
                input_text,
                sent_at: Some(sent_at),
                acked_at: Some(std::time::Instant::now()),
            }),
            None => history.uncertain(&command_id),
        }
        tokio::time::sleep(jitter(10, 150)).await;
    }
}

/// Reads sessions (`session.read`) through the public API, recording when each read was first
/// sent: the real-time (read-your-writes) check holds them against the inputs acknowledged
/// before.
async fn reader(
    target: Target,
    history: Arc<History>,
    sessions: Vec<String>,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        let session_id = sessions[rand::random_range(0..sessions.len())].clone();
        let command_id = format!("hist-read-{}", agent_runtime::ids::nanoid());
        let body = command_body(
            &command_id,
            "session.read",
            json!({ "sessionId": session_id }),
        );
        let sent_at = std::time::Instant::now();
        match target.send(&body, &stop, Duration::from_secs(5)).await {
            Some(response) => history.acked(AckedCommand {
                command_id,
                kind: "session.read".to_owned(),
                session_id: Some(session_id),
                body,
                response,
                input_text: None,
                sent_at: Some(sent_at),
                acked_at: Some(std::time::Instant::now()),
            }),
            None => history.uncertain(&command_id),
        }
        tokio::time::sleep(jitter(30, 120)).await;
    }
}

/// Follows one session over SSE, disconnecting at random and reconnecting from the last sequence
/// it saw (alternately with `Last-Event-ID` and `?after=`); records every connection.
async fn follower(
    target: Target,
    history: Arc<History>,
    client: String,
    session_id: String,
    stop: CancellationToken,
) {
    let mut cursor = 0u64;
    let mut attempt = 0u64;
    while !stop.is_cancelled() {
        attempt += 1;
        let resume_by_header = attempt.is_multiple_of(2);
        let query = if resume_by_header {
            String::new()
        } else {
            format!("?after={cursor}")
        };
        let mut request = target
            .http
            .get(format!(
                "{}/sessions/{session_id}/events{query}",
                target.base()
            ))
            .bearer_auth(TOKEN_A)
            .timeout(Duration::from_secs(3600));
        if resume_by_header {
            request = request.header("last-event-id", cursor.to_string());
        }
        let answer = tokio::select! {
            () = stop.cancelled() => break,
            answer = request.send() => answer,
        };
        let response = match answer {
            Ok(response) if response.status().as_u16() == 200 => response,
            _ => {
                tokio::time::sleep(jitter(20, 200)).await;
                continue;
            }
        };
        let mut reader = SseReader::new(response);
        let mut events = Vec::new();
        let hang_up = tokio::time::sleep(jitter(100, 3000));
        tokio::pin!(hang_up);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = &mut hang_up => break,
                frame = reader.next_event() => match frame {
                    Some(frame) => events.push(frame.data),
                    None => break,
                },
            }
        }
        let after = cursor;
        if let Some(last) = events.last() {
            cursor = last["sequence"].as_u64().unwrap();
        }
        history.connection(Connection {
            client: client.clone(),
            session_id: session_id.clone(),
            after,
            events,
        });
    }
}

/// Starts the clients of a run.
fn start_clients(
    tasks: &mut JoinSet<()>,
    target: &Target,
    history: &Arc<History>,
    sessions: &[String],
    stop: &CancellationToken,
) {
    for _ in 0..SUBMITTERS {
        tasks.spawn(submitter(
            target.clone(),
            Arc::clone(history),
            sessions.to_vec(),
            stop.clone(),
        ));
    }
    tasks.spawn(reader(
        target.clone(),
        Arc::clone(history),
        sessions.to_vec(),
        stop.clone(),
    ));
    for session_id in sessions {
        for index in 0..FOLLOWERS_PER_SESSION {
            tasks.spawn(follower(
                target.clone(),
                Arc::clone(history),
                format!("follower-{index}-{session_id}"),
                session_id.clone(),
                stop.clone(),
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Faults

/// Store operations whose failures the product claims to survive: a failed claim or seal is
/// released and retried, a result that cannot be stored is uncertain (`COMMAND_IN_PROGRESS`), a
/// failed read ends an SSE stream that the client resumes, a failed write fails its step.
const FAULTS: &[Operation] = &[
    Operation::ClaimCommand,
    Operation::SealCommand,
    Operation::CompleteCommand,
    Operation::GetSession,
    Operation::ReadEvents,
    Operation::WaitForEvents,
    Operation::AppendEvents,
    Operation::AppendEvent,
    Operation::LoadTranscript,
    Operation::MutateTranscript,
];

/// The PostgreSQL cluster run leaves out the executors' event and transcript write faults
/// (docs/reliability.md, "History checker", says what runs with them found);
/// `AGENT_RUNTIME_HISTORY_FAULTS` turns them back on.
const CLUSTER_FAULTS: &[Operation] = &[
    Operation::ClaimCommand,
    Operation::SealCommand,
    Operation::CompleteCommand,
    Operation::GetSession,
    Operation::ReadEvents,
    Operation::WaitForEvents,
    Operation::LoadTranscript,
];

/// The stores faults go to; emptied while a component restarts.
#[derive(Default)]
struct FaultTargets {
    /// The operations to fault (default [`FAULTS`]).
    operations: Option<&'static [Operation]>,
    stores: Mutex<Vec<Arc<FaultyStore>>>,
    injected: std::sync::atomic::AtomicU64,
}

impl FaultTargets {
    fn set(&self, stores: Vec<Arc<FaultyStore>>) {
        *self.stores.lock().unwrap() = stores;
    }

    fn remove(&self, store: &Arc<FaultyStore>) {
        self.stores
            .lock()
            .unwrap()
            .retain(|other| !Arc::ptr_eq(other, store));
        store.heal();
    }

    fn add(&self, store: Arc<FaultyStore>) {
        self.stores.lock().unwrap().push(store);
    }

    /// Every 100-400 ms: fail the next call of a random operation of a random store, or stall
    /// one for up to 300 ms.
    async fn inject(self: Arc<Self>, stop: CancellationToken) {
        while !stop.is_cancelled() {
            tokio::time::sleep(jitter(100, 400)).await;
            let faults: Vec<Operation> = match std::env::var("AGENT_RUNTIME_HISTORY_FAULTS") {
                Ok(list) => FAULTS
                    .iter()
                    .copied()
                    .filter(|fault| list.split(',').any(|named| named == fault.name()))
                    .collect(),
                Err(_) => self.operations.unwrap_or(FAULTS).to_vec(),
            };
            if faults.is_empty() {
                continue;
            }
            let operation = faults[rand::random_range(0..faults.len())];
            let held = {
                let stores = self.stores.lock().unwrap();
                if stores.is_empty() {
                    continue;
                }
                let store = &stores[rand::random_range(0..stores.len())];
                self.injected
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if rand::random_range(0..5) == 0 {
                    store.hold(operation);
                    Some(Arc::clone(store))
                } else {
                    store.fail_next(operation, 1);
                    None
                }
            };
            if let Some(store) = held {
                tokio::time::sleep(jitter(20, 300)).await;
                store.release(operation);
            }
        }
    }

    fn injected(&self) -> u64 {
        self.injected.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Checks a run and prints what it did.
fn assert_no_violation(label: &str, recorded: &Recorded, final_log: &FinalLog, restarts: usize) {
    let violations = check(recorded, final_log);
    let inputs = recorded
        .acked
        .iter()
        .filter(|command| command.input_status().is_some())
        .count();
    let seen: usize = recorded.connections.iter().map(|c| c.events.len()).sum();
    let logged: usize = final_log.values().map(|session| session.events.len()).sum();
    eprintln!(
        "{label}: {} commands acknowledged ({inputs} inputs), {} uncertain, {} connections \
         saw {seen} events, {} writes, {logged} events in the final log, {restarts} restarts",
        recorded.acked.len(),
        recorded.uncertain.len(),
        recorded.connections.len(),
        recorded.writes.len(),
    );
    if let Some(Violation::StaleRead {
        read_command_id,
        input_command_id,
        ..
    }) = violations
        .iter()
        .find(|v| matches!(v, Violation::StaleRead { .. }))
    {
        let find = |id: &str| recorded.acked.iter().find(|c| c.command_id == id).cloned();
        let (read, input) = (find(read_command_id), find(input_command_id));
        let mut answer = read
            .as_ref()
            .map(|c| c.response.to_string())
            .unwrap_or_default();
        answer.truncate(3000);
        eprintln!(
            "stale read {read_command_id} (sent {:?} after the input's ack): {answer}; input {input_command_id}: {}",
            read.as_ref()
                .and_then(|r| r.sent_at)
                .zip(input.as_ref().and_then(|i| i.acked_at))
                .map(|(sent, acked)| sent.duration_since(acked)),
            input.map(|c| c.response.to_string()).unwrap_or_default()
        );
    }
    let mut stale_by_status: BTreeMap<String, usize> = BTreeMap::new();
    for violation in &violations {
        if let Violation::StaleRead {
            input_command_id, ..
        } = violation
        {
            let status = recorded
                .acked
                .iter()
                .find(|c| &c.command_id == input_command_id)
                .and_then(|c| c.input_status().map(str::to_owned))
                .unwrap_or_default();
            *stale_by_status.entry(status).or_default() += 1;
        }
    }
    if !stale_by_status.is_empty() {
        eprintln!("stale reads by the input's status: {stale_by_status:?}");
    }
    for violation in violations.iter().take(3) {
        if let Violation::LostInput {
            command_id,
            session_id,
            ..
        } = violation
        {
            let command = recorded.acked.iter().find(|c| &c.command_id == command_id);
            let answer = command.map(|c| c.response.clone()).unwrap_or_default();
            let request_id = answer["data"]["requestId"].clone();
            let events: Vec<&Value> = final_log
                .get(session_id)
                .map(|s| {
                    s.events
                        .iter()
                        .filter(|e| e["requestId"] == request_id)
                        .collect()
                })
                .unwrap_or_default();
            eprintln!("lost input {command_id}: answer {answer}, its request's events {events:?}");
        }
    }
    assert!(
        violations.is_empty(),
        "{label}: {} violations, first ones: {:#?}",
        violations.len(),
        &violations[..violations.len().min(20)]
    );
    // The run exercised what it claims to.
    assert!(inputs >= 5, "{label}: too few acknowledged inputs");
    assert!(seen > 0 && logged > 0, "{label}: nothing was streamed");
    assert!(restarts >= 1, "{label}: no restart happened");
    assert!(!recorded.writes.is_empty(), "{label}: no write recorded");
}

// ---------------------------------------------------------------------------------------------
// JSONL: one server, restarted on the same directory

async fn start_jsonl(dir: &std::path::Path) -> (TestServer, Arc<FaultyStore>) {
    let mut last_error = None;
    // The previous server released the directory lock when it closed its store.
    for _ in 0..50 {
        match JsonlStore::open(dir, StoreOptions::default()).await {
            Ok(store) => {
                let faulty = Arc::new(FaultyStore::new(Arc::new(store)).recording_appends());
                let config = test_config(StoreKind::Jsonl, dir);
                let overrides = Overrides {
                    store: Some(faulty.clone() as Arc<dyn Store>),
                    ..Overrides::default()
                };
                return (TestServer::start_with(config, overrides).await, faulty);
            }
            Err(error) => last_error = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the JSONL store does not open: {last_error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_jsonl_with_store_faults_and_restarts_has_no_violation() {
    let duration = history_duration();
    let dir = tempfile::tempdir().unwrap();
    let history = Arc::new(History::new());
    let (mut server, mut faulty) = start_jsonl(dir.path()).await;
    let target = Target::new(&server.base);
    let sessions = create_sessions(&target, &history).await;

    let stop = CancellationToken::new();
    let mut clients = JoinSet::new();
    start_clients(&mut clients, &target, &history, &sessions, &stop);
    let faults = Arc::new(FaultTargets::default());
    faults.set(vec![Arc::clone(&faulty)]);
    let injector = tokio::spawn(Arc::clone(&faults).inject(stop.clone()));

    let deadline = Instant::now() + duration;
    let restart_every = (duration / 5).max(Duration::from_secs(2));
    let mut restarts = 0;
    while Instant::now() + restart_every < deadline {
        tokio::time::sleep(restart_every).await;
        faults.remove(&faulty);
        server.stop().await;
        history.writes_from(faulty.acknowledged_appends());
        history.aborted_from(faulty.refused_appends());
        (server, faulty) = start_jsonl(dir.path()).await;
        target.set_base(&server.base);
        faults.add(Arc::clone(&faulty));
        restarts += 1;
    }
    tokio::time::sleep_until(deadline).await;
    stop.cancel();
    injector.await.unwrap();
    while let Some(joined) = clients.join_next().await {
        joined.unwrap();
    }
    faults.remove(&faulty);

    // A last restart, then every session resumes and settles.
    server.stop().await;
    history.writes_from(faulty.acknowledged_appends());
    history.aborted_from(faulty.refused_appends());
    (server, faulty) = start_jsonl(dir.path()).await;
    target.set_base(&server.base);
    restarts += 1;
    resume_all(&target, &history, &sessions).await;
    settle(&target, &history, &sessions).await;
    replay_acknowledged(&target, &history).await;
    server.stop().await;
    history.writes_from(faulty.acknowledged_appends());
    history.aborted_from(faulty.refused_appends());
    let injected = faults.injected();

    // The final log, read from the directory by a fresh store (a restart).
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    let final_log = read_final(&store, TENANT, &sessions).await;
    assert_no_violation("jsonl", &history.snapshot(), &final_log, restarts);
    assert!(injected > 0 || std::env::var("AGENT_RUNTIME_HISTORY_FAULTS").is_ok());
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL: an in-process cluster with executor handoffs

const SECRET: &str = "history-cluster-secret";

async fn cluster_executor(
    url: &str,
    clock: &SharedClock,
    worker_id: &str,
) -> (RunningExecutor, Arc<FaultyStore>) {
    let faulty = Arc::new(FaultyStore::new(postgres_store(url).await).recording_appends());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = executor_config(worker_id, address, SECRET);
    let store = faulty.clone() as Arc<dyn Store>;
    let running = start_demo_executor(config, store, clock, listener).await;
    (running, faulty)
}

async fn cluster_gateway(url: &str, clock: &SharedClock) -> (TestServer, Arc<FaultyStore>) {
    let faulty = Arc::new(FaultyStore::new(postgres_store(url).await).recording_appends());
    let store = faulty.clone() as Arc<dyn Store>;
    let server = start_test_gateway(gateway_config(), store, clock, SECRET).await;
    (server, faulty)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_postgres_cluster_with_faults_and_handoffs_has_no_violation() {
    postgres_cluster_history(false).await;
}

/// PG-10: the Elle-style run on PostgreSQL. The workload of the cluster run above (clients submit
/// and read through the public API of a gateway and follow SSE; store faults; executor handoffs),
/// plus database-level faults in turns: a PostgreSQL restart (fast shutdown: every connection of
/// every component breaks, and for about a second nothing connects), `pg_terminate_backend` of
/// every store connection, and the gateway replaced by a new one (clients move to it, the old one
/// stops and ends its streams). The checker adds to the final-log checks the list-append ones:
/// one total order across clients, read-your-writes across connections, no aborted read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_10_history_on_postgres_with_restarts_killed_connections_and_gateway_replacement() {
    postgres_cluster_history(true).await;
}

/// The PostgreSQL cluster run; `database_faults` adds the PG-10 faults (on a private PostgreSQL
/// that the run can restart).
async fn postgres_cluster_history(database_faults: bool) {
    let duration = history_duration();
    let mut cluster = if database_faults {
        Some(
            tokio::task::spawn_blocking(agent_runtime_store::testing::postgres::PgCluster::start)
                .await
                .unwrap()
                .expect("a private PostgreSQL"),
        )
    } else {
        None
    };
    let url = match &cluster {
        Some(cluster) => cluster.create_database().await.expect("a test database"),
        None => agent_runtime_store::testing::postgres::fresh_database_url()
            .await
            .expect("a test database"),
    };
    let clock = clock::system();
    let history = Arc::new(History::new());
    let mut generation = 0;
    let mut executors = Vec::new();
    for _ in 0..2 {
        generation += 1;
        executors.push(cluster_executor(&url, &clock, &format!("executor-{generation}")).await);
    }
    let (mut gateway, mut gateway_store) = cluster_gateway(&url, &clock).await;
    let target = Target::new(&gateway.base);
    let sessions = create_sessions(&target, &history).await;

    let stop = CancellationToken::new();
    let mut clients = JoinSet::new();
    start_clients(&mut clients, &target, &history, &sessions, &stop);
    let faults = Arc::new(FaultTargets {
        operations: Some(CLUSTER_FAULTS),
        ..FaultTargets::default()
    });
    let mut stores = vec![Arc::clone(&gateway_store)];
    stores.extend(executors.iter().map(|(_, store)| Arc::clone(store)));
    faults.set(stores);
    let injector = tokio::spawn(Arc::clone(&faults).inject(stop.clone()));

    // Handoffs: the oldest executor drains (its sessions move on their next command) and a new
    // one takes its place. With database faults, one of them between handoffs, in turns.
    let deadline = Instant::now() + duration;
    let handoff_every = (duration / 5).max(Duration::from_secs(3));
    let mut handoffs = 0;
    let (mut pg_restarts, mut terminated, mut gateway_replacements) = (0, 0u64, 0);
    while Instant::now() + handoff_every < deadline {
        tokio::time::sleep(handoff_every / 2).await;
        if database_faults {
            match handoffs % 3 {
                0 => {
                    let mut stopped = cluster.take().unwrap();
                    cluster = Some(
                        tokio::task::spawn_blocking(move || {
                            stopped.stop().expect("PostgreSQL stops");
                            std::thread::sleep(Duration::from_millis(800));
                            stopped.restart().expect("PostgreSQL restarts");
                            stopped
                        })
                        .await
                        .unwrap(),
                    );
                    pg_restarts += 1;
                }
                1 => {
                    terminated += agent_runtime_store::testing::postgres::terminate_backends(&url)
                        .await
                        .expect("backends terminated");
                }
                _ => {
                    let (fresh, fresh_store) = cluster_gateway(&url, &clock).await;
                    target.set_base(&fresh.base);
                    faults.add(Arc::clone(&fresh_store));
                    let old = std::mem::replace(&mut gateway, fresh);
                    let old_store = std::mem::replace(&mut gateway_store, fresh_store);
                    faults.remove(&old_store);
                    old.stop().await;
                    history.writes_from(old_store.acknowledged_appends());
                    history.aborted_from(old_store.refused_appends());
                    gateway_replacements += 1;
                }
            }
        }
        tokio::time::sleep(handoff_every / 2).await;
        generation += 1;
        let fresh = cluster_executor(&url, &clock, &format!("executor-{generation}")).await;
        faults.add(Arc::clone(&fresh.1));
        executors.push(fresh);
        let (oldest, store) = executors.remove(0);
        faults.remove(&store);
        oldest.shutdown();
        oldest.wait().await.unwrap();
        history.writes_from(store.acknowledged_appends());
        history.aborted_from(store.refused_appends());
        handoffs += 1;
    }
    tokio::time::sleep_until(deadline).await;
    stop.cancel();
    injector.await.unwrap();
    while let Some(joined) = clients.join_next().await {
        joined.unwrap();
    }
    faults.set(Vec::new());
    for (_, store) in &executors {
        store.heal();
    }
    gateway_store.heal();

    // No final replacement of the executors here: a `session.resume` after every executor was
    // replaced waits for the old owners' leases to run out and may be refused with `OVERLOADED`
    // meanwhile, a liveness matter this safety check must not trip on.
    settle(&target, &history, &sessions).await;
    replay_acknowledged(&target, &history).await;
    gateway.stop().await;
    for (running, store) in executors {
        running.shutdown();
        running.wait().await.unwrap();
        history.writes_from(store.acknowledged_appends());
        history.aborted_from(store.refused_appends());
    }
    history.writes_from(gateway_store.acknowledged_appends());
    history.aborted_from(gateway_store.refused_appends());
    let injected = faults.injected();

    // The final log, read by a fresh connection after everything stopped.
    let store = postgres_store(&url).await;
    let final_log = read_final(store.as_ref(), TENANT, &sessions).await;
    let recorded = history.snapshot();
    let label = if database_faults { "pg-10" } else { "postgres" };
    eprintln!(
        "{label}: {pg_restarts} PostgreSQL restarts, {terminated} backends terminated, \
         {gateway_replacements} gateway replacements, {} refused appends, {} timed reads of a loaded session",
        recorded.aborted.len(),
        recorded
            .acked
            .iter()
            .filter(|c| c.kind == "session.read"
                && c.sent_at.is_some()
                && c.response["data"]["loaded"] == true)
            .count(),
    );
    assert_no_violation(label, &recorded, &final_log, handoffs);
    assert!(injected > 0 || std::env::var("AGENT_RUNTIME_HISTORY_FAULTS").is_ok());
    if database_faults {
        assert!(
            pg_restarts >= 1 && terminated >= 1 && gateway_replacements >= 1,
            "every database fault ran: {pg_restarts} restarts, {terminated} terminated, \
             {gateway_replacements} gateway replacements"
        );
    }
    drop(cluster);
}

// ---------------------------------------------------------------------------------------------
// Concurrent submitters into one session, then a restart (ATK-01)

/// Submitters of the burst runs, and submissions each (the attack used 2 × 150).
const BURST_SUBMITTERS: usize = 2;
const BURST_SUBMITS: usize = 150;

/// Two clients submit `now` inputs into one session as fast as they can; every acknowledged
/// input is recorded. Before the fix an input could be applied before its pending record was
/// stored; the late record listed it as pending forever, and the next load ran it again.
async fn burst(target: &Target, history: &Arc<History>, session_id: &str) {
    let mut submitters = JoinSet::new();
    for submitter in 0..BURST_SUBMITTERS {
        let target = target.clone();
        let history = Arc::clone(history);
        let session_id = session_id.to_owned();
        submitters.spawn(async move {
            let never = CancellationToken::new();
            for index in 0..BURST_SUBMITS {
                let command_id = format!("burst-{submitter}-{index}");
                let text = format!("demo:deltas=2 {command_id}");
                let priority = if index % 5 == 4 { "later" } else { "now" };
                let data = json!({ "sessionId": session_id, "input": text, "priority": priority });
                let body = command_body(&command_id, "input.submit", data);
                let response = target
                    .send(&body, &never, Duration::from_secs(30))
                    .await
                    .expect("a burst submission is answered");
                history.acked(AckedCommand::untimed(
                    command_id,
                    "input.submit",
                    Some(session_id.clone()),
                    body,
                    response,
                    Some(text),
                ));
            }
        });
    }
    while let Some(joined) = submitters.join_next().await {
        joined.unwrap();
    }
}

/// The burst's verdict: no violation, and every submission was acknowledged as accepted.
fn assert_burst_ran_each_input_once(label: &str, recorded: &Recorded, final_log: &FinalLog) {
    let violations = check(recorded, final_log);
    assert!(
        violations.is_empty(),
        "{label}: {} violations, first ones: {:#?}",
        violations.len(),
        &violations[..violations.len().min(20)]
    );
    let accepted = recorded
        .acked
        .iter()
        .filter(|command| command.command_id.starts_with("burst-"))
        .filter(|command| command.input_status().is_some())
        .count();
    assert_eq!(
        accepted,
        BURST_SUBMITTERS * BURST_SUBMITS,
        "{label}: every burst input accepted"
    );
}

/// One burst, a restart of the deployment (`restart` stops what runs and starts it again on the
/// same store), then every session resumes and settles, and the final log is checked.
async fn burst_restart_and_check<R, F>(
    label: &str,
    target: &Target,
    history: &Arc<History>,
    mut restart: R,
) -> Vec<String>
where
    R: FnMut() -> F,
    F: std::future::Future<Output = ()>,
{
    let never = CancellationToken::new();
    let command_id = format!("burst-create-{}", agent_runtime::ids::nanoid());
    let body = command_body(&command_id, "session.create", json!({}));
    let created = target
        .send(&body, &never, Duration::from_secs(60))
        .await
        .expect("a session is created");
    let session_id = created["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let sessions = vec![session_id.clone()];
    burst(target, history, &session_id).await;
    settle(target, history, &sessions).await;
    restart().await;
    resume_all(target, history, &sessions).await;
    settle(target, history, &sessions).await;
    eprintln!(
        "{label}: burst of {} inputs done",
        BURST_SUBMITTERS * BURST_SUBMITS
    );
    sessions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_jsonl_concurrent_submits_then_restart_run_each_input_once() {
    let dir = tempfile::tempdir().unwrap();
    let history = Arc::new(History::new());
    let server = Arc::new(tokio::sync::Mutex::new(Some(
        start_jsonl(dir.path()).await.0,
    )));
    let target = Target::new(&server.lock().await.as_ref().unwrap().base);
    let sessions = burst_restart_and_check("jsonl", &target, &history, || async {
        let mut running = server.lock().await;
        running.take().unwrap().stop().await;
        let (fresh, _) = start_jsonl(dir.path()).await;
        target.set_base(&fresh.base);
        *running = Some(fresh);
    })
    .await;
    server.lock().await.take().unwrap().stop().await;
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    let final_log = read_final(&store, TENANT, &sessions).await;
    assert_burst_ran_each_input_once("jsonl", &history.snapshot(), &final_log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_postgres_serve_concurrent_submits_then_restart_run_each_input_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = on_fresh_postgres(test_config(StoreKind::Jsonl, dir.path())).await;
    let url = config
        .database_url
        .as_ref()
        .map(|url| url.expose().to_owned())
        .unwrap();
    let history = Arc::new(History::new());
    let server = Arc::new(tokio::sync::Mutex::new(Some(
        TestServer::start(config.clone()).await,
    )));
    let target = Target::new(&server.lock().await.as_ref().unwrap().base);
    let sessions = burst_restart_and_check("postgres serve", &target, &history, || async {
        let mut running = server.lock().await;
        running.take().unwrap().stop().await;
        let fresh = TestServer::start(config.clone()).await;
        target.set_base(&fresh.base);
        *running = Some(fresh);
    })
    .await;
    server.lock().await.take().unwrap().stop().await;
    let store = postgres_store(&url).await;
    let final_log = read_final(store.as_ref(), TENANT, &sessions).await;
    assert_burst_ran_each_input_once("postgres serve", &history.snapshot(), &final_log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_postgres_cluster_concurrent_submits_then_handoff_run_each_input_once() {
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    let clock = clock::system();
    let history = Arc::new(History::new());
    let executor = Arc::new(tokio::sync::Mutex::new(Some(
        cluster_executor(&url, &clock, "burst-executor-1").await.0,
    )));
    let (gateway, _) = cluster_gateway(&url, &clock).await;
    let target = Target::new(&gateway.base);
    // The restart: a second executor joins and the first drains, so the session's next command
    // loads it from the store on the new one (a handoff).
    let sessions = burst_restart_and_check("postgres cluster", &target, &history, || async {
        let mut running = executor.lock().await;
        let fresh = cluster_executor(&url, &clock, "burst-executor-2").await.0;
        let old = running.replace(fresh).unwrap();
        old.shutdown();
        old.wait().await.unwrap();
    })
    .await;
    gateway.stop().await;
    let last = executor.lock().await.take().unwrap();
    last.shutdown();
    last.wait().await.unwrap();
    let store = postgres_store(&url).await;
    let final_log = read_final(store.as_ref(), TENANT, &sessions).await;
    assert_burst_ran_each_input_once("postgres cluster", &history.snapshot(), &final_log);
}

// ---------------------------------------------------------------------------------------------
// The checker catches a stale writer when fencing is off

fn stream_event(session_id: &str, text: &str) -> NewEvent {
    let mut data = JsonObject::new();
    data.insert("type".to_owned(), json!("content"));
    data.insert("delta".to_owned(), json!(text));
    NewEvent {
        session_id: session_id.to_owned(),
        request_id: Some("request-1".to_owned()),
        occurred_at: "2026-01-01T00:00:00.000Z".to_owned(),
        event_type: EventType::SessionStream,
        data,
    }
}

/// Two executors drive one session through the store API: the first holds the lease and writes,
/// its lease expires, the second acquires (a newer fencing token) and writes, and the first, not
/// knowing, keeps writing. Returns whether the stale write was accepted and what the checker says.
async fn stale_owner_history(disable_fencing: bool) -> (bool, Vec<Violation>) {
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    let clock = ManualClock::new(1_767_225_600_000);
    let options = PostgresOptions {
        clock: clock.clone(),
        ..PostgresOptions::default()
    };
    let postgres = PostgresStore::connect(&url, options).await.unwrap();
    if disable_fencing {
        postgres.disable_fencing_for_testing();
    }
    let postgres: Arc<dyn Store> = Arc::new(postgres);
    let first = FaultyStore::new(Arc::clone(&postgres)).recording_appends();
    let second = FaultyStore::new(Arc::clone(&postgres)).recording_appends();
    let session = "history-stale-owner";
    let lease = |lease_id: &str, owner_id: &str| AcquireLease {
        lease_id: lease_id.to_owned(),
        owner_id: owner_id.to_owned(),
        ttl_ms: 1_000,
    };

    let old = first
        .acquire_execution_lease(TENANT, session, lease("lease-a", "executor-1"))
        .await
        .unwrap();
    let events = vec![stream_event(session, "a1"), stream_event(session, "a2")];
    first
        .append_events(TENANT, session, events, Some(&old.fence()))
        .await
        .unwrap();
    clock.advance(1_001);
    let new = second
        .acquire_execution_lease(TENANT, session, lease("lease-b", "executor-2"))
        .await
        .unwrap();
    assert!(new.fencing_token > old.fencing_token);
    second
        .append_events(
            TENANT,
            session,
            vec![stream_event(session, "b1")],
            Some(&new.fence()),
        )
        .await
        .unwrap();
    let stale = first
        .append_events(
            TENANT,
            session,
            vec![stream_event(session, "a3")],
            Some(&old.fence()),
        )
        .await;
    second
        .append_events(
            TENANT,
            session,
            vec![stream_event(session, "b2")],
            Some(&new.fence()),
        )
        .await
        .unwrap();

    let history = History::new();
    history.writes_from(first.acknowledged_appends());
    history.writes_from(second.acknowledged_appends());
    history.aborted_from(first.refused_appends());
    // A reader of the whole log, too.
    let page = postgres.read_events(TENANT, session, 0, 100).await.unwrap();
    history.connection(Connection {
        client: "reader".to_owned(),
        session_id: session.to_owned(),
        after: 0,
        events: page
            .events
            .iter()
            .map(|event| serde_json::to_value(event).unwrap())
            .collect(),
    });
    let fresh = postgres_store(&url).await;
    let final_log = read_final(fresh.as_ref(), TENANT, &[session.to_owned()]).await;
    (stale.is_ok(), check(&history.snapshot(), &final_log))
}

#[tokio::test]
async fn history_checker_sees_a_stale_owner_write_only_when_fencing_is_disabled() {
    let (accepted, violations) = stale_owner_history(true).await;
    assert!(accepted, "without fencing the stale owner's write lands");
    assert!(
        violations.iter().any(|violation| matches!(
            violation,
            Violation::StaleWriter {
                token: 1,
                newer_token: 2,
                ..
            }
        )),
        "the checker must report the stale writer: {violations:?}"
    );

    let (accepted, violations) = stale_owner_history(false).await;
    assert!(!accepted, "with fencing the stale owner's write is refused");
    assert_eq!(violations, Vec::new());
}

// ---------------------------------------------------------------------------------------------
// The checker on hand-made histories

const S: &str = "session-1";

fn event(sequence: u64, text: &str) -> Value {
    json!({
        "protocolVersion": 1,
        "eventId": format!("event-{sequence}-{text}"),
        "sequence": sequence,
        "sessionId": S,
        "occurredAt": "2026-01-01T00:00:00.000Z",
        "type": "session.stream",
        "data": { "type": "content", "sessionId": S, "delta": text },
    })
}

fn events(sequences: &[u64]) -> Vec<Value> {
    sequences.iter().map(|&n| event(n, "x")).collect()
}

fn final_log(count: u64, transcript: &str) -> FinalLog {
    let mut log = FinalLog::new();
    log.insert(
        S.to_owned(),
        FinalSession {
            first_sequence: 1,
            events: events(&(1..=count).collect::<Vec<_>>()),
            transcript: transcript.to_owned(),
        },
    );
    log
}

fn seen(after: u64, sequences: &[u64]) -> Connection {
    Connection {
        client: "client-1".to_owned(),
        session_id: S.to_owned(),
        after,
        events: events(sequences),
    }
}

fn submitted(command_id: &str, text: &str, status: &str) -> AckedCommand {
    AckedCommand::untimed(
        command_id.to_owned(),
        "input.submit",
        Some(S.to_owned()),
        Vec::new(),
        json!({ "ok": true, "data": { "status": status } }),
        Some(text.to_owned()),
    )
}

fn write(lease: &str, token: u64, sequences: &[u64]) -> Write {
    Write {
        session_id: S.to_owned(),
        lease_id: Some(lease.to_owned()),
        fencing_token: Some(token),
        events: events(sequences),
    }
}

fn history(build: impl FnOnce(&mut Recorded)) -> Recorded {
    let mut recorded = Recorded::default();
    build(&mut recorded);
    recorded
}

#[test]
fn history_checker_accepts_a_consistent_history() {
    let recorded = history(|h| {
        h.connections.push(seen(0, &[1, 2, 3]));
        h.connections.push(seen(3, &[4, 5]));
        h.connections.push(seen(5, &[]));
        h.acked.push(submitted("c1", "hello c1", "started"));
        h.acked.push(submitted("c2", "later c2", "queued"));
        h.replays.push(Replay {
            command_id: "c1".to_owned(),
            response: json!({ "ok": true, "data": { "status": "started" } }),
        });
        h.writes.push(write("lease-a", 1, &[1, 2]));
        h.writes.push(write("lease-b", 2, &[3, 4, 5]));
    });
    let log = final_log(
        5,
        r#"{"entries":["hello c1"],"pendingInputs":["later c2"]}"#,
    );
    assert_eq!(check(&recorded, &log), Vec::new());
}

#[test]
fn history_checker_reports_a_gap_and_a_skip_on_reconnect() {
    let recorded = history(|h| {
        h.connections.push(seen(0, &[1, 3]));
        h.connections.push(seen(3, &[5]));
    });
    let violations = check(&recorded, &final_log(5, ""));
    assert_eq!(
        violations,
        vec![
            Violation::Gap {
                client: "client-1".to_owned(),
                session_id: S.to_owned(),
                expected: 2,
                got: 3
            },
            Violation::Gap {
                client: "client-1".to_owned(),
                session_id: S.to_owned(),
                expected: 4,
                got: 5
            },
        ]
    );
}

#[test]
fn history_checker_reports_a_duplicate_including_a_repeat_after_reconnect() {
    let recorded = history(|h| {
        h.connections.push(seen(0, &[1, 2, 2]));
        h.connections.push(seen(2, &[2, 3]));
    });
    let violations = check(&recorded, &final_log(3, ""));
    let duplicates = violations
        .iter()
        .filter(|v| matches!(v, Violation::Duplicate { sequence: 2, .. }))
        .count();
    assert_eq!(duplicates, 2, "{violations:?}");
}

#[test]
fn history_checker_reports_a_reorder() {
    let recorded = history(|h| h.connections.push(seen(0, &[1, 2, 4, 3])));
    let violations = check(&recorded, &final_log(4, ""));
    assert!(
        violations.contains(&Violation::Reorder {
            client: "client-1".to_owned(),
            session_id: S.to_owned(),
            previous: 4,
            got: 3
        }),
        "{violations:?}"
    );
}

#[test]
fn history_checker_reports_an_event_seen_before_it_was_durable() {
    // A client saw sequence 4, but after the restart the log ends at 3.
    let recorded = history(|h| h.connections.push(seen(0, &[1, 2, 3, 4])));
    let violations = check(&recorded, &final_log(3, ""));
    assert_eq!(
        violations,
        vec![Violation::NotInFinalLog {
            source: "client client-1".to_owned(),
            session_id: S.to_owned(),
            sequence: 4
        }]
    );
}

#[test]
fn history_checker_reports_two_different_events_at_one_sequence() {
    // A client saw one event at sequence 2; the final log has another one there.
    let recorded = history(|h| {
        h.connections.push(Connection {
            events: vec![event(1, "x"), event(2, "other")],
            ..seen(0, &[])
        });
    });
    let violations = check(&recorded, &final_log(2, ""));
    assert_eq!(
        violations,
        vec![Violation::Conflict {
            source: "client client-1".to_owned(),
            session_id: S.to_owned(),
            sequence: 2
        }]
    );
}

#[test]
fn history_checker_reports_a_lost_acknowledged_input() {
    let recorded = history(|h| {
        h.acked.push(submitted("kept", "text kept", "started"));
        h.acked.push(submitted("lost", "text lost", "steered"));
        // A started request that ended in an error before it applied its input is accounted for.
        let mut failed = submitted("failed", "text failed", "started");
        failed.response["data"]["requestId"] = json!("request-failed");
        h.acked.push(failed);
        // A definite refusal is not an acknowledged input.
        let mut refused = submitted("refused", "text refused", "started");
        refused.response = json!({ "ok": false, "error": { "code": "SESSION_NOT_FOUND" } });
        h.acked.push(refused);
    });
    let mut log = final_log(0, r#"{"entries":["text kept"]}"#);
    let mut ended = event(1, "x");
    ended["requestId"] = json!("request-failed");
    ended["data"] = json!({ "type": "result", "subtype": "error", "sessionId": S });
    log.get_mut(S).unwrap().events.push(ended);
    let violations = check(&recorded, &log);
    assert_eq!(
        violations,
        vec![Violation::LostInput {
            command_id: "lost".to_owned(),
            session_id: S.to_owned(),
            status: "steered".to_owned()
        }]
    );
}

#[test]
fn history_checker_reports_a_replay_with_another_result() {
    let recorded = history(|h| {
        h.acked.push(submitted("c1", "text", "started"));
        h.replays.push(Replay {
            command_id: "c1".to_owned(),
            response: json!({ "ok": true, "data": { "status": "queued" } }),
        });
    });
    let violations = check(&recorded, &final_log(0, "text"));
    assert_eq!(
        violations,
        vec![Violation::ReplayMismatch {
            command_id: "c1".to_owned()
        }]
    );
}

#[test]
fn history_checker_reports_two_writers_on_one_session() {
    // A stale owner (token 1) wrote after its successor (token 2).
    let stale = history(|h| {
        h.writes.push(write("lease-a", 1, &[1, 2]));
        h.writes.push(write("lease-b", 2, &[3]));
        h.writes.push(write("lease-a", 1, &[4]));
    });
    assert_eq!(
        check(&stale, &final_log(4, "")),
        vec![Violation::StaleWriter {
            session_id: S.to_owned(),
            sequence: 4,
            token: 1,
            newer_token: 2
        }]
    );
    // Two leases under one token.
    let shared = history(|h| {
        h.writes.push(write("lease-a", 1, &[1]));
        h.writes.push(write("lease-b", 1, &[2]));
    });
    assert_eq!(
        check(&shared, &final_log(2, "")),
        vec![Violation::TwoWritersOneToken {
            session_id: S.to_owned(),
            token: 1,
            leases: vec!["lease-a".to_owned(), "lease-b".to_owned()]
        }]
    );
    // Two writers acknowledged for one sequence with different events.
    let clash = history(|h| {
        h.writes.push(write("lease-a", 1, &[1]));
        h.writes.push(Write {
            events: vec![event(1, "other")],
            ..write("lease-b", 2, &[])
        });
    });
    assert!(
        check(&clash, &final_log(1, ""))
            .iter()
            .any(|v| matches!(v, Violation::Conflict { sequence: 1, .. }))
    );
}

#[test]
fn history_checker_reports_a_gap_in_the_final_log() {
    let mut log = final_log(2, "");
    log.get_mut(S).unwrap().events.push(event(4, "x"));
    assert_eq!(
        check(&Recorded::default(), &log),
        vec![Violation::FinalLogGap {
            session_id: S.to_owned(),
            expected: 3,
            got: 4
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// PG-10: the list-append checks on hand-made histories

/// A final log trimmed past `first_sequence`: nothing left to compare observations with, so
/// only the checks among observations can catch what follows.
fn trimmed_log(first_sequence: u64) -> FinalLog {
    let mut log = FinalLog::new();
    log.insert(
        S.to_owned(),
        FinalSession {
            first_sequence,
            events: Vec::new(),
            transcript: String::new(),
        },
    );
    log
}

#[test]
fn history_checker_reports_two_clients_that_see_different_events_at_one_sequence() {
    let recorded = history(|h| {
        h.connections.push(Connection {
            events: vec![event(1, "x"), event(2, "seen-by-one")],
            ..seen(0, &[])
        });
        h.connections.push(Connection {
            client: "client-2".to_owned(),
            events: vec![event(1, "x"), event(2, "seen-by-two")],
            ..seen(0, &[])
        });
    });
    let violations = check(&recorded, &trimmed_log(100));
    assert_eq!(
        violations,
        vec![Violation::Divergent {
            session_id: S.to_owned(),
            sequence: 2,
            first: "client client-1 (connection 0)".to_owned(),
            second: "client client-2 (connection 1)".to_owned(),
        }]
    );
    // Agreeing clients are fine.
    let agreeing = history(|h| {
        h.connections.push(seen(0, &[1, 2]));
        h.connections.push(Connection {
            client: "client-2".to_owned(),
            ..seen(1, &[2, 3])
        });
    });
    assert_eq!(check(&agreeing, &trimmed_log(100)), Vec::new());
}

#[test]
fn history_checker_reports_a_client_that_sees_a_sequence_change_after_reconnecting() {
    let recorded = history(|h| {
        h.connections.push(Connection {
            events: vec![event(1, "x"), event(2, "before")],
            ..seen(0, &[])
        });
        h.connections.push(Connection {
            events: vec![event(2, "after")],
            ..seen(1, &[])
        });
    });
    let violations = check(&recorded, &trimmed_log(100));
    assert_eq!(
        violations,
        vec![Violation::Divergent {
            session_id: S.to_owned(),
            sequence: 2,
            first: "client client-1 (connection 0)".to_owned(),
            second: "client client-1 (connection 1)".to_owned(),
        }]
    );
}

/// A `session.read` sent at `sent_at` whose transcript shows `shown`.
fn read(command_id: &str, sent_at: std::time::Instant, shown: &[&str]) -> AckedCommand {
    AckedCommand {
        command_id: command_id.to_owned(),
        kind: "session.read".to_owned(),
        session_id: Some(S.to_owned()),
        body: Vec::new(),
        response: json!({ "ok": true, "data": {
            "loaded": true,
            "messages": shown.iter().map(|text| json!({ "role": "user", "content": text })).collect::<Vec<_>>(),
            "pendingInputs": [],
        } }),
        input_text: None,
        sent_at: Some(sent_at),
        acked_at: Some(sent_at + Duration::from_millis(5)),
    }
}

#[test]
fn history_checker_reports_a_read_that_misses_an_input_acknowledged_before_it_started() {
    let t0 = std::time::Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let recorded = history(|h| {
        let mut input = submitted("input-1", "text of input-1", "queued");
        input.sent_at = Some(at(0));
        input.acked_at = Some(at(10));
        h.acked.push(input);
        // Sent before the input was acknowledged: it may or may not show it.
        h.acked.push(read("read-concurrent", at(5), &[]));
        // Sent after: it must show it.
        h.acked
            .push(read("read-shows", at(20), &["text of input-1"]));
        h.acked.push(read("read-stale", at(30), &[]));
    });
    let log = final_log(0, r#"{"pendingInputs":["text of input-1"]}"#);
    assert_eq!(
        check(&recorded, &log),
        vec![Violation::StaleRead {
            read_command_id: "read-stale".to_owned(),
            input_command_id: "input-1".to_owned(),
            session_id: S.to_owned(),
        }]
    );
}

#[test]
fn history_checker_reports_an_event_of_a_refused_append_that_a_client_saw() {
    let aborted = |text: &str| Write {
        session_id: S.to_owned(),
        lease_id: Some("stale-lease".to_owned()),
        fencing_token: Some(1),
        events: vec![event(3, text)],
    };
    let recorded = history(|h| {
        h.connections.push(Connection {
            events: vec![event(1, "x"), event(2, "x"), event(3, "never-durable")],
            ..seen(0, &[])
        });
        h.aborted.push(aborted("never-durable"));
    });
    let violations = check(&recorded, &trimmed_log(100));
    assert_eq!(
        violations,
        vec![Violation::ObservedAborted {
            client: "client-1".to_owned(),
            session_id: S.to_owned(),
            sequence: 3,
        }]
    );
    // The same event refused once and then written by an acknowledged retry is not aborted.
    let retried = history(|h| {
        h.connections.push(Connection {
            events: vec![event(1, "x"), event(2, "x"), event(3, "retried")],
            ..seen(0, &[])
        });
        h.aborted.push(aborted("retried"));
        h.writes.push(Write {
            events: vec![event(3, "retried")],
            ..write("lease-a", 2, &[])
        });
    });
    assert_eq!(check(&retried, &trimmed_log(100)), Vec::new());
}

#[test]
fn history_checker_reports_an_input_applied_twice_or_still_pending_after_it_ran() {
    let applied = |input_id: &str| {
        json!({ "message": { "role": "user", "content": "x",
            "correlation": { "inputId": input_id } } })
    };
    // Transcripts written before the newest message schema kept it under `metadata`.
    let applied_before = |input_id: &str| {
        json!({ "message": { "role": "user", "content": "x",
            "metadata": { "correlation": { "inputId": input_id } } } })
    };
    let transcript = json!({
        "entries": [applied("once"), applied("twice"), applied_before("twice"), applied("ran")],
        "pendingInputs": [{ "inputId": "ran" }, { "inputId": "waiting" }],
    });
    let violations = check(&Recorded::default(), &final_log(0, &transcript.to_string()));
    assert_eq!(
        violations,
        vec![
            Violation::InputRanTwice {
                session_id: S.to_owned(),
                input_id: "twice".to_owned(),
                times: 2
            },
            Violation::AppliedInputStillPending {
                session_id: S.to_owned(),
                input_id: "ran".to_owned()
            },
        ]
    );
}

#[test]
fn history_checker_reports_a_request_that_ended_twice() {
    let result = |sequence: u64| {
        json!({
            "type": "session.stream",
            "sequence": sequence,
            "requestId": "request-1",
            "data": { "type": "result", "subtype": "success" },
        })
    };
    let mut final_log = FinalLog::new();
    final_log.insert(
        S.to_owned(),
        FinalSession {
            first_sequence: 1,
            events: vec![result(1), result(2)],
            transcript: String::new(),
        },
    );
    let violations = check(&Recorded::default(), &final_log);
    assert_eq!(
        violations,
        vec![Violation::EndedTwice {
            session_id: S.to_owned(),
            request_id: "request-1".to_owned(),
        }]
    );
}
