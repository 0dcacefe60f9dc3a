//! Restarting on the same JSONL directory (docs/protocol.md §12 item 11 and the restart
//! acceptance).

use crate::support::*;
use agent_runtime_cli::config::StoreKind;
use serde_json::json;

async fn jsonl_server(dir: &std::path::Path) -> TestServer {
    TestServer::start(test_config(StoreKind::Jsonl, dir)).await
}

#[tokio::test]
async fn item_11_a_second_server_on_the_same_store_resumes_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    let first = jsonl_server(dir.path()).await;
    let session = first.create_session(TOKEN_A).await;
    first.submit(TOKEN_A, &session, "hello").await;
    first.collect_events(TOKEN_A, &session, 0, is_result).await;
    first.stop().await;

    let second = jsonl_server(dir.path()).await;
    let resumed = second
        .ok(TOKEN_A, "session.resume", json!({ "sessionId": session }))
        .await;
    assert_eq!(resumed["session"]["sessionId"], session.as_str());
    let (_, events) = second.run_request(TOKEN_A, &session, "continue", 0).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    // The transcript carried over: both requests' messages are there.
    let read = second.read(TOKEN_A, &session).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 4);
    second.stop().await;
}

#[tokio::test]
async fn sessions_events_results_and_idempotency_survive_a_restart_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let first = jsonl_server(dir.path()).await;
    let create = json!({ "protocolVersion": 1, "commandId": "create-1", "type": "session.create", "data": { "metadata": { "a": 1 } } });
    let create_bytes = serde_json::to_vec(&create).unwrap();
    let (status, _, created) = first.post_raw(TOKEN_A, create_bytes.clone()).await;
    assert_eq!(status, 200);
    let session = created["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    first.submit(TOKEN_A, &session, "remember me").await;
    let before = first.collect_events(TOKEN_A, &session, 0, is_result).await;
    let raw_before = first
        .client
        .post(format!("{}/commands", first.base))
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .body(create_bytes.clone())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    first.stop().await;

    let second = jsonl_server(dir.path()).await;
    let raw_after = second
        .client
        .post(format!("{}/commands", second.base))
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .body(create_bytes)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        raw_before, raw_after,
        "the stored result is replayed byte for byte"
    );
    let after = second.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(
        before, after,
        "the same events with the same ids and sequences"
    );
    let list = second.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);
    // A changed payload under the same id still conflicts after the restart.
    let (status, body) = second
        .command(
            TOKEN_A,
            "create-1",
            "session.create",
            json!({ "metadata": { "a": 2 } }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("COMMAND_CONFLICT"))
    );
    second.stop().await;
}

#[tokio::test]
async fn a_command_for_an_active_session_after_a_restart_loads_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let first = jsonl_server(dir.path()).await;
    let session = first.create_session(TOKEN_A).await;
    first.stop().await;

    // Decision P12: no explicit resume needed.
    let second = jsonl_server(dir.path()).await;
    let submitted = second.submit(TOKEN_A, &session, "after restart").await;
    assert_eq!(submitted["status"], "started");
    let events = second.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    second.stop().await;
}

#[tokio::test]
async fn a_graceful_shutdown_ends_a_running_request_with_a_terminal_event() {
    let dir = tempfile::tempdir().unwrap();
    let first = jsonl_server(dir.path()).await;
    let session = first.create_session(TOKEN_A).await;
    first.submit(TOKEN_A, &session, "demo:slow").await;
    first
        .collect_events(TOKEN_A, &session, 0, |e| stream_type(e) == Some("content"))
        .await;
    first.stop().await;

    let second = jsonl_server(dir.path()).await;
    let events = second.collect_events(TOKEN_A, &session, 0, is_result).await;
    let error = events
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .unwrap();
    assert_eq!(error["data"]["code"], "EXECUTOR_SHUTDOWN");
    assert_eq!(events.last().unwrap()["data"]["subtype"], "error");
    second.stop().await;
}

/// The durable store of a restart case: JSONL in `dir`, or (with `AGENT_RUNTIME_TEST_STORE=postgres`)
/// the PostgreSQL database `url`; opened again for the second run.
async fn open_durable(
    dir: &std::path::Path,
    url: Option<&str>,
) -> std::sync::Arc<dyn agent_runtime_store::Store> {
    use agent_runtime_store::{JsonlStore, PostgresOptions, PostgresStore, StoreOptions};
    match url {
        Some(url) => std::sync::Arc::new(
            PostgresStore::connect(url, PostgresOptions::default())
                .await
                .expect("connect"),
        ),
        None => std::sync::Arc::new(
            JsonlStore::open(dir, StoreOptions::default())
                .await
                .expect("open"),
        ),
    }
}

