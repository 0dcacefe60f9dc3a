//! The single-process server on PostgreSQL: restarts on one database, and an outage of the
//! database while commands run (the server keeps running and recovers on its own).

use std::time::Duration;

use crate::support::*;
use agent_runtime::secret::Secret;
use agent_runtime_cli::config::{ServeConfig, StoreKind};
use agent_runtime_store::testing::postgres::{PgCluster, fresh_database_url, set_read_only};
use serde_json::{Value, json};

fn postgres_config(url: &str) -> ServeConfig {
    let mut config = test_config(StoreKind::Postgres, &std::env::temp_dir());
    config.database_url = Some(Secret::new(url));
    config
}

#[tokio::test]
async fn readyz_names_the_configured_backend() {
    let url = fresh_database_url().await.unwrap();
    let server = TestServer::start(postgres_config(&url)).await;
    let (_, ready) = server.readyz().await;
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["backend"], "postgresql");
    assert!(ready["schemaVersion"].as_i64().unwrap() >= 1);
    assert!(!ready.to_string().contains(&url), "no URL in readyz");
    server.stop().await;
}

#[tokio::test]
async fn a_second_server_on_the_same_database_resumes_and_continues() {
    let url = fresh_database_url().await.unwrap();
    let first = TestServer::start(postgres_config(&url)).await;
    let create = json!({ "protocolVersion": 1, "commandId": "pg-restart-create", "type": "session.create", "data": {} });
    let (status, _, created) = first
        .post_raw(TOKEN_A, serde_json::to_vec(&create).unwrap())
        .await;
    assert_eq!(status, 200, "{created}");
    let session = created["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    first.submit(TOKEN_A, &session, "hello").await;
    let before = first.collect_events(TOKEN_A, &session, 0, is_result).await;
    first.stop().await;

    let second = TestServer::start(postgres_config(&url)).await;
    // The command receipt survived: the same command replays its stored result.
    let (status, _, replayed) = second
        .post_raw(TOKEN_A, serde_json::to_vec(&create).unwrap())
        .await;
    assert_eq!(status, 200);
    assert_eq!(replayed, created);
    // The event log survived, byte for byte as JSON values.
    let again = second.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(again, before);
    let (_, events) = second.run_request(TOKEN_A, &session, "continue", 0).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    let read = second.read(TOKEN_A, &session).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 4);
    second.stop().await;
}

/// One command of the loop and what the server answered.
struct Sent {
    body: Vec<u8>,
    status: u16,
    response: Value,
}

async fn send_create(server: &TestServer, command_id: &str) -> Sent {
    let body = serde_json::to_vec(&json!({
        "protocolVersion": 1, "commandId": command_id, "type": "session.create",
        "data": { "metadata": { "commandId": command_id } }
    }))
    .unwrap();
    let (status, _, response) = server.post_raw(TOKEN_A, body.clone()).await;
    Sent {
        body,
        status,
        response,
    }
}

