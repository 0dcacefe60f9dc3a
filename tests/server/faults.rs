//! Faults in the store and telemetry (docs/protocol.md §12 items 4 and 6, decision P6).

use std::sync::Arc;

use crate::support::*;
use agent_runtime::telemetry::{
    AuditRecord, CommandMetric, EventMetric, Telemetry, TelemetryError,
};
use agent_runtime_cli::Overrides;
use agent_runtime_store::Operation;
use agent_runtime_store::Store;
use agent_runtime_store::faulty::FaultyStore;
use serde_json::{Value, json};

async fn faulty_server() -> (TestServer, Arc<FaultyStore>) {
    let inner = selected_store(DEFAULT_RETENTION).await;
    let faulty = Arc::new(FaultyStore::new(inner));
    let config = memory_config();
    let overrides = Overrides {
        store: Some(faulty.clone() as Arc<dyn Store>),
        ..Overrides::default()
    };
    (TestServer::start_with(config, overrides).await, faulty)
}

#[tokio::test]
async fn item_04_a_result_that_cannot_be_stored_is_uncertain_and_never_re_executed() {
    let (server, faulty) = faulty_server().await;
    faulty.fail_next(Operation::CompleteCommand, 1);
    let body = json!({ "protocolVersion": 1, "commandId": "uncertain-create", "type": "session.create", "data": {} });
    let bytes = serde_json::to_vec(&body).unwrap();
    for attempt in 0..2 {
        let (status, retry_after, result) = server.post_raw(TOKEN_A, bytes.clone()).await;
        assert_eq!(status, 409, "attempt {attempt}: {result}");
        assert_eq!(result["error"]["code"], "COMMAND_IN_PROGRESS");
        assert_eq!(result["error"]["retryable"], true);
        assert!(retry_after.is_some());
    }
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(
        list["sessions"].as_array().unwrap().len(),
        1,
        "created exactly once"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_store_failure_is_an_internal_error_that_hides_its_cause() {
    let (server, faulty) = faulty_server().await;
    faulty.fail_next(Operation::PutSession, 1);
    let (status, body) = server
        .command(TOKEN_A, "create-fails", "session.create", json!({}))
        .await;
    assert_eq!(status, 500);
    assert_eq!(body["error"]["code"], "INTERNAL_ERROR");
    assert_eq!(body["error"]["message"], "Internal server error");
    assert!(!body.to_string().contains("injected"));
    server.stop().await;
}

#[tokio::test]
async fn a_failed_claim_is_not_cached_and_a_retry_executes() {
    let (server, faulty) = faulty_server().await;
    faulty.fail_next(Operation::SealCommand, 1);
    let (status, _) = server
        .command(TOKEN_A, "seal-fails", "session.create", json!({}))
        .await;
    assert_eq!(status, 500);
    let (status, body) = server
        .command(TOKEN_A, "seal-fails", "session.create", json!({}))
        .await;
    assert_eq!(status, 200, "the released claim runs again: {body}");
    server.stop().await;
}

#[tokio::test]
async fn readyz_turns_503_when_the_store_is_not_healthy_and_back() {
    let (server, faulty) = faulty_server().await;
    let url = format!("{}/readyz", server.base);
    let ready = server.client.get(&url).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    assert_eq!(ready.json::<Value>().await.unwrap()["status"], "ready");
    faulty.fail_next(Operation::HealthCheck, 1);
    let not_ready = server.client.get(&url).send().await.unwrap();
    assert_eq!(not_ready.status().as_u16(), 503);
    assert_eq!(
        not_ready.json::<Value>().await.unwrap()["status"],
        "not_ready"
    );
    let again = server.client.get(&url).send().await.unwrap();
    assert_eq!(again.status().as_u16(), 200);
    server.stop().await;
}

/// Telemetry that fails in every way it can.
#[derive(Debug)]
struct BrokenTelemetry;

impl Telemetry for BrokenTelemetry {
    fn record_command(&self, _: &CommandMetric) -> Result<(), TelemetryError> {
        Err(TelemetryError("recordCommand failed".to_owned()))
    }
    fn record_event(&self, _: &EventMetric) -> Result<(), TelemetryError> {
        panic!("recordEvent panicked")
    }
    fn write_audit(&self, _: &AuditRecord) -> Result<(), TelemetryError> {
        Err(TelemetryError("writeAudit failed".to_owned()))
    }
}

#[tokio::test]
async fn item_06_failing_telemetry_changes_no_result_and_no_event() {
    let config = memory_config();
    let overrides = Overrides {
        telemetry: Some(Arc::new(BrokenTelemetry)),
        ..Overrides::default()
    };
    let server = TestServer::start_with(config, overrides).await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "hello").await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    server.stop().await;
}

#[tokio::test]
async fn streaming_deltas_are_group_committed() {
    let (server, faulty) = faulty_server().await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "demo:deltas=500").await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let deltas = events
        .iter()
        .filter(|e| stream_type(e) == Some("content"))
        .count();
    assert_eq!(deltas, 500);
    let sequences: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=events.len() as u64).collect::<Vec<_>>());
    let batches = faulty.calls(Operation::AppendEvents);
    assert!(batches < 500, "500 deltas took {batches} appends");
    server.stop().await;
}