async fn server_on(store: std::sync::Arc<dyn agent_runtime_store::Store>) -> TestServer {
    let dir = std::env::temp_dir();
    let overrides = agent_runtime_cli::Overrides {
        store: Some(store),
        ..agent_runtime_cli::Overrides::default()
    };
    TestServer::start_with(test_config(StoreKind::Memory, &dir), overrides).await
}

/// A server on a fault-injecting durable store (JSONL in `dir`, or a fresh PostgreSQL database in
/// the second pass), with the database URL to open the same store again.
async fn faulty_durable_server(
    dir: &std::path::Path,
) -> (
    Option<String>,
    std::sync::Arc<agent_runtime_store::faulty::FaultyStore>,
    TestServer,
) {
    let url = match postgres_selected() {
        true => Some(
            agent_runtime_store::testing::postgres::fresh_database_url()
                .await
                .unwrap(),
        ),
        false => None,
    };
    let faulty = std::sync::Arc::new(agent_runtime_store::faulty::FaultyStore::new(
        open_durable(dir, url.as_deref()).await,
    ));
    let server = server_on(std::sync::Arc::clone(&faulty) as _).await;
    (url, faulty, server)
}

fn body(command_id: &str, kind: &str, data: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(
        &json!({ "protocolVersion": 1, "commandId": command_id, "type": kind, "data": data }),
    )
    .unwrap()
}

fn user_messages_saying(read: &serde_json::Value, text: &str) -> usize {
    read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == text)
        .count()
}

/// ATK-03: commands in flight when the process stopped — sealed, with or without their effect
/// stored, or only claimed — must not answer `409 COMMAND_IN_PROGRESS` for the abandonment window
/// and then `COMMAND_ABANDONED` with their inputs never run. A process that owns its store decides
/// them at start-up: a retry with the same id answers the stored effect's result (an
/// input that was accepted runs once), or runs the command now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atk_03_commands_left_in_flight_answer_their_effect_or_run_when_retried_after_a_restart() {
    use agent_runtime_store::{CommandClaim, CommandReceipts, DurableJournal};

    let dir = tempfile::tempdir().unwrap();
    let (url, faulty, first) = faulty_durable_server(dir.path()).await;
    let session = first.create_session(TOKEN_A).await;

    // Stored, then the receipt's completion fails: as a crash between the two writes.
    let stored = body(
        "submit-stored",
        "input.submit",
        json!({ "sessionId": session, "input": "stored before the crash" }),
    );
    faulty.fail_next(agent_runtime_store::Operation::CompleteCommand, 1);
    let journal_head = || async {
        let head = faulty.durable_head("tenant-a", &session).await.unwrap();
        head.unwrap_or(0)
    };
    let journalled = journal_head().await;
    let (status, _, uncertain) = first.post_raw(TOKEN_A, stored.clone()).await;
    assert_eq!(status, 409, "the outcome is uncertain: {uncertain}");
    first.collect_events(TOKEN_A, &session, 0, is_result).await;
    // The terminal journal entry follows the result event: the next fault must not hit it.
    while journal_head().await < journalled + 2 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Its effect failed part-way: nothing of it was stored.
    let lost = body(
        "submit-lost",
        "input.submit",
        json!({ "sessionId": session, "input": "never stored" }),
    );
    faulty.fail_next(agent_runtime_store::Operation::AppendDurable, 1);
    let (status, _, failed) = first.post_raw(TOKEN_A, lost.clone()).await;
    assert_eq!(status, 500, "{failed}");
    let created = body("create-stored", "session.create", json!({}));
    faulty.fail_next(agent_runtime_store::Operation::CompleteCommand, 1);
    assert_eq!(first.post_raw(TOKEN_A, created.clone()).await.0, 409);
    let not_created = body("create-lost", "session.create", json!({}));
    faulty.fail_next(agent_runtime_store::Operation::PutSession, 1);
    assert_eq!(first.post_raw(TOKEN_A, not_created.clone()).await.0, 500);
    // Claimed and never sealed: the process stopped between the two.
    let claimed = body(
        "submit-claimed",
        "input.submit",
        json!({ "sessionId": session, "input": "claimed only" }),
    );
    let fingerprint = agent_runtime::protocol::command_fingerprint(
        &agent_runtime::protocol::parse_command(&claimed).unwrap(),
    );
    let claim = faulty
        .claim_command("tenant-a", "submit-claimed", &fingerprint, 60_000)
        .await
        .unwrap();
    assert!(matches!(claim, CommandClaim::Claimed { .. }), "{claim:?}");
    for command in [&stored, &created, &claimed] {
        let (status, _, answer) = first.post_raw(TOKEN_A, command.clone()).await;
        assert_eq!(status, 409, "in flight before the restart: {answer}");
        assert_eq!(answer["error"]["code"], "COMMAND_IN_PROGRESS");
    }
    // A failure that left nothing done reopened its command: it runs at once.
    for command in [&lost, &not_created] {
        let (status, _, answer) = first.post_raw(TOKEN_A, command.clone()).await;
        assert_eq!(status, 200, "runs when retried: {answer}");
    }
    first.stop().await;
    drop(faulty);

    let second = server_on(open_durable(dir.path(), url.as_deref()).await).await;
    let (status, _, answer) = second.post_raw(TOKEN_A, stored.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["status"], "started", "{answer}");
    let request_id = answer["data"]["requestId"].as_str().unwrap().to_owned();
    let events = second.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert!(
        events.iter().any(|e| e["requestId"] == request_id.as_str()),
        "the stored answer names the request that ran"
    );
    for command in [&lost, &claimed] {
        let (status, _, answer) = second.post_raw(TOKEN_A, command.clone()).await;
        assert_eq!(status, 200, "runs when retried: {answer}");
        let request = answer["data"]["requestId"].as_str().map(str::to_owned);
        second
            .collect_events(TOKEN_A, &session, 0, |e| {
                is_result(e) && request.as_deref().is_none_or(|id| e["requestId"] == id)
            })
            .await;
    }
    let (status, _, replayed) = second.post_raw(TOKEN_A, created.clone()).await;
    assert_eq!(status, 200, "{replayed}");
    let (status, _, fresh) = second.post_raw(TOKEN_A, not_created.clone()).await;
    assert_eq!(status, 200, "{fresh}");
    // Every input ran exactly once, and exactly the two creates that answered exist.
    let read = second.read(TOKEN_A, &session).await;
    for text in ["stored before the crash", "never stored", "claimed only"] {
        assert_eq!(user_messages_saying(&read, text), 1, "{text}: {read}");
    }
    let list = second.ok(TOKEN_A, "session.list", json!({})).await;
    let mut listed: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    listed.sort_unstable();
    let mut expected = vec![
        session.as_str(),
        replayed["data"]["session"]["sessionId"].as_str().unwrap(),
        fresh["data"]["session"]["sessionId"].as_str().unwrap(),
    ];
    expected.sort_unstable();
    assert_eq!(listed, expected);
    second.stop().await;
}