async fn readyz(server: &TestServer) -> u16 {
    let url = format!("{}/readyz", server.base);
    server
        .client
        .get(&url)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// A failure while PostgreSQL is down must be a retryable protocol error, never a guess.
fn assert_retryable_failure(sent: &Sent) {
    let error = &sent.response["error"];
    let code = error["code"].as_str().unwrap_or_default();
    let expected = matches!(
        (sent.status, code),
        (500, "INTERNAL_ERROR") | (409 | 503, "COMMAND_IN_PROGRESS")
    );
    assert!(
        expected,
        "unexpected failure {}: {}",
        sent.status, sent.response
    );
    assert_eq!(error["retryable"], true, "{}", sent.response);
}

/// A server on a PostgreSQL cluster of its own, which the test may stop and restart.
async fn server_on_a_dedicated_cluster() -> (PgCluster, TestServer) {
    let cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .unwrap()
        .expect("a dedicated cluster");
    let url = cluster.create_database().await.unwrap();
    let server = TestServer::start(postgres_config(&url)).await;
    (cluster, server)
}

async fn stop_postgres(mut cluster: PgCluster) -> PgCluster {
    tokio::task::spawn_blocking(move || {
        cluster.stop().expect("stop PostgreSQL");
        cluster
    })
    .await
    .unwrap()
}

async fn restart_postgres(mut cluster: PgCluster) -> PgCluster {
    tokio::task::spawn_blocking(move || {
        cluster.restart().expect("restart PostgreSQL");
        cluster
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_postgresql_fails_commands_retryably_and_everything_recovers() {
    let (cluster, server) = server_on_a_dedicated_cluster().await;
    assert_eq!(readyz(&server).await, 200);

    let mut sent = Vec::new();
    for i in 0..5 {
        let command = send_create(&server, &format!("before-{i}")).await;
        assert_eq!(command.status, 200, "{}", command.response);
        sent.push(command);
    }

    // Stop PostgreSQL while commands keep coming.
    let cluster = stop_postgres(cluster).await;
    for i in 0..3 {
        let command = send_create(&server, &format!("during-{i}")).await;
        assert_ne!(command.status, 200, "nothing succeeds without the database");
        assert_retryable_failure(&command);
        sent.push(command);
    }
    assert_eq!(readyz(&server).await, 503);

    // Start it again: the same server recovers without a restart.
    let cluster = restart_postgres(cluster).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while readyz(&server).await != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "readyz never recovered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = send_create(&server, "after-0").await;
    assert_eq!(after.status, 200, "{}", after.response);

    // Every command acknowledged before the outage is still there, with the same result.
    for command in sent.iter().filter(|c| c.status == 200) {
        let (status, _, replayed) = server.post_raw(TOKEN_A, command.body.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(replayed, command.response);
    }
    // A command that failed during the outage is safe to retry now: it either runs (the failure
    // happened before anything was stored) or reports COMMAND_IN_PROGRESS, never a conflict.
    for command in sent.iter().filter(|c| c.status != 200) {
        let (status, _, retried) = server.post_raw(TOKEN_A, command.body.clone()).await;
        let retry = Sent {
            body: command.body.clone(),
            status,
            response: retried,
        };
        if retry.status != 200 {
            assert_retryable_failure(&retry);
        }
    }
    let list = server
        .ok(TOKEN_A, "session.list", json!({ "limit": 100 }))
        .await;
    let listed = list["sessions"].as_array().unwrap().len();
    assert!(
        listed >= 6,
        "the five acknowledged sessions and the one after: {list}"
    );
    server.stop().await;
    drop(cluster);
}

/// PG-12: the database turns read-only. Commands fail retryably (each command writes its
/// receipt first, reads included) and nothing is half-written, `readyz` says why, the event
/// streams of existing sessions keep working (they only read), and everything works again once
/// the database takes writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_12_a_read_only_database_refuses_writes_retryably_and_streams_go_on() {
    let url = fresh_database_url().await.unwrap();
    let server = TestServer::start(postgres_config(&url)).await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "hello").await;
    let before = server.collect_events(TOKEN_A, &session, 0, is_result).await;

    set_read_only(&url, true).await.unwrap();
    let refused = send_create(&server, "while-read-only").await;
    assert_ne!(refused.status, 200, "{}", refused.response);
    assert_retryable_failure(&refused);
    // A pooled connection ended by the switch fails one call first; then readyz says why.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, ready) = server.readyz().await;
        assert_eq!(status, 503, "{ready}");
        if ready["error"] == "database is read-only" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{ready}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let replay = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(
        replay, before,
        "the stream of an existing session still works"
    );

    set_read_only(&url, false).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while server.readyz().await.0 != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "readyz never recovered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, created) = server.post_raw(TOKEN_A, refused.body.clone()).await;
    assert_eq!(
        status, 200,
        "the refused command runs once writes work: {created}"
    );
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 2, "{list}");
    let after = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(after, before, "nothing was corrupted");
    server.stop().await;
}

/// Follows a session's stream from `after`, reconnecting with `Last-Event-ID` whenever the stream
/// or the server is unavailable, until `until` matches; returns every event received.
async fn follow_through_outages(
    server: &TestServer,
    session: &str,
    mut after: u64,
    mut until: impl FnMut(&Value) -> bool,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut events = Vec::new();
    loop {
        assert!(tokio::time::Instant::now() < deadline, "{events:?}");
        // A stream the store fails under is cut like a broken connection: the client retries.
        let response = server
            .client
            .get(format!("{}/sessions/{session}/events", server.base))
            .header("authorization", format!("Bearer {TOKEN_A}"))
            .header("last-event-id", after.to_string())
            .send()
            .await;
        let Some(response) = response.ok().filter(|r| r.status().as_u16() == 200) else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut reader = SseReader::new(response);
        while let Ok(Some(frame)) = tokio::time::timeout_at(deadline, reader.next_event()).await {
            after = frame.data["sequence"].as_u64().unwrap();
            let done = until(&frame.data);
            events.push(frame.data);
            if done {
                return events;
            }
        }
    }
}

/// PostgreSQL stops while a request streams. The request still ends with a terminal
/// event once the database is back, the stream resumes without a gap or a duplicate, every event
/// a client saw before the outage is in the log unchanged, and the session takes the next input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_postgresql_mid_request_loses_no_event_and_the_request_still_ends() {
    let (cluster, server) = server_on_a_dedicated_cluster().await;
    let session = server.create_session(TOKEN_A).await;
    let submitted = server.submit(TOKEN_A, &session, "demo:slow").await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    let mut seen = 0;
    let before = follow_through_outages(&server, &session, 0, |event| {
        seen += usize::from(stream_type(event) == Some("content"));
        seen == 3
    })
    .await;

    let cluster = stop_postgres(cluster).await;
    // The request keeps streaming into a store that is gone for a while.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(readyz(&server).await, 503);
    let cluster = restart_postgres(cluster).await;

    let resumed_after = before.last().unwrap()["sequence"].as_u64().unwrap();
    let after = follow_through_outages(&server, &session, resumed_after, |event| {
        is_result(event) && event["requestId"] == request_id.as_str()
    })
    .await;
    let seen: Vec<&Value> = before.iter().chain(after.iter()).collect();
    let sequences: Vec<u64> = seen
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
    assert_eq!(
        sequences, expected,
        "one contiguous stream across the outage"
    );

    // The log holds exactly what the client saw, byte for byte, from the start.
    let replay = server
        .collect_events(TOKEN_A, &session, 0, |event| {
            event["sequence"] == *sequences.last().unwrap()
        })
        .await;
    assert_eq!(replay.iter().collect::<Vec<_>>(), seen);

    // The session is usable: the next input runs to a successful result.
    let next = server.submit(TOKEN_A, &session, "after the outage").await;
    let next_id = next["requestId"].as_str().unwrap().to_owned();
    let last = *sequences.last().unwrap();
    let events = follow_through_outages(&server, &session, last, |event| {
        is_result(event) && event["requestId"] == next_id.as_str()
    })
    .await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    server.stop().await;
    drop(cluster);
}

/// Raw `data:` lines of a stream read to its end (after `session.closed`).
async fn data_lines(response: reqwest::Response) -> Vec<String> {
    assert_eq!(response.status().as_u16(), 200);
    let body = tokio::time::timeout(Duration::from_secs(30), response.text())
        .await
        .expect("the stream ends after session.closed")
        .unwrap();
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// Replaces what differs between two runs of one script (generated ids, clocks, durations)
/// with placeholders numbered by first appearance, so equal histories compare equal.
fn normalized(events: &[String]) -> Vec<Value> {
    fn walk(value: &mut Value, seen: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, field) in map.iter_mut() {
                    let generated = key.ends_with("Id") || key == "id";
                    if key.ends_with("At") || key.to_ascii_lowercase().contains("duration") {
                        // Clocks: when two events share a millisecond differs from run to run.
                        *field = Value::String("<clock>".to_owned());
                    } else if let (true, Value::String(text)) = (generated, &*field) {
                        let index = match seen.iter().position(|known| known == text) {
                            Some(index) => index,
                            None => {
                                seen.push(text.clone());
                                seen.len() - 1
                            }
                        };
                        *field = Value::String(format!("<{index}>"));
                    } else {
                        walk(field, seen);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| walk(item, seen)),
            _ => {}
        }
    }
    let mut seen = Vec::new();
    events
        .iter()
        .map(|line| {
            let mut event: Value = serde_json::from_str(line).unwrap();
            walk(&mut event, &mut seen);
            event
        })
        .collect()
}

/// One fixed script against the demo provider: an echo, a tool call approved by a person, a
/// burst of deltas, then the close. Returns the live stream (opened before the first command)
/// and a full replay from cursor 0, both as raw `data:` lines.
async fn run_script(server: &TestServer) -> (Vec<String>, Vec<String>) {
    let session = server.create_session(TOKEN_A).await;
    let live = server.events(TOKEN_A, &session, "?after=0", None).await;
    let live = tokio::spawn(data_lines(live));
    let ended = |submitted: Value| {
        let request = submitted["requestId"].clone();
        move |event: &Value| is_result(event) && event["requestId"] == request
    };
    let echo = server
        .submit(TOKEN_A, &session, "hello from the script")
        .await;
    server
        .collect_events(TOKEN_A, &session, 0, ended(echo))
        .await;
    let tool = server.submit(TOKEN_A, &session, "needs approval").await;
    let permission = server.permission_request(TOKEN_A, &session, 0).await;
    server.resolve(TOKEN_A, &session, &permission, true).await;
    server
        .collect_events(TOKEN_A, &session, 0, ended(tool))
        .await;
    let burst = server.submit(TOKEN_A, &session, "demo:deltas=25").await;
    server
        .collect_events(TOKEN_A, &session, 0, ended(burst))
        .await;
    server
        .ok(TOKEN_A, "session.close", json!({ "sessionId": session }))
        .await;
    let live = live.await.unwrap();
    let replay = data_lines(server.events(TOKEN_A, &session, "?after=0", None).await).await;
    (live, replay)
}

/// SSE-13: the live stream and a full replay are byte-equal on each backend, and the same script
/// gives the same (sequence, type, data) history on JSONL and on PostgreSQL once generated ids
/// and clocks are normalised.
#[tokio::test]
async fn sse_13_replay_matches_live_and_jsonl_and_postgres_agree() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = TestServer::start(test_config(StoreKind::Jsonl, dir.path())).await;
    let (jsonl_live, jsonl_replay) = run_script(&jsonl).await;
    jsonl.stop().await;
    let url = fresh_database_url().await.unwrap();
    let postgres = TestServer::start(postgres_config(&url)).await;
    let (postgres_live, postgres_replay) = run_script(&postgres).await;
    postgres.stop().await;

    assert_eq!(jsonl_live, jsonl_replay, "JSONL: replay is the live stream");
    assert_eq!(
        postgres_live, postgres_replay,
        "PostgreSQL: replay is the live stream"
    );
    assert!(jsonl_live.len() > 40, "the script produced its history");
    let (jsonl, postgres) = (normalized(&jsonl_live), normalized(&postgres_live));
    for (index, (left, right)) in jsonl.iter().zip(&postgres).enumerate() {
        assert_eq!(
            left,
            right,
            "event {} differs between the backends",
            index + 1
        );
    }
    assert_eq!(jsonl.len(), postgres.len());
}