#[tokio::test]
async fn a_request_stopped_by_a_store_failure_still_ends_with_an_error_result() {
    let (server, faulty) = faulty_server().await;
    let session = server.create_session(TOKEN_A).await;
    // The request's first event append fails, and so does the first attempt to write its end.
    faulty.fail_next(Operation::AppendEvent, 1);
    faulty.fail_next(Operation::AppendEvents, 1);
    let submitted = server.submit(TOKEN_A, &session, "hello").await;
    assert_eq!(submitted["status"], "started");
    // No resume and no other command: the runtime closes the request by itself.
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let error = events
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .expect("an error event");
    assert_eq!(error["data"]["code"], "INTERNAL_ERROR");
    assert!(
        !error["data"]["message"]
            .as_str()
            .unwrap()
            .contains("injected")
    );
    let result = events.last().unwrap();
    assert_eq!(result["data"]["subtype"], "error");
    assert_eq!(result["requestId"], submitted["requestId"]);
    // The session goes on.
    let again = server.submit(TOKEN_A, &session, "again").await;
    assert_eq!(again["status"], "started", "{again}");
    let after = result["sequence"].as_u64().unwrap();
    let next = server
        .collect_events(TOKEN_A, &session, after, is_result)
        .await;
    assert_eq!(next.last().unwrap()["data"]["subtype"], "success");
    server.stop().await;
}

/// What a panic or a store error must never put in a response: SQL, a connection string and its
/// password, a source path, a backtrace.
const INTERNALS: &str = "SELECT password FROM accounts -- postgres://admin:hunter2@db.internal/prod at store/src/postgres/mod.rs:42";

fn assert_opaque(status: u16, body: &Value, code: &str) {
    let text = body.to_string();
    for leak in [
        "SELECT",
        "hunter2",
        "postgres://",
        ".rs",
        "panicked",
        "backtrace",
        "injected",
    ] {
        assert!(!text.contains(leak), "{leak} leaked: {text}");
    }
    let keys: Vec<&String> = body.as_object().expect("a JSON object").keys().collect();
    assert_eq!(
        keys,
        ["commandId", "error", "ok", "protocolVersion"],
        "{text}"
    );
    let error_keys: Vec<&String> = body["error"].as_object().unwrap().keys().collect();
    assert!(
        error_keys
            .iter()
            .all(|k| ["code", "message", "retryable", "retryAfterMs"].contains(&k.as_str())),
        "{text}"
    );
    assert_eq!(body["error"]["code"], code, "{status}: {text}");
}