/// Session retention (ATK-02): a closed session past its retention is purged with all
/// it owns by the gateway's sweep, and from then on answers exactly like a session that never
/// existed, across restarts; a tenant with its own retention of 0 keeps its closed sessions, and
/// active sessions are never purged. On JSONL nothing of it is left on disk after the restart's
/// journal rewrite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_sessions_past_their_retention_are_purged_with_all_they_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = durable_config(dir.path()).await;
    config.gateway.closed_session_retention = std::time::Duration::ZERO;
    let first = TestServer::start(config.clone()).await;
    let purged = first.create_session(TOKEN_A).await;
    first.submit(TOKEN_A, &purged, "remember this").await;
    first.collect_events(TOKEN_A, &purged, 0, is_result).await;
    let kept = first.create_session(TOKEN_B).await;
    let active = first.create_session(TOKEN_A).await;
    for (token, session) in [(TOKEN_A, &purged), (TOKEN_B, &kept)] {
        first
            .ok(token, "session.close", json!({ "sessionId": session }))
            .await;
    }
    let (_, missing) = first
        .command(
            TOKEN_A,
            "read-missing",
            "session.read",
            json!({ "sessionId": "no-such-session" }),
        )
        .await;
    first.stop().await;

    let mut purging = config.clone();
    purging.gateway.closed_session_retention = std::time::Duration::from_millis(1);
    purging.gateway.tenant_limits = vec![agent_runtime_gateway::TenantLimits {
        tenant: "tenant-b".to_owned(),
        closed_session_retention: Some(std::time::Duration::ZERO),
        ..agent_runtime_gateway::TenantLimits::default()
    }];
    let second = TestServer::start(purging).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (status, _) = second
            .command(
                TOKEN_A,
                "read-purged",
                "session.read",
                json!({ "sessionId": purged }),
            )
            .await;
        if status == 404 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never purged");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    second.stop().await;

    let third = TestServer::start(config).await;
    let (status, answer) = third
        .command(
            TOKEN_A,
            "read-missing",
            "session.read",
            json!({ "sessionId": purged }),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(
        serde_json::to_string(&answer)
            .unwrap()
            .replace(&purged, "no-such-session"),
        serde_json::to_string(&missing).unwrap(),
        "a purged session answers like one that never existed"
    );
    let (status, _) = third
        .command(
            TOKEN_A,
            "resume-purged",
            "session.resume",
            json!({ "sessionId": purged }),
        )
        .await;
    assert_eq!(status, 404);
    let events = third.events(TOKEN_A, &purged, "?after=0", None).await;
    assert_eq!(events.status().as_u16(), 404);
    let listed = third.ok(TOKEN_A, "session.list", json!({})).await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![active.as_str()]);
    third.read(TOKEN_B, &kept).await;
    if !postgres_selected() {
        // Only the command receipts (kept for their own retention) still name it.
        let journal = std::fs::read_to_string(dir.path().join("server-store.jsonl")).unwrap();
        for line in journal
            .lines()
            .filter(|line| line.contains(purged.as_str()))
        {
            let entry: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                entry["kind"], "lease",
                "the rewritten journal still has {line}"
            );
        }
        assert!(!journal.contains("remember this"));
    }
    third.stop().await;
}

