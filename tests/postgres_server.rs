//! The single-process server on PostgreSQL: restarts on one database, and an outage of the
//! database while commands run (the server keeps running and recovers on its own).

mod support;

use std::time::Duration;

use agent_runtime_cli::config::{Secret, ServeConfig, StoreKind};
use agent_runtime_store::testing::postgres::{PgCluster, fresh_database_url};
use serde_json::{Value, json};
use support::*;

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
    let submitted = second.submit(TOKEN_A, &session, "continue").await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    let events = second
        .collect_events(TOKEN_A, &session, 0, |e| {
            is_result(e) && e["requestId"] == request_id.as_str()
        })
        .await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    let read = second
        .ok(TOKEN_A, "session.read", json!({ "sessionId": session }))
        .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_postgresql_fails_commands_retryably_and_everything_recovers() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .unwrap()
        .expect("a dedicated cluster");
    let url = cluster.create_database().await.unwrap();
    let server = TestServer::start(postgres_config(&url)).await;
    assert_eq!(readyz(&server).await, 200);

    let mut sent = Vec::new();
    for i in 0..5 {
        let command = send_create(&server, &format!("before-{i}")).await;
        assert_eq!(command.status, 200, "{}", command.response);
        sent.push(command);
    }

    // Stop PostgreSQL while commands keep coming.
    let mut cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        cluster.stop().expect("stop PostgreSQL");
        cluster
    })
    .await
    .unwrap();
    for i in 0..3 {
        let command = send_create(&server, &format!("during-{i}")).await;
        assert_ne!(command.status, 200, "nothing succeeds without the database");
        assert_retryable_failure(&command);
        sent.push(command);
    }
    assert_eq!(readyz(&server).await, 503);

    // Start it again: the same server recovers without a restart.
    cluster = tokio::task::spawn_blocking(move || {
        cluster.restart().expect("restart PostgreSQL");
        cluster
    })
    .await
    .unwrap();
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
