//! Graceful shutdown of the single-process server, in process: readiness goes first while
//! everything else is still served, open SSE streams then end with a clean end of stream, and a
//! command that reaches the server while it drains is refused with a retryable `OVERLOADED`
//! carrying its own commandId (nothing was claimed, so another instance can run it).

use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DEADLINE: Duration = Duration::from_secs(20);

fn running(server: &TestServer) -> &agent_runtime_cli::RunningServer {
    server.server.as_ref().expect("the server runs")
}

#[tokio::test]
async fn readiness_turns_off_first_then_streams_end_cleanly_and_the_server_stops() {
    let mut config = memory_config();
    // Long enough for the checks below to run inside it.
    config.gateway.shutdown_readiness_delay = Duration::from_secs(3);
    let mut server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "hello").await;
    let mut stream = server.events(TOKEN_A, &session, "", None).await;
    assert_eq!(stream.status().as_u16(), 200);

    running(&server).shutdown();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let not_ready = loop {
        let (status, body) = server.readyz().await;
        if status == 503 {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "readyz stayed ready"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(not_ready["status"], "not_ready");
    assert_eq!(not_ready["reason"], "shutting down");
    // Still serving while load balancers take notice.
    server.ok(TOKEN_A, "session.list", json!({})).await;

    // Then the stream ends: every frame whole, then a clean end (no error, no partial frame).
    let mut received = String::new();
    let ended = loop {
        let chunk = tokio::time::timeout(DEADLINE, stream.chunk())
            .await
            .expect("the stream ends before the deadline");
        match chunk {
            Ok(Some(bytes)) => received.push_str(std::str::from_utf8(&bytes).unwrap()),
            Ok(None) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    assert!(ended.is_ok(), "the stream ended with an error: {ended:?}");
    assert!(received.ends_with("\n\n"), "no partial frame: {received:?}");
    assert!(received.contains("\"subtype\":\"success\""), "{received}");

    let stopped = server.server.take().unwrap();
    tokio::time::timeout(DEADLINE, stopped.wait())
        .await
        .expect("the server stops within the grace period")
        .expect("a clean stop");
}

#[tokio::test]
async fn a_command_that_arrives_while_the_server_drains_is_refused_retryably_with_its_id() {
    let config = memory_config();
    let mut server = TestServer::start(config).await;
    let authority = server
        .base
        .trim_start_matches("http://")
        .trim_end_matches("/v1/agent")
        .to_owned();
    // A request whose body is still on its way when the drain begins.
    let body = r#"{"protocolVersion":1,"commandId":"late-list","type":"session.list","data":{}}"#;
    let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let head = format!(
        "POST /v1/agent/commands HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN_A}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..10]).await.unwrap();

    running(&server).shutdown();
    // The listener closes as the drain begins.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while tokio::net::TcpStream::connect(&authority).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listener stayed open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stream.write_all(&body.as_bytes()[10..]).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(DEADLINE, stream.read_to_end(&mut response))
        .await
        .expect("an answer, then the connection closes")
        .unwrap();
    let text = String::from_utf8(response).unwrap();
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    let lower = text.to_ascii_lowercase();
    assert!(lower.contains("\r\nretry-after: 1\r\n"), "{text}");
    let json: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(
        json,
        json!({
            "protocolVersion": 1,
            "commandId": "late-list",
            "ok": false,
            "error": {
                "code": "OVERLOADED",
                "message": "Server is shutting down; retry on another instance",
                "retryable": true,
                "retryAfterMs": 1000
            }
        })
    );
    let stopped = server.server.take().unwrap();
    stopped.wait().await.expect("a clean stop");
}

/// ATK-05: on a graceful shutdown the in-process sessions stop first and the streams send what is
/// stored before they end, so a live follower sees its request end (`EXECUTOR_SHUTDOWN` and the
/// `result`), then a clean end of stream, without having to reconnect.
#[tokio::test]
async fn atk_05_a_follower_sees_the_running_request_end_before_its_stream_closes_on_shutdown() {
    let config = memory_config();
    let mut server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    let submitted = server.submit(TOKEN_A, &session, "demo:slow").await;
    let request_id = submitted["requestId"].clone();
    let response = server.events(TOKEN_A, &session, "", None).await;
    let mut reader = SseReader::new(response);
    // The request is running: its first delta arrived.
    loop {
        let frame = tokio::time::timeout(DEADLINE, reader.next_event())
            .await
            .expect("an event")
            .expect("the stream is open");
        if frame.data["data"]["type"] == "content" {
            break;
        }
    }

    running(&server).shutdown();
    let mut tail = Vec::new();
    while let Some(frame) = tokio::time::timeout(DEADLINE, reader.next_event())
        .await
        .expect("the stream ends before the deadline")
    {
        tail.push(frame.data);
    }
    let error = tail
        .iter()
        .find(|event| event["data"]["type"] == "error")
        .unwrap_or_else(|| panic!("no error event before the end: {tail:?}"));
    assert_eq!(error["requestId"], request_id);
    assert_eq!(error["data"]["code"], "EXECUTOR_SHUTDOWN", "{error}");
    let last = tail.last().unwrap();
    assert!(
        is_result(last),
        "the stream's last event is the result: {last}"
    );
    assert_eq!(last["data"]["subtype"], "error");

    let stopped = server.server.take().unwrap();
    tokio::time::timeout(DEADLINE, stopped.wait())
        .await
        .expect("the server stops within the grace period")
        .expect("a clean stop");
}