/// Stored results are bounded per tenant (ATK-02): past `max_stored_result_bytes_per_tenant` the
/// sweep deletes the tenant's oldest receipts (their ids then run as new commands) and keeps its
/// newest; another tenant's are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_stored_results_are_kept_within_its_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = durable_config(dir.path()).await;
    config.gateway.max_stored_result_bytes_per_tenant = 0;
    let first = TestServer::start(config.clone()).await;
    let padding = "x".repeat(1024);
    let creates: Vec<Vec<u8>> = (0..24)
        .map(|n| {
            body(
                &format!("create-{n:02}"),
                "session.create",
                json!({ "metadata": { "n": n, "padding": padding } }),
            )
        })
        .collect();
    let mut answers = Vec::new();
    for create in &creates {
        let answer = post(&first, TOKEN_A, create).await;
        assert_eq!(answer.status, 200, "{}", answer.json());
        answers.push(answer.json());
        // Distinct finish times, so "oldest" is well defined on every backend.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let other = body(
        "create-other",
        "session.create",
        json!({ "metadata": { "padding": padding } }),
    );
    assert_eq!(post(&first, TOKEN_B, &other).await.status, 200);
    first.stop().await;

    // A budget of about six results: the sweep at start-up keeps tenant-a's newest six.
    let size = serde_json::to_string(&answers[0]).unwrap().len() as u64;
    let mut bounded = config;
    bounded.gateway.max_stored_result_bytes_per_tenant = 6 * size + size / 2;
    let second = TestServer::start(bounded).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if !post(&second, TOKEN_A, &creates[0]).await.replayed {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never reaped");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for (create, answer) in creates.iter().zip(&answers).skip(24 - 5) {
        let again = post(&second, TOKEN_A, create).await;
        assert_eq!(again.status, 200);
        assert!(again.replayed, "a newest receipt is kept");
        assert_eq!(&again.json(), answer);
    }
    let replayed = post(&second, TOKEN_B, &other).await.replayed;
    assert!(replayed, "another tenant's receipts are untouched");
    second.stop().await;
}

/// Event retention by age (ATK-02): the sweep trims every session's events older than
/// `event_retention_ms`, keeping its newest; an older cursor is then `409 STALE_CURSOR`, across
/// restarts, while the newest event and the session's transcript stay readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_past_their_age_are_trimmed_and_older_cursors_are_stale() {
    let dir = tempfile::tempdir().unwrap();
    let config = durable_config(dir.path()).await;
    let first = TestServer::start(config.clone()).await;
    let session = first.create_session(TOKEN_A).await;
    first.submit(TOKEN_A, &session, "demo:deltas=5").await;
    let events = first.collect_events(TOKEN_A, &session, 0, is_result).await;
    let head = events.last().unwrap()["sequence"].as_u64().unwrap();
    first.stop().await;

    let mut trimming = config.clone();
    trimming.gateway.event_retention = std::time::Duration::from_millis(1);
    let second = TestServer::start(trimming).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while second
        .events(TOKEN_A, &session, "?after=0", None)
        .await
        .status()
        != 409
    {
        assert!(tokio::time::Instant::now() < deadline, "never trimmed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    second.stop().await;

    let third = TestServer::start(config).await;
    let stale = third.events(TOKEN_A, &session, "?after=0", None).await;
    assert_eq!(stale.status(), 409, "still trimmed after a restart");
    let newest = third
        .collect_events(TOKEN_A, &session, head - 1, is_result)
        .await;
    assert_eq!(newest.len(), 1);
    assert_eq!(newest[0]["sequence"], head);
    let read = third
        .ok(TOKEN_A, "session.resume", json!({ "sessionId": session }))
        .await;
    assert_eq!(read["session"]["sessionId"], session.as_str());
    let read = third.read(TOKEN_A, &session).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 2, "{read}");
    assert_eq!(read["recovery"]["lastEventSequence"], head);
    third.stop().await;
}

