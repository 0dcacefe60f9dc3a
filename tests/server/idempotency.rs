//! Reliability catalogue P0, section A (idempotent commands): IDEM-01, 02, 03, 04, 06, 08 over
//! real HTTP, and IDEM-12 (receipt reaping). Like everything under `tests/server/`, CI runs it on the memory store and again on PostgreSQL
//! (`AGENT_RUNTIME_TEST_STORE=postgres`); the restart cases pick a durable store themselves (JSONL,
//! or PostgreSQL in that rerun).

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use agent_runtime::protocol::Scope;
use agent_runtime_cli::Overrides;
use agent_runtime_cli::config::{ServeConfig, StoreKind};
use agent_runtime_gateway::TokenGrant;
use agent_runtime_store::Operation;
use agent_runtime_store::faulty::FaultyStore;
use agent_runtime_store::testing::rng::SeededRng;
use agent_runtime_store::{JsonlStore, PostgresOptions, PostgresStore, Store, StoreOptions};
use serde_json::{Value, json};

fn command(command_id: &str, kind: &str, data: Value) -> Vec<u8> {
    serde_json::to_vec(
        &json!({ "protocolVersion": 1, "commandId": command_id, "type": kind, "data": data }),
    )
    .unwrap()
}

fn count(events: &[Value], kind: &str, request_id: &str) -> usize {
    events
        .iter()
        .filter(|event| stream_type(event) == Some(kind) && event["requestId"] == request_id)
        .count()
}

async fn open_durable(config: &ServeConfig) -> Arc<dyn Store> {
    match config.store {
        StoreKind::Jsonl => Arc::new(
            JsonlStore::open(&config.data_dir, StoreOptions::default())
                .await
                .unwrap(),
        ),
        StoreKind::Postgres => Arc::new(
            PostgresStore::connect(
                config.database_url.as_ref().unwrap().expose(),
                PostgresOptions::default(),
            )
            .await
            .unwrap(),
        ),
        StoreKind::Memory => unreachable!("the restart cases use a durable store"),
    }
}

/// A server on `store` (the durable store under faults) with `config`.
async fn server_over(config: ServeConfig, store: &Arc<FaultyStore>) -> TestServer {
    let overrides = Overrides {
        store: Some(Arc::clone(store) as Arc<dyn Store>),
        ..Overrides::default()
    };
    TestServer::start_with(config, overrides).await
}

#[tokio::test]
async fn idem_01_exact_replay_after_success() {
    let dir = tempfile::tempdir().unwrap();
    let config = durable_config(dir.path()).await;
    let server = TestServer::start(config.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    let body = command(
        "idem-01",
        "input.submit",
        json!({ "sessionId": session, "input": "demo:deltas=3" }),
    );
    let first = post(&server, TOKEN_A, &body).await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.bytes)
    );
    assert!(!first.replayed, "the first answer is no replay");
    let request_id = first.json()["data"]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    server.until_result(TOKEN_A, &session, 0, &request_id).await;

    // Three resubmissions of K+P, the third after a restart on the same store.
    let mut replays = Vec::new();
    for _ in 0..2 {
        replays.push(post(&server, TOKEN_A, &body).await);
    }
    server.stop().await;
    let server = TestServer::start(config).await;
    replays.push(post(&server, TOKEN_A, &body).await);
    for replay in &replays {
        assert_eq!(replay.status, first.status);
        assert_eq!(
            replay.bytes,
            first.bytes,
            "byte-identical: {}",
            String::from_utf8_lossy(&replay.bytes)
        );
        assert!(replay.replayed, "a replay carries `{REPLAY_HEADER}: true`");
    }

    // Applied once: one turn and one result for the request, and no other request started.
    let events = server.until_result(TOKEN_A, &session, 0, &request_id).await;
    assert_eq!(count(&events, "turn_start", &request_id), 1);
    assert_eq!(count(&events, "result", &request_id), 1);
    let turns = events
        .iter()
        .filter(|event| stream_type(event) == Some("turn_start"))
        .count();
    assert_eq!(turns, 1, "no second request was started by a replay");
    server.stop().await;
}

