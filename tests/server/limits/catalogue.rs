//! Reliability catalogue P0, section H (resource exhaustion): RES-01, RES-03, RES-04 over real
//! connections. Like everything under `tests/server/`, CI runs it on the memory store and again on
//! PostgreSQL (`AGENT_RUNTIME_TEST_STORE=postgres`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::support::*;
use agent_runtime_gateway::TenantLimits;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_secs(30);

/// Resident memory of this process (the server runs in it), in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Open file descriptors of this process (client and server sockets alike).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Reads one HTTP response (head and JSON body) from a raw connection, within the deadline.
async fn read_response(reader: &mut (impl AsyncReadExt + Unpin)) -> (u16, Value) {
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|value| value.trim().parse::<usize>().unwrap())
                })
                .expect("a JSON answer with a length");
            if body.len() >= length {
                let status = head[9..12].parse().unwrap();
                return (status, serde_json::from_str(&body[..length]).unwrap());
            }
        }
        let read = tokio::time::timeout(DEADLINE, reader.read(&mut buffer))
            .await
            .expect("an answer before the deadline")
            .expect("the answer arrives before the connection closes");
        assert!(read > 0, "closed without an answer: {text}");
        received.extend_from_slice(&buffer[..read]);
    }
}

fn command_head(extra: &str) -> String {
    format!(
        "POST /v1/agent/commands HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {TOKEN_A}\r\ncontent-type: application/json\r\n{extra}\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_01_body_size_limit() {
    const HUNDRED_MB: usize = 100 * 1024 * 1024;
    let mut config = memory_config();
    config.gateway.request_timeout = Duration::from_millis(500);
    let server = TestServer::start(config).await;
    let resident_before = resident_bytes();

    // A declared 100 MB body: 413 before a byte of it is sent.
    let mut stream = TcpStream::connect(server.authority()).await.unwrap();
    stream
        .write_all(command_head(&format!("content-length: {HUNDRED_MB}\r\n")).as_bytes())
        .await
        .unwrap();
    let (status, body) = read_response(&mut stream).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "INVALID_COMMAND");

    // A chunked body with no declared length, streamed towards 100 MB: 413 once the 1 MiB limit
    // is passed; the sender is stopped long before the whole body is sent, let alone buffered.
    let stream = TcpStream::connect(server.authority()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    writer
        .write_all(command_head("transfer-encoding: chunked\r\n").as_bytes())
        .await
        .unwrap();
    let answered = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sender = {
        let (answered, sent) = (answered.clone(), sent.clone());
        tokio::spawn(async move {
            let chunk = vec![b' '; 1024 * 1024];
            let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
            framed.extend_from_slice(&chunk);
            framed.extend_from_slice(b"\r\n");
            while !answered.load(Ordering::SeqCst)
                && (sent.load(Ordering::SeqCst) as usize) < HUNDRED_MB
            {
                if writer.write_all(&framed).await.is_err() {
                    break; // the server stopped reading and closed
                }
                sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
        })
    };
    let (status, body) = read_response(&mut reader).await;
    answered.store(true, Ordering::SeqCst);
    sender.await.unwrap();
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    let sent = sent.load(Ordering::SeqCst) as usize;
    assert!(
        sent < HUNDRED_MB / 2,
        "the upload was cut short: {sent} bytes sent"
    );
    // The catalogue asks for an RSS increase under 2× the limit; this whole test process (server
    // and clients) gets a coarse bound far below the 100 MB body.
    let grown = resident_bytes().saturating_sub(resident_before);
    assert!(
        grown < 32 * 1024 * 1024,
        "resident memory grew by {grown} bytes"
    );

    // A chunked body that never ends: the body read timeout answers 408 (retryable).
    let mut stream = TcpStream::connect(server.authority()).await.unwrap();
    stream
        .write_all(command_head("transfer-encoding: chunked\r\n").as_bytes())
        .await
        .unwrap();
    let start = b"{\"protocolVersion\":1,";
    let mut chunk = format!("{:x}\r\n", start.len()).into_bytes();
    chunk.extend_from_slice(start);
    chunk.extend_from_slice(b"\r\n");
    stream.write_all(&chunk).await.unwrap();
    let (status, body) = read_response(&mut stream).await;
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    assert_eq!(body["error"]["retryable"], true);

    // The server is fine afterwards.
    server.create_session(TOKEN_A).await;
    server.stop().await;
}

/// Asserts the per-tenant SSE cap's refusal: `503 OVERLOADED` JSON before any stream byte.
async fn assert_refused(response: reqwest::Response) {
    // The catalogue (RES-03) suggests 429 + Retry-After. Its own mapping table maps
    // RATE_LIMITED/TENANT_QUOTA_EXCEEDED to "`RATE_LIMITED` 429 / `OVERLOADED` 503, with
    // retryAfterMs"; docs/protocol.md §3 gives `OVERLOADED` 503 (retryAfterMs 1000) for capacity
    // caps and §4.2 forbids `retry-after` on the SSE route, so the delay is in the body.
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.headers().get("retry-after").is_none());
    assert_eq!(
        response.headers()["content-type"],
        "application/json; charset=utf-8"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "OVERLOADED", "{body}");
    assert_eq!(body["error"]["retryable"], true);
    assert_eq!(body["error"]["retryAfterMs"], 1000);
    assert_eq!(body["commandId"], "events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_03_per_tenant_sse_caps() {
    // Scaled down for CI: a cap of 50 and 250 attempts (the catalogue says 10,000 streams).
    const CAP: usize = 50;
    const ATTEMPTS: usize = 250;
    let mut config = memory_config();
    config.gateway.max_sse_connections_per_tenant = CAP;
    let server = TestServer::start(config).await;
    let a = server.create_session(TOKEN_A).await;
    let b = server.create_session(TOKEN_B).await;

    let mut open = Vec::new();
    for _ in 0..CAP {
        let response = server.events(TOKEN_A, &a, "", None).await;
        assert_eq!(response.status().as_u16(), 200);
        open.push(response);
    }
    let fds_at_cap = open_fds();
    for _ in CAP..ATTEMPTS {
        assert_refused(server.events(TOKEN_A, &a, "", None).await).await;
    }
    // Refused attempts hold nothing: no descriptor per refusal (the client reuses its pooled
    // connections; the server closed no stream and opened none).
    let fds = open_fds();
    assert!(
        fds <= fds_at_cap + 16,
        "{fds} descriptors after {} refusals, {fds_at_cap} at the cap",
        ATTEMPTS - CAP
    );

    // Tenant B opens streams and is served live while A sits at its cap.
    let mut b_streams = Vec::new();
    for _ in 0..5 {
        let response = server.events(TOKEN_B, &b, "?after=0", None).await;
        assert_eq!(response.status().as_u16(), 200);
        b_streams.push(SseReader::new(response));
    }
    server.submit(TOKEN_B, &b, "demo:deltas=2").await;
    for reader in &mut b_streams {
        let frame = tokio::time::timeout(DEADLINE, reader.next_event())
            .await
            .expect("B's event before the deadline")
            .unwrap();
        assert_eq!(frame.data["sequence"], 1);
    }
    assert_refused(server.events(TOKEN_A, &a, "", None).await).await;

    // A's places come back when its streams close.
    open.truncate(CAP - 1);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let response = server.events(TOKEN_A, &a, "", None).await;
        if response.status().as_u16() == 200 {
            break;
        }
        assert_refused(response).await;
        assert!(tokio::time::Instant::now() < deadline, "no place freed up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop((open, b_streams));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_04_session_quota_and_fair_admission() {
    // Scaled down for CI: A floods with 200 concurrent commands while B sends 20 commands, one
    // every 50 ms.
    const FLOOD: usize = 200;
    const STEADY: usize = 20;
    const A_PER_MINUTE: usize = 60;
    const SESSION_CAP: usize = 5;
    let mut config = memory_config();
    config.gateway.tenant_limits = vec![TenantLimits {
        tenant: "tenant-a".to_owned(),
        max_concurrent_commands: Some(2),
        max_queued_commands: Some(4),
        commands_per_minute: Some(A_PER_MINUTE),
        ..TenantLimits::default()
    }];
    config.executor.max_active_sessions_per_tenant = SESSION_CAP;
    let server = Arc::new(TestServer::start(config).await);
    let a_session = server.create_session(TOKEN_A).await;
    let b_session = server.create_session(TOKEN_B).await;

    let flood: Vec<_> = (0..FLOOD)
        .map(|i| {
            let server = server.clone();
            let a_session = a_session.clone();
            tokio::spawn(async move {
                let (kind, data) = if i % 2 == 0 {
                    ("session.create", json!({}))
                } else {
                    (
                        "input.submit",
                        json!({ "sessionId": a_session, "input": "demo:deltas=1" }),
                    )
                };
                let body = json!({ "protocolVersion": 1, "commandId": format!("flood-{i}"), "type": kind, "data": data });
                server
                    .post_raw(TOKEN_A, serde_json::to_vec(&body).unwrap())
                    .await
            })
        })
        .collect();
    let steady = {
        let server = server.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in 0..STEADY {
                let (kind, data) = match i % 3 {
                    0 => ("session.read", json!({ "sessionId": b_session })),
                    1 => ("session.list", json!({})),
                    _ => (
                        "input.submit",
                        json!({ "sessionId": b_session, "input": "demo:deltas=1" }),
                    ),
                };
                let answer = tokio::time::timeout(
                    DEADLINE,
                    server.command(TOKEN_B, &format!("steady-{i}"), kind, data),
                )
                .await
                .expect("B is answered before the deadline");
                answers.push(answer);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            answers
        })
    };

    let (mut ok, mut rate_limited, mut overloaded, mut created) = (0, 0, 0, 0);
    for (i, task) in flood.into_iter().enumerate() {
        let (status, retry_after, body) = task.await.unwrap();
        match status {
            200 => {
                ok += 1;
                created += usize::from(i % 2 == 0);
            }
            429 => {
                assert_eq!(body["error"]["code"], "RATE_LIMITED", "{body}");
                assert!(retry_after.is_some(), "429 + retry-after");
                rate_limited += 1;
            }
            503 => {
                // Queue full, or the active-session cap (docs/protocol.md §3, §8.3).
                assert_eq!(body["error"]["code"], "OVERLOADED", "{body}");
                assert_eq!(retry_after.as_deref(), Some("1"));
                overloaded += 1;
            }
            _ => panic!("unexpected answer to the flood: {status} {body}"),
        }
    }
    // A's first create took one place of the minute's quota.
    assert!(ok < A_PER_MINUTE, "A stays within its rate: {ok} admitted");
    assert!(rate_limited > 0, "the flood hit the rate limit");
    eprintln!("A's flood: {ok} admitted, {rate_limited} rate limited, {overloaded} overloaded");
    // (A's own session.list would be rate limited now: count its successful creates.)
    assert!(
        created < SESSION_CAP,
        "the active-session quota holds: {created} created next to the first"
    );

    // B: every command succeeded, none waited past the deadline.
    for (status, body) in steady.await.unwrap() {
        assert_eq!(status, 200, "B is unaffected by A: {body}");
    }
    Arc::try_unwrap(server).ok().unwrap().stop().await;
}

/// Reads a stream to its end (after `session.closed`) and returns the sequences it carried.
async fn sequences_until_closed(response: reqwest::Response) -> Vec<u64> {
    let mut reader = SseReader::new(response);
    let mut sequences = Vec::new();
    while let Some(frame) = tokio::time::timeout(DEADLINE, reader.next_event())
        .await
        .expect("the stream moves before the deadline")
    {
        sequences.push(frame.id.expect("an id").parse().unwrap());
    }
    sequences
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sse_14_a_reconnect_storm_converges_and_the_excess_is_refused_not_served_late() {
    // Scaled down for CI: 30 places and 80 reconnecting clients (the catalogue says 1,000).
    const CAP: usize = 30;
    const CLIENTS: usize = 80;
    let mut config = memory_config();
    config.gateway.max_sse_connections_per_tenant = CAP;
    let server = Arc::new(TestServer::start(config).await);
    let a = server.create_session(TOKEN_A).await;
    let b = server.create_session(TOKEN_B).await;
    server.submit(TOKEN_A, &a, "demo:deltas=20").await;
    let history = server.collect_events(TOKEN_A, &a, 0, is_result).await;
    let mut b_stream = SseReader::new(server.events(TOKEN_B, &b, "?after=0", None).await);

    // A's followers have read different amounts when every connection is cut at once.
    let mut followers = Vec::new();
    let mut cursors = Vec::new();
    for index in 0..CAP {
        let response = server.events(TOKEN_A, &a, "?after=0", None).await;
        assert_eq!(response.status().as_u16(), 200);
        let mut reader = SseReader::new(response);
        let mut cursor = 0;
        for _ in 0..=index % history.len() {
            let frame = reader.next_event().await.expect("a replayed event");
            cursor = frame.id.unwrap().parse::<u64>().unwrap();
        }
        followers.push(reader);
        cursors.push(cursor);
    }
    drop(followers);
    // More happens while they are away.
    server.submit(TOKEN_A, &a, "demo:deltas=10").await;

    // The storm: more clients than places reconnect at once with their `Last-Event-ID`. Each
    // first attempt is either served or refused with OVERLOADED and a retry delay; nobody is
    // served from the wrong place or left hanging.
    let attempted = Arc::new(tokio::sync::Barrier::new(CLIENTS + 1));
    let mut storm = Vec::new();
    for client in 0..CLIENTS {
        let (server, a, attempted) = (Arc::clone(&server), a.clone(), Arc::clone(&attempted));
        let cursor = cursors[client % CAP];
        storm.push(tokio::spawn(async move {
            let id = cursor.to_string();
            let first = server.events(TOKEN_A, &a, "", Some(&id)).await;
            let served_at_once = first.status().as_u16() == 200;
            let served = if served_at_once {
                Some(first)
            } else {
                assert_refused(first).await;
                None
            };
            attempted.wait().await;
            let response = match served {
                Some(response) => response,
                None => loop {
                    let retry = server.events(TOKEN_A, &a, "", Some(&id)).await;
                    if retry.status().as_u16() == 200 {
                        break retry;
                    }
                    assert_refused(retry).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                },
            };
            (
                cursor,
                served_at_once,
                sequences_until_closed(response).await,
            )
        }));
    }
    attempted.wait().await;

    // Tenant B is unaffected: its open stream delivers, and a new stream of B opens at once.
    server.submit(TOKEN_B, &b, "demo:deltas=2").await;
    let frame = tokio::time::timeout(DEADLINE, b_stream.next_event())
        .await
        .expect("B's event before the deadline")
        .unwrap();
    assert_eq!(frame.data["sequence"], 1);
    let another = server.events(TOKEN_B, &b, "?after=0", None).await;
    assert_eq!(another.status().as_u16(), 200);
    drop(another);

    // Closing A ends the served streams; the refused clients get their turn and catch up.
    server
        .ok(TOKEN_A, "session.close", json!({ "sessionId": a }))
        .await;
    let mut served_at_once = 0;
    let mut last = None;
    for client in storm {
        let (cursor, at_once, sequences) = client.await.unwrap();
        served_at_once += usize::from(at_once);
        let expected: Vec<u64> = (cursor + 1..=cursor + sequences.len() as u64).collect();
        assert_eq!(
            sequences, expected,
            "from cursor {cursor}: no gap, no repeat"
        );
        let end = *sequences.last().expect("at least session.closed");
        assert!(
            last.is_none_or(|last| last == end),
            "everyone reaches the same end"
        );
        last = Some(end);
    }
    assert!(
        served_at_once <= CAP,
        "{served_at_once} served beyond {CAP} places"
    );
    assert!(served_at_once < CLIENTS, "the excess was refused");
    drop(b_stream);
    Arc::into_inner(server).unwrap().stop().await;
}