/// R1: a request's terminal `result` and the journal's `request_completed` are two writes. When
/// the second never lands — a crash between them; here a store that refuses it until the process
/// stops — the next start-up must not close the request again (`EXECUTOR_LOST` and a second
/// `result` for a request its followers saw end): the recovery finds the request's `result` in
/// the event log and only completes the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_a_request_whose_end_was_not_journalled_is_not_ended_twice_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (url, faulty, first) = faulty_durable_server(dir.path()).await;
    let session = first.create_session(TOKEN_A).await;
    // The input is journalled as accepted before the answer; from then on, no journal write lands.
    let submitted = first
        .submit(TOKEN_A, &session, "demo:deltas=10 demo:interval=50")
        .await;
    faulty.fail_always(agent_runtime_store::Operation::AppendDurable);
    let request = submitted["requestId"].as_str().unwrap().to_owned();
    let events = first.until_result(TOKEN_A, &session, 0, &request).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    first.stop().await;
    drop(faulty);

    let second = server_on(open_durable(dir.path(), url.as_deref()).await).await;
    // A second request loads the session (and recovers it) and runs after it.
    let (_, events) = second
        .run_request(TOKEN_A, &session, "after the restart", 0)
        .await;
    let results = events
        .iter()
        .filter(|event| is_result(event) && event["requestId"] == request)
        .count();
    assert_eq!(results, 1, "the request ended once: {events:?}");
    assert!(
        !events
            .iter()
            .any(|event| event["data"]["code"] == "EXECUTOR_LOST"),
        "nothing was lost"
    );
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    second.stop().await;
}

/// RES-14, the sweep: a tenant's closed sessions past its byte budget go oldest first, before
/// their retention ends, while newer ones that fit stay, another tenant's (its own budget of 0:
/// no byte bound) stay, and active sessions are never touched. JSONL here, PostgreSQL in the
/// rerun. The sweep's first pass runs as the server starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_sessions_past_their_tenants_byte_budget_are_purged_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let config = durable_config(dir.path()).await;
    let first = TestServer::start(config.clone()).await;
    // Text no store compresses much (PostgreSQL counts stored, compressed bytes).
    let blob = agent_runtime_store::testing::rng::SeededRng::new(11).letters(300_000);
    let metadata = json!({ "blob": blob });
    let mut closed = Vec::new();
    for _ in 0..4 {
        let data = first
            .ok(TOKEN_A, "session.create", json!({ "metadata": metadata }))
            .await;
        let session = data["session"]["sessionId"].as_str().unwrap().to_owned();
        first
            .ok(TOKEN_A, "session.close", json!({ "sessionId": session }))
            .await;
        closed.push(session);
        // Distinct close times, so "oldest" is well defined.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let other = first.create_session(TOKEN_B).await;
    first
        .ok(TOKEN_B, "session.close", json!({ "sessionId": other }))
        .await;
    let active = first
        .ok(TOKEN_A, "session.create", json!({ "metadata": metadata }))
        .await["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    first.stop().await;

    // About two of the four fit: the two oldest go.
    let mut budgeted = config.clone();
    budgeted.gateway.max_closed_session_bytes_per_tenant = 700_000;
    budgeted.gateway.tenant_limits = vec![agent_runtime_gateway::TenantLimits {
        tenant: "tenant-b".to_owned(),
        max_closed_session_bytes: Some(0),
        ..agent_runtime_gateway::TenantLimits::default()
    }];
    let second = TestServer::start(budgeted).await;
    let status = |token: &'static str, session: String| {
        let server = &second;
        async move {
            let data = json!({ "sessionId": session });
            let id = agent_runtime::ids::nanoid();
            server.command(token, &id, "session.read", data).await.0
        }
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while status(TOKEN_A, closed[1].clone()).await != 404 {
        assert!(tokio::time::Instant::now() < deadline, "never purged");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(status(TOKEN_A, closed[0].clone()).await, 404);
    assert_eq!(status(TOKEN_A, closed[2].clone()).await, 200);
    assert_eq!(status(TOKEN_A, closed[3].clone()).await, 200);
    assert_eq!(status(TOKEN_B, other.clone()).await, 200);
    assert_eq!(status(TOKEN_A, active.clone()).await, 200);
    second.stop().await;
}