#[tokio::test]
async fn idem_02_same_id_different_payload_conflicts() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let other_session = server.create_session(TOKEN_A).await;
    let original = command(
        "idem-02",
        "input.submit",
        json!({ "sessionId": session, "input": "demo:deltas=2" }),
    );
    let first = post(&server, TOKEN_A, &original).await;
    assert_eq!(first.status, 200);
    let request_id = first.json()["data"]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = server.until_result(TOKEN_A, &session, 0, &request_id).await;
    let head = before.last().unwrap()["sequence"].as_u64().unwrap();

    // "K on a different route" does not apply: docs/protocol.md §4.1 has one command route. The
    // fingerprint is over the whole parsed command (§2.0 step 4), so type and session count.
    let variants = [
        // P′: another value of a field.
        command(
            "idem-02",
            "input.submit",
            json!({ "sessionId": session, "input": "demo:deltas=3" }),
        ),
        // Another command type with the same session.
        command("idem-02", "request.abort", json!({ "sessionId": session })),
        // The same input on another session.
        command(
            "idem-02",
            "input.submit",
            json!({ "sessionId": other_session, "input": "demo:deltas=2" }),
        ),
        // Reads keep no receipt of their own, but meet this one (as the reference answers).
        command("idem-02", "session.read", json!({ "sessionId": session })),
        command("idem-02", "session.list", json!({})),
    ];
    for variant in &variants {
        let answer = post(&server, TOKEN_A, variant).await;
        assert_eq!(answer.status, 409);
        let body = answer.json();
        assert_eq!(body["error"]["code"], "COMMAND_CONFLICT", "{body}");
        assert_eq!(body["error"]["retryable"], false);
        assert_eq!(body["commandId"], "idem-02");
        assert!(!answer.replayed);
    }

    // The stored record is unchanged: the original still replays byte for byte.
    let replay = post(&server, TOKEN_A, &original).await;
    assert_eq!((replay.status, &replay.bytes), (200, &first.bytes));
    assert!(replay.replayed);
    // No new events on either session: a marker request's first event directly follows the
    // old head (a stream would otherwise wait forever for events that never come).
    for (id, old_head) in [(&session, head), (&other_session, 0)] {
        let (marker_id, events) = server
            .run_request(TOKEN_A, id, "demo:deltas=1", old_head)
            .await;
        assert_eq!(events[0]["sequence"], old_head + 1);
        assert_eq!(events[0]["requestId"], marker_id.as_str(), "{}", events[0]);
    }
    server.stop().await;
}