/// SEC-10: internal failures answer opaque bodies (code, message, retryable) with no SQL,
/// connection string, path or panic text, and the server goes on: a panic before the command
/// runs (in the claim) is a `500 INTERNAL_ERROR` on the same connection, not a dropped one; a
/// panic inside a running command is an uncertain outcome (`COMMAND_IN_PROGRESS`, never run
/// twice); a store error is a `500 INTERNAL_ERROR`.
#[tokio::test]
async fn sec_10_panics_and_store_errors_answer_opaque_bodies_and_the_server_goes_on() {
    let (server, faulty) = faulty_server().await;

    faulty.panic_next(Operation::ClaimCommand, INTERNALS);
    let (status, body) = server
        .command(TOKEN_A, "panics-in-claim", "session.create", json!({}))
        .await;
    assert_eq!(status, 500);
    assert_opaque(status, &body, "INTERNAL_ERROR");
    assert_eq!(body["error"]["message"], "Internal server error");
    // Nothing was claimed: the same command id runs now.
    let (status, body) = server
        .command(TOKEN_A, "panics-in-claim", "session.create", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");

    faulty.panic_next(Operation::PutSession, INTERNALS);
    let (status, body) = server
        .command(TOKEN_A, "panics-in-run", "session.create", json!({}))
        .await;
    assert_eq!(status, 409);
    assert_opaque(status, &body, "COMMAND_IN_PROGRESS");
    // Its outcome is unknown, so it is never run again under that id.
    let (status, body) = server
        .command(TOKEN_A, "panics-in-run", "session.create", json!({}))
        .await;
    assert_eq!(status, 409);
    assert_opaque(status, &body, "COMMAND_IN_PROGRESS");

    faulty.fail_next(Operation::PutSession, 1);
    let (status, body) = server
        .command(TOKEN_A, "store-error", "session.create", json!({}))
        .await;
    assert_eq!(status, 500);
    assert_opaque(status, &body, "INTERNAL_ERROR");

    // The server goes on: one session from the first command, and a new one now.
    server.create_session(TOKEN_A).await;
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 2, "{list}");
    server.stop().await;
}

/// RES-12: while the database stalls (every claim held before it reaches the store), a tenant's
/// commands beyond its in-flight and queue limits are shed with `503 OVERLOADED` and
/// `retry-after`, answered while the store is still stalled (nothing waits behind it without
/// bound), and no more of them than that hold store calls (one tenant cannot exhaust the pool).
/// Another tenant is still admitted. When the store answers again, every admitted command
/// completes and new ones run, without any intervention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn res_12_a_stalled_store_sheds_the_excess_at_once_and_recovers_by_itself() {
    const IN_FLIGHT: usize = 2;
    const QUEUED: usize = 4;
    const EXCESS: usize = 20;
    let inner = selected_store(DEFAULT_RETENTION).await;
    let faulty = Arc::new(FaultyStore::new(inner));
    let mut config = memory_config();
    config.gateway.tenant_limits = vec![agent_runtime_gateway::TenantLimits {
        tenant: "tenant-a".to_owned(),
        max_concurrent_commands: Some(IN_FLIGHT),
        max_queued_commands: Some(QUEUED),
        ..Default::default()
    }];
    let overrides = Overrides {
        store: Some(faulty.clone() as Arc<dyn Store>),
        ..Overrides::default()
    };
    let server = Arc::new(TestServer::start_with(config, overrides).await);
    faulty.hold(Operation::ClaimCommand);

    let (answers_tx, mut answers) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..IN_FLIGHT + QUEUED + EXCESS {
        let server = server.clone();
        let answers_tx = answers_tx.clone();
        tokio::spawn(async move {
            let body = json!({ "protocolVersion": 1, "commandId": format!("a-{i}"), "type": "session.create", "data": {} });
            let answer = server
                .post_raw(TOKEN_A, serde_json::to_vec(&body).unwrap())
                .await;
            let _ = answers_tx.send(answer);
        });
    }
    let deadline = std::time::Duration::from_secs(30);
    for _ in 0..EXCESS {
        let (status, retry_after, body) = tokio::time::timeout(deadline, answers.recv())
            .await
            .expect("the excess is answered while the store stalls")
            .unwrap();
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "OVERLOADED");
        assert_eq!(body["error"]["retryable"], true);
        assert_eq!(retry_after.as_deref(), Some("1"));
    }
    assert_eq!(
        faulty.calls(Operation::ClaimCommand),
        (IN_FLIGHT + QUEUED) as u64,
        "at most a tenant's slots and queue wait on the store"
    );
    assert!(
        answers.try_recv().is_err(),
        "the admitted commands are still waiting"
    );

    // Tenant B is admitted: its claim reaches the (stalled) store too.
    let b = {
        let server = server.clone();
        tokio::spawn(async move {
            server
                .command(TOKEN_B, "b-1", "session.create", json!({}))
                .await
        })
    };
    while faulty.calls(Operation::ClaimCommand) < (IN_FLIGHT + QUEUED) as u64 + 1 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    faulty.release(Operation::ClaimCommand);
    for _ in 0..IN_FLIGHT + QUEUED {
        let (status, _, body) = tokio::time::timeout(deadline, answers.recv())
            .await
            .expect("admitted commands complete once the store answers")
            .unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = b.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(
        list["sessions"].as_array().unwrap().len(),
        IN_FLIGHT + QUEUED
    );
    server.create_session(TOKEN_A).await;
}

