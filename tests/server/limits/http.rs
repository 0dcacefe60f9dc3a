//! The protective limits of the HTTP surface over real connections: request head size (431),
//! slow heads and idle keep-alive connections (closed), the unary request timeout (a retryable
//! answer; the command still completes once), SSE caps per tenant and per process (503
//! `OVERLOADED` before any stream byte, with a per-tenant override), and a reader that stops
//! reading (dropped and counted while everyone else is served).

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use agent_runtime_cli::Overrides;
use agent_runtime_cli::config::StoreKind;
use agent_runtime_gateway::TenantLimits;
use agent_runtime_store::Operation;
use agent_runtime_store::Store;
use agent_runtime_store::faulty::FaultyStore;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_secs(20);

async fn connect(server: &TestServer) -> TcpStream {
    TcpStream::connect(server.authority()).await.unwrap()
}

/// Reads until the peer closes the connection (EOF or reset), within the test deadline. Returns
/// what arrived.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::time::timeout(DEADLINE, stream.read(&mut buffer))
            .await
            .expect("the server closes the connection before the deadline");
        match read {
            Ok(0) | Err(_) => return received,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
        }
    }
}

/// The first line of a raw HTTP response.
fn status_line(response: &[u8]) -> String {
    String::from_utf8_lossy(response)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

async fn metrics(server: &TestServer) -> String {
    server
        .client
        .get(format!("http://{}/metrics", server.authority()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Waits until `/metrics` counts `limit` at least once.
async fn limit_counted(server: &TestServer, limit: &str) {
    let series = format!("agent_runtime_limit_hits_total{{limit=\"{limit}\"}}");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let text = metrics(server).await;
        if text.lines().any(|line| line.starts_with(&series)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} was never counted:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn healthz_ok(server: &TestServer) {
    let response = server
        .client
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
}

#[tokio::test]
async fn a_request_head_over_max_header_bytes_gets_431_and_one_under_it_is_served() {
    let server = TestServer::memory().await;
    let padding = "x".repeat(20 * 1024);
    let mut stream = connect(&server).await;
    let request = format!(
        "GET /v1/agent/healthz HTTP/1.1\r\nhost: localhost\r\nx-padding: {padding}\r\n\r\n"
    );
    // The server may stop reading (and answer) before the whole head is written.
    let _ = stream.write_all(request.as_bytes()).await;
    let response = read_until_closed(&mut stream).await;
    assert!(
        status_line(&response).starts_with("HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&response)
    );

    let padding = "x".repeat(8 * 1024);
    let response = server
        .client
        .get(format!("{}/healthz", server.base))
        .header("x-padding", padding)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    server.stop().await;
}

#[tokio::test]
async fn a_request_head_that_trickles_in_is_disconnected_while_others_are_served() {
    let mut config = memory_config();
    config.gateway.header_read_timeout = Duration::from_millis(300);
    let server = TestServer::start(config).await;

    let mut slow = connect(&server).await;
    slow.write_all(b"GET /v1/agent/healthz HTTP/1.1\r\nhost: te")
        .await
        .unwrap();
    // A connection that never sends anything owes a head just the same.
    let mut silent = connect(&server).await;
    healthz_ok(&server).await;

    assert!(
        read_until_closed(&mut slow).await.is_empty(),
        "no answer to a head that never completed"
    );
    assert!(read_until_closed(&mut silent).await.is_empty());
    limit_counted(&server, "header_timeout").await;
    healthz_ok(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_idle_timeout() {
    let mut config = memory_config();
    config.gateway.idle_timeout = Duration::from_millis(300);
    let server = TestServer::start(config).await;
    let mut stream = connect(&server).await;
    stream
        .write_all(b"GET /v1/agent/healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let received = read_until_closed(&mut stream).await;
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.ends_with(r#"{"status":"ok"}"#),
        "the answer came whole before the idle close: {text}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_command_past_the_request_timeout_gets_a_retryable_answer_and_still_completes_once() {
    let mut config = memory_config();
    config.gateway.request_timeout = Duration::from_millis(300);
    let faulty = Arc::new(FaultyStore::new(selected_store(DEFAULT_RETENTION).await));
    let store: Arc<dyn Store> = faulty.clone();
    let server = TestServer::start_with(
        config,
        Overrides {
            store: Some(store),
            ..Overrides::default()
        },
    )
    .await;

    faulty.hold(Operation::SealCommand);
    let (status, body) = server
        .command(TOKEN_A, "slow-create", "session.create", json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["commandId"], "slow-create");
    assert_eq!(body["error"]["code"], "COMMAND_IN_PROGRESS");
    assert_eq!(body["error"]["retryable"], true);
    assert!(body["error"]["retryAfterMs"].as_u64().unwrap() > 0);
    limit_counted(&server, "request_timeout").await;

    // The store recovers: the retry with the same commandId gets the one result.
    faulty.release(Operation::SealCommand);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let created = loop {
        let (status, body) = server
            .command(TOKEN_A, "slow-create", "session.create", json!({}))
            .await;
        if status == 200 {
            break body;
        }
        assert_eq!(body["error"]["code"], "COMMAND_IN_PROGRESS", "{body}");
        assert!(tokio::time::Instant::now() < deadline, "never completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let listed = server.ok(TOKEN_A, "session.list", json!({})).await;
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "executed exactly once: {listed}");
    assert_eq!(
        sessions[0]["sessionId"],
        created["data"]["session"]["sessionId"]
    );
    server.stop().await;
}

#[tokio::test]
async fn a_command_body_that_never_finishes_gets_408_before_the_deadline() {
    let mut config = memory_config();
    config.gateway.request_timeout = Duration::from_millis(300);
    let server = TestServer::start(config).await;
    let mut stream = connect(&server).await;
    let head = format!(
        "POST /v1/agent/commands HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN_A}\r\ncontent-length: 100\r\n\r\n{{\"protocolVersion\":1,"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let read = tokio::time::timeout(DEADLINE, stream.read(&mut buffer))
        .await
        .expect("an answer before the deadline")
        .unwrap();
    let text = String::from_utf8_lossy(&buffer[..read]).into_owned();
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    assert_eq!(body["error"]["retryable"], true);
    server.stop().await;
}

/// Opens an event stream; returns the response (kept open by the caller).
async fn open_stream(server: &TestServer, token: &str, session: &str) -> reqwest::Response {
    server.events(token, session, "", None).await
}

async fn assert_refused(server: &TestServer, token: &str, session: &str, message: &str) {
    let response = open_stream(server, token, session).await;
    assert_eq!(response.status().as_u16(), 503);
    assert!(
        response.headers().get("retry-after").is_none(),
        "no retry-after on the SSE route"
    );
    assert_eq!(
        response.headers()["content-type"],
        "application/json; charset=utf-8"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({
            "protocolVersion": 1,
            "commandId": "events",
            "ok": false,
            "error": { "code": "OVERLOADED", "message": message, "retryable": true, "retryAfterMs": 1000 }
        })
    );
}

#[tokio::test]
async fn sse_connections_are_capped_per_tenant_and_per_process_with_a_tenant_override() {
    let mut config = memory_config();
    config.gateway.max_sse_connections_per_tenant = 2;
    config.gateway.max_sse_connections = 3;
    // tenant-b may hold more than the default.
    config.gateway.tenant_limits = vec![TenantLimits {
        tenant: "tenant-b".to_owned(),
        max_sse_connections: Some(3),
        ..TenantLimits::default()
    }];
    let server = TestServer::start(config).await;
    let a = server.create_session(TOKEN_A).await;
    let b = server.create_session(TOKEN_B).await;

    let a1 = open_stream(&server, TOKEN_A, &a).await;
    let a2 = open_stream(&server, TOKEN_A2, &a).await;
    assert_eq!((a1.status().as_u16(), a2.status().as_u16()), (200, 200));
    assert_refused(&server, TOKEN_A, &a, "Tenant event stream limit exceeded").await;

    let b1 = open_stream(&server, TOKEN_B, &b).await;
    assert_eq!(b1.status().as_u16(), 200);
    // tenant-b has room, the process (3 open) does not.
    assert_refused(&server, TOKEN_B, &b, "Server event stream limit exceeded").await;

    // Closed streams give their places back; tenant-b goes past the default of 2.
    drop(a1);
    let b2 = wait_for_stream(&server, TOKEN_B, &b).await;
    drop(a2);
    let b3 = wait_for_stream(&server, TOKEN_B, &b).await;
    assert_refused(&server, TOKEN_B, &b, "Tenant event stream limit exceeded").await;
    limit_counted(&server, "sse_tenant_cap").await;
    limit_counted(&server, "sse_process_cap").await;
    drop((b1, b2, b3));
    server.stop().await;
}

/// Opens a stream once a place is free (a closed stream is noticed by the server a moment
/// after the client drops it).
async fn wait_for_stream(server: &TestServer, token: &str, session: &str) -> reqwest::Response {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let response = open_stream(server, token, session).await;
        if response.status().as_u16() == 200 {
            return response;
        }
        assert!(tokio::time::Instant::now() < deadline, "no place freed up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// Several threads, and a write timeout well above scheduling hiccups: the reading client must
// never look stalled itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_that_stops_reading_is_dropped_and_counted_while_others_are_served() {
    let mut config = memory_config();
    config.gateway.write_timeout = Duration::from_secs(1);
    config.max_events_per_session = 100_000;
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;

    // A client that asks for the stream and then never reads: a tiny receive window, so the
    // server's buffers fill up quickly.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket
        .connect(server.authority().parse().unwrap())
        .await
        .unwrap();
    let request = format!(
        "GET /v1/agent/sessions/{session}/events HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN_A}\r\n\r\n"
    );
    stalled.write_all(request.as_bytes()).await.unwrap();

    // Many events (about 9 MB): far more than any buffer on the way holds (hyper's 64 KiB, and
    // at most 4 MiB of kernel send buffer on Linux). Everyone else is served: commands, and a
    // full stream that reads.
    let (_, events) = server
        .run_request(TOKEN_A, &session, "demo:deltas=30000", 0)
        .await;
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(index, event)| event["sequence"].as_u64() == Some(index as u64 + 1)),
        "a reading client gets every event in order"
    );
    assert!(events.len() > 30_000, "{} events", events.len());
    limit_counted(&server, "slow_reader").await;
    server.ok(TOKEN_A, "session.list", json!({})).await;

    // The stalled connection was closed by the server: reading it now ends early, before the
    // request's result (the stream would never end by itself while the session is open).
    let received = read_until_closed(&mut stalled).await;
    let text = String::from_utf8_lossy(&received);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(
        !text.contains("\"subtype\":\"success\""),
        "the stalled reader was cut off before the end"
    );
    // Its slot was given back: the gauge counts no open stream.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !metrics(&server)
        .await
        .lines()
        .any(|line| line == "agent_runtime_sse_connections_open 0")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a stream stayed open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

/// FUZZ-07: hostile header values (a CR or a bare LF inside a value, obs-fold, NUL, 64 KB, a
/// repeated `Authorization`) get one clean refusal each: `400`, `401` or `431`, exactly one
/// response on the connection (no response splitting), nothing injected echoed back, and never a
/// command executed.
#[tokio::test]
async fn fuzz_07_hostile_headers_get_one_clean_refusal_and_execute_nothing() {
    let server = TestServer::memory().await;
    let body = r#"{"protocolVersion":1,"commandId":"fuzz-07","type":"session.create","data":{}}"#;
    let big = "x".repeat(64 * 1024);
    let valid = format!("authorization: Bearer {TOKEN_A}\r\n");
    const ANY_REFUSAL: &[&str] = &["HTTP/1.1 400", "HTTP/1.1 401", "HTTP/1.1 431"];
    let cases: Vec<(&str, String, &[&str])> = vec![
        (
            "CR inside a value",
            format!("authorization: Bearer {TOKEN_A}\rx-injected: 1\r\n"),
            ANY_REFUSAL,
        ),
        (
            "bare LF inside a value",
            "authorization: Bearer x\nx-injected: 1\r\n".to_owned(),
            ANY_REFUSAL,
        ),
        (
            "obs-fold",
            format!("authorization: Bearer\r\n {TOKEN_A}\r\n"),
            ANY_REFUSAL,
        ),
        (
            "NUL inside a value",
            format!("authorization: Bearer {TOKEN_A}\0\r\n"),
            ANY_REFUSAL,
        ),
        (
            "64 KB value",
            format!("{valid}x-padding: {big}\r\n"),
            &["HTTP/1.1 431"],
        ),
        (
            "repeated Authorization",
            format!("{valid}{valid}"),
            &["HTTP/1.1 401"],
        ),
        (
            "CR in the content type",
            format!("{valid}content-type: application/json\rx-injected: 1\r\n"),
            ANY_REFUSAL,
        ),
    ];
    for (case, headers, expected) in cases {
        let mut stream = connect(&server).await;
        let request = format!(
            "POST /v1/agent/commands HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\
             content-length: {}\r\n{headers}\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(request.as_bytes()).await;
        let response = read_until_closed(&mut stream).await;
        let text = String::from_utf8_lossy(&response);
        let status = status_line(&response);
        assert!(
            expected.iter().any(|refused| status.starts_with(refused)),
            "{case}: {text}"
        );
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{case}: {text}");
        assert!(
            !text.to_ascii_lowercase().contains("x-injected"),
            "{case}: {text}"
        );
    }
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(
        list["sessions"],
        json!([]),
        "no hostile request created a session"
    );
    server.stop().await;
}

/// A raw response that arrived whole: its status, its head (lowercased) and its body.
fn parse_response(response: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("a whole response head: {text}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {text}"));
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// Sends `request` on a new connection and reads until the server closes it.
async fn exchange(server: &TestServer, request: &[u8]) -> Vec<u8> {
    let mut stream = connect(server).await;
    // The server may answer (and stop reading) before the whole request is written.
    let _ = stream.write_all(request).await;
    read_until_closed(&mut stream).await
}

/// ATK-08: a chunked command body that cannot be decoded is `400 INVALID_COMMAND` (the body
/// could not be read, which says nothing about its size), while a well-formed chunked body over
/// `max_request_bytes` stays `413` and one under it is served.
#[tokio::test]
async fn atk_08_a_malformed_chunked_body_is_400_and_only_an_oversized_one_is_413() {
    let mut config = memory_config();
    config.gateway.max_request_bytes = 1024;
    let server = TestServer::start(config).await;
    let head = format!(
        "POST /v1/agent/commands HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN_A}\r\n\
         content-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    let command =
        r#"{"protocolVersion":1,"commandId":"atk-08-chunked","type":"session.create","data":{}}"#;
    let cases = [
        (
            "a chunk size that is not hex",
            "zz\r\n{}\r\n0\r\n\r\n".to_owned(),
        ),
        (
            "a chunk longer than its size",
            format!("2\r\n{command}\r\n0\r\n\r\n"),
        ),
        (
            "a chunk without its CRLF",
            format!("{:x}\r\n{command}XX0\r\n\r\n", command.len()),
        ),
    ];
    for (case, body) in cases {
        let response = exchange(&server, format!("{head}{body}").as_bytes()).await;
        let (status, _, body) = parse_response(&response);
        assert_eq!(
            status,
            400,
            "{case}: {}",
            String::from_utf8_lossy(&response)
        );
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["commandId"], "invalid", "{case}");
        assert_eq!(body["error"]["code"], "INVALID_COMMAND", "{case}");
        assert_eq!(body["error"]["retryable"], false, "{case}");
    }

    let oversized = format!("7d0\r\n{}\r\n0\r\n\r\n", " ".repeat(2000));
    let response = exchange(&server, format!("{head}{oversized}").as_bytes()).await;
    let (status, _, body) = parse_response(&response);
    assert_eq!(status, 413, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], "INVALID_COMMAND");

    let valid = format!("{:x}\r\n{command}\r\n0\r\n\r\n", command.len());
    let response = exchange(&server, format!("{head}{valid}").as_bytes()).await;
    let (status, _, body) = parse_response(&response);
    assert_eq!(status, 200, "a well-formed chunked body is served: {body}");
    server.stop().await;
}

/// A command body over `max_request_bytes` gets a readable `413` also when the client writes its
/// whole body before it reads (Python's `http.client`, many SDKs): the server reads and discards
/// the rest (bounded) before answering, so the client's write does not meet a reset connection.
/// With a declared length and chunked; the client's write never fails with a broken pipe or a
/// reset.
#[tokio::test]
async fn an_oversized_body_written_whole_before_reading_gets_a_readable_413() {
    let mut config = memory_config();
    config.gateway.max_request_bytes = 1024;
    let server = TestServer::start(config).await;
    let body = vec![b' '; 4 * 1024 * 1024];
    let head = |framing: &str| {
        format!(
            "POST /v1/agent/commands HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN_A}\r\n\
             content-type: application/json\r\n{framing}\r\n"
        )
    };
    let mut chunked = head("transfer-encoding: chunked\r\n").into_bytes();
    for piece in body.chunks(64 * 1024) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut declared = head(&format!("content-length: {}\r\n", body.len())).into_bytes();
    declared.extend_from_slice(&body);

    for (framing, request) in [("content-length", declared), ("chunked", chunked)] {
        let mut stream = connect(&server).await;
        tokio::time::timeout(DEADLINE, stream.write_all(&request))
            .await
            .expect("the write ends before the deadline")
            .unwrap_or_else(|error| panic!("{framing}: the whole body is accepted: {error}"));
        let response = read_until_closed(&mut stream).await;
        let (status, head, body) = parse_response(&response);
        assert_eq!(status, 413, "{framing}: {body}");
        assert!(head.contains("connection: close"), "{framing}: {head}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], "INVALID_COMMAND", "{framing}");
    }
    server.stop().await;
}

/// ATK-08: the number of request header fields is capped at 100 (documented in
/// docs/configuration.md next to `max_header_bytes`): 100 fields are served, and one more gets
/// one complete `431` answer (with its length, so the client knows it ended) before the
/// connection closes, also when the head goes on well past the cap.
#[tokio::test]
async fn atk_08_more_than_100_header_fields_get_one_complete_431() {
    let server = TestServer::memory().await;
    let fields = |count: usize| -> String {
        (0..count)
            .map(|i| format!("x-field-{i}: {i}\r\n"))
            .collect()
    };
    let request = |count: usize| {
        // `host` and `connection`, then `count - 2` more.
        format!(
            "GET /v1/agent/healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n{}\r\n",
            fields(count - 2)
        )
    };
    let response = exchange(&server, request(100).as_bytes()).await;
    let (status, _, body) = parse_response(&response);
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));

    // 500 fields (about 9 KiB) stay under `max_header_bytes`: the count is what is refused.
    for count in [101, 500] {
        let response = exchange(&server, request(count).as_bytes()).await;
        let text = String::from_utf8_lossy(&response);
        let (status, head, body) = parse_response(&response);
        assert_eq!(status, 431, "{count} fields: {text}");
        assert!(
            head.lines().any(|line| line == "content-length: 0"),
            "{count} fields: {text}"
        );
        assert!(body.is_empty(), "{count} fields: {text}");
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
    }
    healthz_ok(&server).await;
    server.stop().await;
}

/// ATK-08: a client that sends its whole request and then shuts down its write half (as
/// `curl`-like tools and some proxies do) still gets its answer: the end of the request stream
/// is not taken for a client that went away, which would drop the connection and lose every
/// answer the handler does not give at once. An event stream whose client went away still ends at
/// once (its slot is free again long before any heartbeat).
#[tokio::test]
async fn atk_08_a_half_closed_client_gets_its_answer() {
    let mut config = memory_config();
    config.gateway.max_sse_connections_per_tenant = 1;
    // Only the end of the client's stream can free the slot below, not a failed heartbeat.
    config.gateway.heartbeat_interval = Duration::from_secs(3600);
    let faulty = Arc::new(FaultyStore::new(selected_store(DEFAULT_RETENTION).await));
    let store: Arc<dyn Store> = faulty.clone();
    let server = TestServer::start_with(
        config,
        Overrides {
            store: Some(store),
            ..Overrides::default()
        },
    )
    .await;
    let session = server.create_session(TOKEN_A).await;

    // The command is held in the store until after the client has half-closed.
    faulty.hold(Operation::SealCommand);
    let body = r#"{"protocolVersion":1,"commandId":"atk-08-half-close","type":"session.create","data":{}}"#;
    let request = format!(
        "POST /v1/agent/commands HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN_A}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = connect(&server).await;
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    faulty.release(Operation::SealCommand);
    let response = read_until_closed(&mut stream).await;
    assert!(!response.is_empty(), "the half-closed client got no answer");
    let (status, _, body) = parse_response(&response);
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["commandId"], "atk-08-half-close");

    // A half-closed GET that needs no store wait is answered too.
    let mut stream = connect(&server).await;
    stream
        .write_all(b"GET /v1/agent/healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    let (status, _, _) = parse_response(&read_until_closed(&mut stream).await);
    assert_eq!(status, 200);

    // A body cut short by the half-close is refused at once, not after the request timeout.
    let mut stream = connect(&server).await;
    let head = format!(
        "POST /v1/agent/commands HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN_A}\r\n\
         content-length: 100\r\n\r\n{{\"protocolVersion\":1,"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), read_until_closed(&mut stream))
        .await
        .expect("a truncated body is answered before the request timeout");
    let (status, _, body) = parse_response(&response);
    assert_eq!(status, 400, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["message"], "Command body could not be read");

    // An event stream whose client closed its side ends, and its slot is free again.
    let mut follower = connect(&server).await;
    let request = format!(
        "GET /v1/agent/sessions/{session}/events HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN_A}\r\n\r\n"
    );
    follower.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let read = tokio::time::timeout(DEADLINE, follower.read(&mut buffer))
        .await
        .expect("the stream's head")
        .unwrap();
    assert!(status_line(&buffer[..read]).starts_with("HTTP/1.1 200"));
    let refused = server.events(TOKEN_A, &session, "", None).await;
    assert_eq!(
        refused.status().as_u16(),
        503,
        "the tenant's one slot is taken"
    );
    follower.shutdown().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let response = server.events(TOKEN_A, &session, "", None).await;
        if response.status().as_u16() == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream of a client that closed its side kept its slot"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop().await;
}

/// Every log line of this test process at DEBUG and above (so a request's lines carry its span,
/// with the path), captured by a global `tracing` subscriber (nextest runs each test in its own
/// process; under `cargo test` the buffer is shared, so the assertions look only at lines naming
/// their own session).
fn captured_logs() -> &'static std::sync::Mutex<Vec<u8>> {
    static LOGS: std::sync::OnceLock<&'static std::sync::Mutex<Vec<u8>>> =
        std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static std::sync::Mutex<Vec<u8>> =
            Box::leak(Box::new(std::sync::Mutex::new(Vec::new())));
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || Capture(logs))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        logs
    })
}

struct Capture(&'static std::sync::Mutex<Vec<u8>>);

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// ATK-08: a `503` the client caused (here: its tenant's event streams are at their cap) is
/// logged below ERROR; ERROR is for faults of the server, so a client cannot fill the error log
/// at will.
#[tokio::test]
async fn atk_08_a_client_caused_503_is_not_logged_as_an_error() {
    let logs = captured_logs();
    let mut config = memory_config();
    config.gateway.max_sse_connections_per_tenant = 1;
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    let open = server.events(TOKEN_A, &session, "", None).await;
    assert_eq!(open.status().as_u16(), 200);
    for _ in 0..3 {
        let refused = server.events(TOKEN_A, &session, "", None).await;
        assert_eq!(refused.status().as_u16(), 503);
    }
    drop(open);
    server.stop().await;

    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let about_the_refusals: Vec<&str> = text
        .lines()
        .filter(|line| line.contains(&session) && line.contains("503 Service Unavailable"))
        .collect();
    assert_eq!(
        about_the_refusals.len(),
        3,
        "each refusal is still logged once:\n{text}"
    );
    for line in about_the_refusals {
        assert!(
            !line.contains("ERROR") && line.contains("WARN"),
            "a client-caused 503 at WARN: {line}"
        );
    }
}

/// ATK-02 (in part): a read must not store its whole answer under its command id for the command
/// retention period (24 h), in memory and in the journal. Reads (`initialize`, `session.read`,
/// `session.list`) keep no receipt: the bound is that they add nothing to the journal, and the
/// process grows by less than 48 MiB over 50 reads and 20 lists of a session with about 0.9 MiB of
/// metadata (the answers themselves are built and freed).
#[tokio::test]
async fn atk_02_reads_and_lists_of_a_large_session_add_nothing_to_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(test_config(StoreKind::Jsonl, dir.path())).await;
    let large = "x".repeat(900 * 1024);
    let created = server
        .ok(
            TOKEN_A,
            "session.create",
            json!({ "metadata": { "large": large } }),
        )
        .await;
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    let journal = dir.path().join("server-store.jsonl");
    let journal_before = std::fs::metadata(&journal).unwrap().len();
    let resident_before = resident_bytes();
    for index in 0..50 {
        let (status, body) = server
            .command(
                TOKEN_A,
                &format!("atk02-read-{index}"),
                "session.read",
                json!({ "sessionId": session }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["data"]["session"]["metadata"]["large"]
                .as_str()
                .map(str::len),
            Some(large.len())
        );
    }
    for index in 0..20 {
        let (status, _) = server
            .command(
                TOKEN_A,
                &format!("atk02-list-{index}"),
                "session.list",
                json!({}),
            )
            .await;
        assert_eq!(status, 200);
    }
    // A read retried under its id reads again (no stored answer to replay).
    let (status, again) = server
        .command(
            TOKEN_A,
            "atk02-read-0",
            "session.read",
            json!({ "sessionId": session }),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    let journal_growth = std::fs::metadata(&journal).unwrap().len() - journal_before;
    let resident_growth = resident_bytes().saturating_sub(resident_before);
    eprintln!("atk-02: journal +{journal_growth} bytes, resident +{resident_growth} bytes");
    assert_eq!(journal_growth, 0, "reads wrote nothing to the journal");
    assert!(
        resident_growth < 48 << 20,
        "resident memory grew by {resident_growth} bytes"
    );
    server.stop().await;
}

/// ATK-02, memory per journal byte: metadata shaped to cost the most once parsed (an array of
/// zeros is two bytes of JSON per element and a 32-byte value per element; many one-key objects
/// cost a map each), in sessions created and stored with their answers. Before the store kept
/// such records as text, 20 such creates took 624 MB of memory for 32 MB of journal (19.5×).
#[tokio::test]
async fn atk_02_records_shaped_to_inflate_cost_about_their_journal_size_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(test_config(StoreKind::Jsonl, dir.path())).await;
    let journal = dir.path().join("server-store.jsonl");
    let journal_before = std::fs::metadata(&journal).unwrap().len();
    let resident_before = resident_bytes();
    for index in 0..20 {
        let metadata = if index % 2 == 0 {
            json!({ "zeros": vec![0; 380_000] })
        } else {
            let keys: serde_json::Map<String, Value> = (0..60_000)
                .map(|key| (format!("{key:x}"), json!(0)))
                .collect();
            Value::Object(keys)
        };
        server
            .ok(TOKEN_A, "session.create", json!({ "metadata": metadata }))
            .await;
    }
    let journal_growth = std::fs::metadata(&journal).unwrap().len() - journal_before;
    let resident_growth = resident_bytes().saturating_sub(resident_before);
    eprintln!("atk-02: journal +{journal_growth} bytes, resident +{resident_growth} bytes");
    assert!(journal_growth > 20 << 20, "the journal holds the records");
    assert!(
        resident_growth < 5 * journal_growth,
        "resident memory grew by {resident_growth} bytes for {journal_growth} bytes of journal"
    );
    server.stop().await;
}