#[tokio::test]
async fn idem_03_fingerprint_canonicalization() {
    let server = TestServer::memory().await;
    // The documented rule (docs/protocol.md §2.0 step 4, README "What it is"): the fingerprint is
    // over the canonical parsed form, keys sorted at every depth, `1.0` like `1`.
    let first_body = br#"{"protocolVersion":1,"commandId":"idem-03","type":"session.create","data":{"metadata":{"a":2,"b":{"x":1,"y":[1,2]}}}}"#;
    let first = post(&server, TOKEN_A, first_body).await;
    assert_eq!(first.status, 200);
    let equivalents: [&[u8]; 3] = [
        // Reordered keys at every depth.
        br#"{"data":{"metadata":{"b":{"y":[1,2],"x":1},"a":2}},"type":"session.create","commandId":"idem-03","protocolVersion":1}"#,
        // Whitespace.
        b"{ \"protocolVersion\" : 1 ,\n \"commandId\":\"idem-03\",\t\"type\":\"session.create\",\r\n\"data\":{ \"metadata\" : { \"a\" : 2 , \"b\" : { \"x\" : 1 , \"y\" : [ 1 , 2 ] } } } }",
        // `2.0` for `2` and `1.0` for `1`.
        br#"{"protocolVersion":1,"commandId":"idem-03","type":"session.create","data":{"metadata":{"a":2.0,"b":{"x":1.0,"y":[1,2.0]}}}}"#,
    ];
    for body in equivalents {
        let answer = post(&server, TOKEN_A, body).await;
        assert_eq!(
            (answer.status, &answer.bytes),
            (200, &first.bytes),
            "{} is the same command: replayed, not a conflict",
            String::from_utf8_lossy(body)
        );
        assert!(answer.replayed);
    }

    // Duplicate keys are refused outright (400) and claim nothing: the id stays free.
    let duplicate = br#"{"protocolVersion":1,"commandId":"idem-03-dup","type":"session.create","data":{"metadata":{"a":1,"a":2}}}"#;
    let answer = post(&server, TOKEN_A, duplicate).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["error"]["code"], "INVALID_COMMAND");
    let fixed = post(
        &server,
        TOKEN_A,
        br#"{"protocolVersion":1,"commandId":"idem-03-dup","type":"session.create","data":{"metadata":{"a":2}}}"#,
    )
    .await;
    assert_eq!(fixed.status, 200, "the refused body consumed nothing");
    assert!(!fixed.replayed);
    let listed = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idem_04_concurrent_duplicates() {
    // Scaled down for CI: 50 parallel duplicates × 20 rounds (the catalogue says 200 rounds).
    const PARALLEL: usize = 50;
    const ROUNDS: usize = 20;
    let server = Arc::new(TestServer::memory().await);
    let session = server.create_session(TOKEN_A).await;
    let mut request_ids = Vec::new();
    for round in 0..ROUNDS {
        let body = Arc::new(command(
            &format!("idem-04-{round}"),
            "input.submit",
            json!({ "sessionId": session, "input": "demo:deltas=2" }),
        ));
        let barrier = Arc::new(tokio::sync::Barrier::new(PARALLEL));
        let tasks: Vec<_> = (0..PARALLEL)
            .map(|_| {
                let (server, body, barrier) = (server.clone(), body.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    post(&server, TOKEN_A, &body).await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        let successes: Vec<&Raw> = answers.iter().filter(|a| a.status == 200).collect();
        assert!(
            !successes.is_empty(),
            "round {round}: someone got the result"
        );
        for answer in &answers {
            if answer.status == 200 {
                assert_eq!(
                    answer.bytes, successes[0].bytes,
                    "round {round}: one answer"
                );
            } else {
                let body = answer.json();
                assert_eq!(answer.status, 409, "round {round}: {body}");
                assert_eq!(body["error"]["code"], "COMMAND_IN_PROGRESS", "{body}");
                assert!(
                    answer.retry_after.is_some(),
                    "409 in progress + retry-after"
                );
            }
        }
        let request_id = successes[0].json()["data"]["requestId"]
            .as_str()
            .unwrap()
            .to_owned();
        server.until_result(TOKEN_A, &session, 0, &request_id).await;
        request_ids.push(request_id);
    }

    // Exactly one execution per key: one turn per round, each with its own request.
    let last = request_ids.last().unwrap();
    let events = server.until_result(TOKEN_A, &session, 0, last).await;
    let turns = events
        .iter()
        .filter(|event| stream_type(event) == Some("turn_start"))
        .count();
    assert_eq!(turns, ROUNDS, "never two applied executions of one key");
    for request_id in &request_ids {
        assert_eq!(count(&events, "turn_start", request_id), 1);
        assert_eq!(count(&events, "result", request_id), 1);
    }
    Arc::try_unwrap(server).ok().unwrap().stop().await;
}

/// IDEM-05: a gateway that dies after its claim committed but before the seal (the point of no
/// return) leaves a claim that nobody runs. `serve` owns its store, so at start-up it releases
/// it (ATK-03): the first retry runs the command, exactly once, and every later retry
/// replays that one answer. (The reference, and a cluster gateway, honour the claim's lease
/// first: another process could still hold it.)
#[tokio::test]
async fn idem_05_a_claim_left_by_a_crash_before_the_seal_runs_once_when_retried() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = durable_config(dir.path()).await;
    config.gateway.command_lease_ttl_ms = 5_000;
    config.gateway.shutdown_grace = Duration::from_millis(200);
    let body = command(
        "idem-05",
        "session.create",
        json!({ "metadata": { "n": 5 } }),
    );

    // The crash point: the claim is stored, the seal never happens.
    let faulty = Arc::new(FaultyStore::new(open_durable(&config).await));
    faulty.hold(Operation::SealCommand);
    let server = Arc::new(
        TestServer::start_with(
            config.clone(),
            Overrides {
                store: Some(faulty.clone() as Arc<dyn Store>),
                ..Overrides::default()
            },
        )
        .await,
    );
    let pending = {
        let server = server.clone();
        let body = body.clone();
        tokio::spawn(async move { post(&server, TOKEN_A, &body).await })
    };
    while faulty.calls(Operation::SealCommand) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    pending.abort();
    let _ = pending.await;
    Arc::into_inner(server)
        .expect("the only handle")
        .stop()
        .await;
    drop(faulty);

    let server = TestServer::start(config).await;
    let answer = post(&server, TOKEN_A, &body).await;
    assert_eq!(answer.status, 200, "{}", answer.json());
    for _ in 0..3 {
        let again = post(&server, TOKEN_A, &body).await;
        assert_eq!(again.json(), answer.json(), "the one answer is replayed");
    }
    let listed = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(
        listed["sessions"].as_array().unwrap().len(),
        1,
        "run exactly once"
    );
    server.stop().await;
}

/// IDEM-06: a command sealed and dispatched whose completion never reached the store is never
/// dispatched again (docs/protocol.md §2.0 step 8, docs/storage.md decision S5). `serve` owns its
/// store, so at start-up it looks for the command's effect (ATK-03): a create whose
/// session was stored answers that session. One it cannot decide (its lookup failed) keeps
/// answering `COMMAND_IN_PROGRESS` until the abandonment sweep (`gateway.abandon_sealed_after`)
/// turns it into a terminal `COMMAND_ABANDONED` (`retryable: false`, decision P3), as every sealed
/// command of a dead gateway does in a cluster. Neither runs twice.
#[tokio::test]
async fn idem_06_crash_after_seal_is_never_redispatched() {
    let dir = tempfile::tempdir().unwrap();
    let config = durable_config(dir.path()).await;
    let create = |command_id: &str, n: u64| {
        command(
            command_id,
            "session.create",
            json!({ "metadata": { "n": n } }),
        )
    };
    // Reconciled in key order: the lookup of `a` is the one that fails below.
    let (undecided, decided) = (create("idem-06-a", 6), create("idem-06-b", 7));

    // The crash point: sealed and dispatched (the session is created), but the completion never
    // reaches the store, as when the gateway dies right after the dispatch.
    let faulty = Arc::new(FaultyStore::new(open_durable(&config).await));
    let server = server_over(config.clone(), &faulty).await;
    for body in [&undecided, &decided] {
        faulty.fail_next(Operation::CompleteCommand, 1);
        let answer = post(&server, TOKEN_A, body).await;
        assert_eq!(answer.status, 409);
        assert_eq!(answer.json()["error"]["code"], "COMMAND_IN_PROGRESS");
    }
    server.stop().await;
    drop(faulty);

    // After a restart whose first effect lookup fails: `b` answers the session it created; `a`
    // stays in progress. Neither is dispatched a second time.
    let faulty = Arc::new(FaultyStore::new(open_durable(&config).await));
    faulty.fail_next(Operation::GetSession, 1);
    let server = server_over(config.clone(), &faulty).await;
    let answered = post(&server, TOKEN_A, &decided).await;
    assert_eq!(answered.status, 200, "{}", answered.json());
    assert_eq!(answered.json()["data"]["session"]["metadata"]["n"], 7);
    for _ in 0..3 {
        let answer = post(&server, TOKEN_A, &undecided).await;
        assert_eq!(answer.status, 409);
        let error = answer.json()["error"].clone();
        assert_eq!(error["code"], "COMMAND_IN_PROGRESS", "{error}");
        assert_eq!(error["retryable"], true);
        assert!(answer.retry_after.is_some());
    }
    let listed = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(
        listed["sessions"].as_array().unwrap().len(),
        2,
        "each applied once: {listed}"
    );
    server.stop().await;
    drop(faulty);

    // A server whose abandonment window has passed, and whose lookup fails again: the sweep
    // (first tick at start-up) makes the undecided command terminal; it never runs again.
    let mut abandoning = config.clone();
    abandoning.gateway.abandon_sealed_after = Duration::from_millis(1);
    let faulty = Arc::new(FaultyStore::new(open_durable(&config).await));
    faulty.fail_next(Operation::GetSession, 1);
    let server = server_over(abandoning, &faulty).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let abandoned = loop {
        let answer = post(&server, TOKEN_A, &undecided).await;
        let body = answer.json();
        if body["error"]["code"] == "COMMAND_ABANDONED" {
            assert_eq!(answer.status, 409);
            break body;
        }
        assert_eq!(body["error"]["code"], "COMMAND_IN_PROGRESS", "{body}");
        assert!(tokio::time::Instant::now() < deadline, "never abandoned");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(abandoned["error"]["retryable"], false, "decision P3");
    assert_eq!(abandoned["commandId"], "idem-06-a");
    let again = post(&server, TOKEN_A, &undecided).await;
    assert_eq!(again.json(), abandoned, "terminal and stable");
    assert_eq!(
        post(&server, TOKEN_A, &decided).await.json(),
        answered.json()
    );
    let listed = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 2);
    server.stop().await;
}

/// IDEM-12 / RES-13: a finished command's receipt is kept for `gateway.command_retention` (its
/// retries replay the stored answer) and then deleted by the sweep, after which the id runs as a
/// new command; the receipt table does not grow without bound.
#[tokio::test]
async fn idem_12_a_finished_commands_receipt_is_reaped_after_its_retention() {
    let dir = tempfile::tempdir().unwrap();
    let config = durable_config(dir.path()).await;
    let first = command(
        "idem-12",
        "session.create",
        json!({ "metadata": { "n": 1 } }),
    );
    let other = command(
        "idem-12",
        "session.create",
        json!({ "metadata": { "n": 2 } }),
    );

    let server = TestServer::start(config.clone()).await;
    let created = post(&server, TOKEN_A, &first).await;
    assert_eq!(created.status, 200);
    let replay = post(&server, TOKEN_A, &first).await;
    assert!(replay.replayed);
    assert_eq!(replay.bytes, created.bytes);
    let conflict = post(&server, TOKEN_A, &other).await;
    assert_eq!(conflict.json()["error"]["code"], "COMMAND_CONFLICT");
    server.stop().await;

    // Past the retention: the sweep (first tick at start-up) deletes the receipt.
    let mut reaping = config;
    reaping.gateway.command_retention = Duration::from_millis(1);
    let server = TestServer::start(reaping).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let fresh = loop {
        let answer = post(&server, TOKEN_A, &other).await;
        if answer.status == 200 {
            break answer;
        }
        assert_eq!(answer.json()["error"]["code"], "COMMAND_CONFLICT");
        assert!(tokio::time::Instant::now() < deadline, "never reaped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!fresh.replayed, "a new command, not a replay");
    assert_ne!(fresh.json()["data"], created.json()["data"]);
    let listed = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 2);
    server.stop().await;
}

#[tokio::test]
async fn idem_08_keys_are_scoped_per_tenant() {
    // The catalogue's 100 tenants, all with the same command id and different payloads.
    const TENANTS: usize = 100;
    let all = [
        Scope::SessionCreate,
        Scope::SessionRead,
        Scope::SessionWrite,
        Scope::PermissionResolve,
    ];
    let mut config = memory_config();
    let tokens: Vec<String> = (0..TENANTS).map(|i| format!("token-idem-08-{i}")).collect();
    for (i, token) in tokens.iter().enumerate() {
        config.tokens.push(TokenGrant::for_token(
            token,
            &format!("tenant-idem-{i}"),
            "user",
            &all,
        ));
    }
    // Enough admission for one command per tenant at once is the default (per tenant).
    let server = TestServer::start(config).await;
    let body_of = |i: usize| {
        command(
            "shared-key",
            "session.create",
            json!({ "metadata": { "tenant": i } }),
        )
    };

    let mut firsts = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let answer = post(&server, token, &body_of(i)).await;
        assert_eq!(answer.status, 200, "tenant {i}: no conflict across tenants");
        assert!(!answer.replayed, "tenant {i} ran its own command");
        let body = answer.json();
        assert_eq!(body["data"]["session"]["metadata"]["tenant"], i);
        firsts.push(answer);
    }
    let mut sessions = std::collections::HashSet::new();
    for (i, token) in tokens.iter().enumerate() {
        let replay = post(&server, token, &body_of(i)).await;
        assert_eq!(replay.status, 200);
        assert!(replay.replayed);
        assert_eq!(
            replay.bytes, firsts[i].bytes,
            "tenant {i} gets its own answer"
        );
        let id = replay.json()["data"]["session"]["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(sessions.insert(id), "a session id no other tenant got");
        // Another tenant's payload under the same id is this tenant's conflict, not a leak.
        let other = post(&server, token, &body_of((i + 1) % TENANTS)).await;
        assert_eq!(other.status, 409);
        assert_eq!(other.json()["error"]["code"], "COMMAND_CONFLICT");
    }
    // Each tenant sees its own single session only.
    for token in tokens.iter().take(3) {
        let listed = server.ok(token, "session.list", json!({})).await;
        assert_eq!(listed["sessions"].as_array().unwrap().len(), 1);
    }
    server.stop().await;
}

/// What the model expects of one (tenant, key): the first payload that succeeded and the answer
/// every later success must repeat.
#[derive(Default, Clone)]
struct Applied {
    payload: u64,
    answer: Value,
}

/// Sends one `session.create` under `key` until it is terminal (COMMAND_IN_PROGRESS is retried)
/// and checks the answer against the model.
async fn send_and_check(
    server: &TestServer,
    model: &tokio::sync::Mutex<std::collections::HashMap<(usize, usize), Applied>>,
    (tenant, key, payload): (usize, usize, u64),
) {
    let token = [TOKEN_A, TOKEN_B][tenant];
    let data = json!({ "metadata": { "payload": payload } });
    let (status, body) = loop {
        let (status, body) = server
            .command(token, &format!("key-{key}"), "session.create", data.clone())
            .await;
        if body["error"]["code"] != "COMMAND_IN_PROGRESS" {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut model = model.lock().await;
    match model.get(&(tenant, key)) {
        None => {
            assert_eq!(
                status, 200,
                "first terminal answer of {tenant}/{key}: {body}"
            );
            let session = &body["data"]["session"];
            assert_eq!(session["metadata"]["payload"], payload, "{body}");
            model.insert(
                (tenant, key),
                Applied {
                    payload,
                    answer: body,
                },
            );
        }
        Some(applied) if applied.payload == payload => {
            assert_eq!(status, 200, "{body}");
            assert_eq!(
                body, applied.answer,
                "every answer for {tenant}/{key} is the first"
            );
        }
        Some(_) => {
            assert_eq!(status, 409, "{body}");
            assert_eq!(
                body["error"]["code"], "COMMAND_CONFLICT",
                "a conflict only for another fingerprint: {body}"
            );
        }
    }
}

/// IDEM-15, model based: seeded random histories of submissions, retries, concurrent retries and
/// server restarts over three keys that both tenants use. Invariants: at most one effect per
/// (tenant, key) (each tenant ends with exactly one session per key it used), every terminal
/// answer for a (tenant, key) is the first one, `COMMAND_CONFLICT` only for another payload, and
/// no answer carries another tenant's session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_15_random_histories_keep_the_idempotency_invariants() {
    const SEEDS: [u64; 3] = [0x9e37_79b9_7f4a_7c15, 42, 0xdead_beef];
    const STEPS: usize = 40;
    for seed in SEEDS {
        let dir = tempfile::tempdir().unwrap();
        let config = || test_config(StoreKind::Jsonl, dir.path());
        let mut server = Arc::new(TestServer::start(config()).await);
        let model = Arc::new(tokio::sync::Mutex::new(std::collections::HashMap::new()));
        let mut rng = SeededRng::new(seed);
        for _ in 0..STEPS {
            let kind = rng.below(10);
            let op = (rng.below(2) as usize, rng.below(3) as usize, rng.below(2));
            match kind {
                // A restart: the receipts and sessions must survive it.
                0 => {
                    Arc::into_inner(server).unwrap().stop().await;
                    server = Arc::new(TestServer::start(config()).await);
                }
                // The same command sent several times at once (a client retrying on a timeout).
                1..=3 => {
                    let sent = op;
                    let racers = (0..4).map(|_| {
                        let (server, model) = (Arc::clone(&server), Arc::clone(&model));
                        tokio::spawn(async move { send_and_check(&server, &model, sent).await })
                    });
                    for racer in racers.collect::<Vec<_>>() {
                        racer.await.unwrap();
                    }
                }
                _ => send_and_check(&server, &model, op).await,
            }
        }
        let model = model.lock().await.clone();
        for (tenant, token) in [TOKEN_A, TOKEN_B].into_iter().enumerate() {
            let listed = server.ok(token, "session.list", json!({})).await;
            let mut sessions: Vec<String> = listed["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|session| session["sessionId"].as_str().unwrap().to_owned())
                .collect();
            sessions.sort();
            let mut expected: Vec<String> = model
                .iter()
                .filter(|((owner, _), _)| *owner == tenant)
                .map(|(_, applied)| {
                    let id = &applied.answer["data"]["session"]["sessionId"];
                    id.as_str().unwrap().to_owned()
                })
                .collect();
            expected.sort();
            assert_eq!(
                sessions, expected,
                "seed {seed:#x}: one session per key of {token}"
            );
        }
        Arc::into_inner(server).unwrap().stop().await;
    }
}

/// ATK-07: two commands that differ only in an integer past 64 bits would parse to the same
/// float, share a fingerprint, and the second would replay the first's result. Such a number (and
/// a decimal more precise than a 64-bit float) is refused with a clear `400 INVALID_COMMAND` that
/// claims nothing; exact large integers still work.
#[tokio::test]
async fn atk_07_numbers_past_64_bits_are_refused_not_rounded() {
    let server = TestServer::start(test_config(
        StoreKind::Memory,
        tempfile::tempdir().unwrap().path(),
    ))
    .await;
    let create = |command_id: &str, number: &str| {
        format!(
            r#"{{"protocolVersion":1,"commandId":"{command_id}","type":"session.create","data":{{"metadata":{{"n":{number}}}}}}}"#
        )
        .into_bytes()
    };
    for number in [
        "123456789012345678901",
        "123456789012345678902",
        "0.10000000000000000001",
    ] {
        let (status, _, body) = server.post_raw(TOKEN_A, create("atk07-big", number)).await;
        assert_eq!(status, 400, "{number}: {body}");
        assert_eq!(body["error"]["code"], "INVALID_COMMAND");
        assert_eq!(
            body["error"]["message"],
            "Command body has a number that cannot be represented exactly"
        );
    }
    // Nothing was claimed: the id runs with an exact number, and keeps that number.
    let (status, _, body) = server
        .post_raw(TOKEN_A, create("atk07-big", "18446744073709551615"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["data"]["session"]["metadata"]["n"].as_u64(),
        Some(u64::MAX)
    );
    // Another exact value under the same id is another command: a conflict, not a replay.
    let (status, _, body) = server
        .post_raw(TOKEN_A, create("atk07-big", "18446744073709551614"))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("COMMAND_CONFLICT")),
        "{body}"
    );
    server.stop().await;
}