/// Submits `text` and reads the session's events until that request's `result`.
async fn run_request(server: &TestServer, session: &str, text: &str) -> Value {
    let (_, events) = server.run_request(TOKEN_A, session, text, 0).await;
    events.last().unwrap().clone()
}

/// A live session keeps the transcript it writes: a model turn does not read the whole transcript
/// back from the store. A transcript write that fails (its outcome unknown) drops that copy, and
/// the next turn reads the store again, so the model sees what is stored.
#[tokio::test]
async fn a_live_session_reads_its_transcript_from_the_store_only_after_a_failed_write() {
    let (server, faulty) = faulty_server().await;
    let session = server.create_session(TOKEN_A).await;
    run_request(&server, &session, "first").await;
    let loads = faulty.calls(Operation::LoadTranscript);
    for text in ["second", "third"] {
        let result = run_request(&server, &session, text).await;
        assert_eq!(result["data"]["subtype"], "success", "{result}");
    }
    assert_eq!(
        faulty.calls(Operation::LoadTranscript),
        loads,
        "two more requests read no transcript"
    );

    // The next request's first transcript write fails, and the request with it: on PostgreSQL
    // its end (one write with the answer's message: its input was applied by its start),
    // elsewhere the write that applies its input.
    let (operation, expected) = match postgres_selected() {
        true => (
            Operation::AppendEvents,
            ["first", "second", "third", "fourth", "fifth"].as_slice(),
        ),
        false => (
            Operation::MutateTranscript,
            ["first", "second", "third", "fifth"].as_slice(),
        ),
    };
    faulty.fail_next(operation, 1);
    run_request(&server, &session, "fourth").await;
    let result = run_request(&server, &session, "fifth").await;
    assert_eq!(result["data"]["subtype"], "success", "{result}");
    assert_eq!(
        faulty.calls(Operation::LoadTranscript),
        loads + 1,
        "the turn after the failed write read the store"
    );
    let read = server.read(TOKEN_A, &session).await;
    let users: Vec<&str> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "user")
        .filter_map(|message| message["content"].as_str())
        .collect();
    assert_eq!(users, expected);
    server.stop().await;
}

/// The `input` texts of the user messages of a session, in order, and its waiting inputs.
async fn user_inputs(server: &TestServer, session: &str) -> (Vec<String>, usize) {
    let read = server.read(TOKEN_A, session).await;
    let users = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "user")
        .filter_map(|message| message["content"].as_str().map(str::to_owned))
        .collect();
    let pending = read["pendingInputs"].as_array().map_or(0, Vec::len);
    (users, pending)
}

/// R2: a queued input whose transcript write took effect but whose acknowledgement was lost. The
/// session resolves the unknown outcome by reading what is stored: the input is there, so it
/// stays queued, the answer is `queued`, and it runs once. (Answering `500 INTERNAL_ERROR` would
/// make a client submit it again under a new id while the stored input waits to run at the next
/// load: twice in all.)
#[tokio::test]
async fn r2_a_queued_input_whose_write_outcome_was_lost_is_resolved_and_runs_once() {
    let (server, faulty) = faulty_server().await;
    let session = server.create_session(TOKEN_A).await;
    let running = server
        .submit(TOKEN_A, &session, "demo:deltas=20 demo:interval=50")
        .await;
    assert_eq!(running["status"], "started", "{running}");
    // The request has applied its own input (a transcript write) once it streams.
    server
        .collect_events(TOKEN_A, &session, 0, |event| {
            stream_type(event) == Some("content")
        })
        .await;

    faulty.fail_after_applying(Operation::MutateTranscript, 1);
    let data =
        json!({ "sessionId": session, "input": "queued while running", "priority": "later" });
    let (status, answer) = server
        .command(TOKEN_A, "r2-queued", "input.submit", data)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["status"], "queued", "{answer}");

    let events = server
        .collect_events(TOKEN_A, &session, 0, |event| {
            is_result(event) && event["requestId"] != running["requestId"]
        })
        .await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    let (users, pending) = user_inputs(&server, &session).await;
    let ran = users.iter().filter(|text| *text == "queued while running");
    assert_eq!(ran.count(), 1, "{users:?}");
    assert_eq!(pending, 0);
    server.stop().await;
}

/// R2: the journal entry that starts a request took effect but its acknowledgement was lost. The
/// session reads the journal, finds its entry, and starts the request (rather than answering `500
/// INTERNAL_ERROR` and leaving a request open that nobody runs until the next load closes it as
/// lost).
#[tokio::test]
async fn r2_a_started_request_whose_journal_outcome_was_lost_is_resolved_and_runs() {
    let (server, faulty) = faulty_server().await;
    let session = server.create_session(TOKEN_A).await;
    faulty.fail_after_applying(Operation::AppendDurable, 1);
    let data = json!({ "sessionId": session, "input": "journal ack lost" });
    let (status, answer) = server
        .command(TOKEN_A, "r2-started", "input.submit", data)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["status"], "started", "{answer}");
    let request = answer["data"]["requestId"].as_str().unwrap();
    let events = server.until_result(TOKEN_A, &session, 0, request).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    let (users, _) = user_inputs(&server, &session).await;
    assert_eq!(users, ["journal ack lost"]);
    server.stop().await;
}

/// On PostgreSQL the journal write that starts a request also completes the command's receipt,
/// so the gateway makes no completion of its own; the answer is stored all the same (a retry with
/// the same id replays it byte for byte). Other stores complete it at the gateway. A started input
/// whose write was applied with its acknowledgement lost is covered by
/// `r2_a_started_request_whose_journal_outcome_was_lost_is_resolved_and_runs` (the receipt,
/// completed with it, is completed again as a no-op).
#[tokio::test]
async fn a_started_input_commits_its_receipt_with_its_acceptance_where_the_store_can() {
    let (server, faulty) = faulty_server().await;
    let session = server.create_session(TOKEN_A).await;
    let completions = faulty.calls(Operation::CompleteCommand);
    let data = json!({ "sessionId": session, "input": "receipt with the effect" });
    let (status, answer) = server
        .command(TOKEN_A, "with-its-receipt", "input.submit", data.clone())
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["status"], "started", "{answer}");
    let gateway_completions = faulty.calls(Operation::CompleteCommand) - completions;
    let expected = if postgres_selected() { 0 } else { 1 };
    assert_eq!(gateway_completions, expected, "completions by the gateway");
    let (status, replayed) = server
        .command(TOKEN_A, "with-its-receipt", "input.submit", data)
        .await;
    assert_eq!(
        (status, &replayed),
        (200, &answer),
        "the stored answer replays"
    );
    let request = answer["data"]["requestId"].as_str().unwrap();
    server.until_result(TOKEN_A, &session, 0, request).await;
    let (users, _) = user_inputs(&server, &session).await;
    assert_eq!(users, ["receipt with the effect"], "it ran once");
    server.stop().await;
}
