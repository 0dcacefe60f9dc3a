//! The SSE stream over real HTTP (docs/protocol.md §5 with decisions P2, P8, P9).

use std::sync::Arc;

use crate::support::*;
use agent_runtime::protocol::{EventType, JsonObject, SessionStatus};
use agent_runtime_cli::Overrides;
use agent_runtime_cli::config::StoreKind;
use agent_runtime_store::{NewEvent, SessionRecord, Store};
use serde_json::{Value, json};

fn object(value: Value) -> JsonObject {
    value.as_object().unwrap().clone()
}

async fn server_with_store(store: Arc<dyn Store>, max_events: u64) -> TestServer {
    let dir = std::env::temp_dir();
    let mut config = test_config(StoreKind::Memory, &dir);
    config.max_events_per_session = max_events;
    let overrides = Overrides {
        store: Some(store),
        ..Overrides::default()
    };
    TestServer::start_with(config, overrides).await
}

async fn put_session(store: &Arc<dyn Store>, session_id: &str) {
    store
        .put_session(&SessionRecord {
            tenant_id: "tenant-a".to_owned(),
            created_by: "user-a".to_owned(),
            session_id: session_id.to_owned(),
            status: SessionStatus::Active,
            created_at: "2026-01-01T00:00:00.000Z".to_owned(),
            updated_at: "2026-01-01T00:00:00.000Z".to_owned(),
            metadata: None,
            profile: None,
        })
        .await
        .unwrap();
}

async fn append(store: &Arc<dyn Store>, session_id: &str, event_type: EventType, data: Value) {
    store
        .append_event(
            "tenant-a",
            NewEvent {
                session_id: session_id.to_owned(),
                request_id: None,
                occurred_at: "2026-01-01T00:00:00.000Z".to_owned(),
                event_type,
                data: object(data),
            },
            None,
        )
        .await
        .unwrap();
}

fn content(session_id: &str, delta: &str) -> Value {
    json!({ "type": "content", "sessionId": session_id, "delta": delta })
}

#[tokio::test]
async fn item_07_last_event_id_resumes_after_it_and_the_stream_ends_after_closed() {
    let store = selected_store(DEFAULT_RETENTION).await;
    put_session(&store, "session-7").await;
    append(
        &store,
        "session-7",
        EventType::SessionStream,
        content("session-7", "already-delivered"),
    )
    .await;
    append(
        &store,
        "session-7",
        EventType::SessionClosed,
        json!({ "reason": "test" }),
    )
    .await;
    let server = server_with_store(store, 10_000).await;

    let response = server.events(TOKEN_A, "session-7", "", Some("1")).await;
    assert_eq!(response.status().as_u16(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/event-stream; charset=utf-8");
    assert_eq!(headers["cache-control"], "no-cache, no-transform");
    assert_eq!(headers["x-accel-buffering"], "no");
    let body = tokio::time::timeout(std::time::Duration::from_secs(10), response.text())
        .await
        .expect("the stream ends after session.closed")
        .unwrap();
    assert!(body.contains("id: 2\n"));
    assert!(body.contains("event: session.closed\n"));
    assert!(!body.contains("already-delivered"));
    server.stop().await;
}

#[tokio::test]
async fn a_session_streams_its_exact_event_sequence_and_reconnects_without_duplicates() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "demo:deltas=5").await;
    server.collect_events(TOKEN_A, &session, 0, is_result).await;
    server
        .ok(TOKEN_A, "session.close", json!({ "sessionId": session }))
        .await;

    let all = server.collect_events(TOKEN_A, &session, 0, |_| false).await;
    let kinds: Vec<String> = all
        .iter()
        .map(|e| {
            stream_type(e)
                .map(str::to_owned)
                .unwrap_or_else(|| e["type"].as_str().unwrap().to_owned())
        })
        .collect();
    let mut expected = vec!["turn_start".to_owned()];
    expected.extend((0..5).map(|_| "content".to_owned()));
    expected.extend(["usage", "turn_end", "result", "session.closed"].map(str::to_owned));
    assert_eq!(kinds, expected);
    let sequences: Vec<u64> = all
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=all.len() as u64).collect::<Vec<_>>());

    // Disconnect after event 3, reconnect with Last-Event-ID: 3.
    let response = server.events(TOKEN_A, &session, "", Some("3")).await;
    let mut reader = SseReader::new(response);
    let mut resumed = Vec::new();
    while let Some(frame) = reader.next_event().await {
        assert_eq!(
            frame.id.as_deref(),
            Some(frame.data["sequence"].to_string().as_str())
        );
        assert_eq!(frame.event.as_deref(), frame.data["type"].as_str());
        resumed.push(frame.data["sequence"].as_u64().unwrap());
    }
    assert_eq!(resumed, (4..=all.len() as u64).collect::<Vec<_>>());

    // `after` beats Last-Event-ID.
    let response = server
        .events(TOKEN_A, &session, "?after=7", Some("2"))
        .await;
    let mut reader = SseReader::new(response);
    let first = reader.next_event().await.unwrap();
    assert_eq!(first.data["sequence"], 8);
    // An empty `after=` means 0, even with a Last-Event-ID.
    let response = server.events(TOKEN_A, &session, "?after=", Some("5")).await;
    let mut reader = SseReader::new(response);
    assert_eq!(reader.next_event().await.unwrap().data["sequence"], 1);
    server.stop().await;
}

#[tokio::test]
async fn a_cursor_outside_retention_is_stale_before_any_byte() {
    let store = selected_store(3).await;
    put_session(&store, "session-r").await;
    for n in 1..=5 {
        append(
            &store,
            "session-r",
            EventType::SessionStream,
            content("session-r", &format!("d{n}")),
        )
        .await;
    }
    let server = server_with_store(store, 3).await;
    for (query, message) in [
        ("?after=0", "stale"),
        ("?after=1", "stale"),
        ("?after=9", "ahead"),
    ] {
        let response = server.events(TOKEN_A, "session-r", query, None).await;
        assert_eq!(response.status().as_u16(), 409, "{query}");
        assert!(response.headers().get("retry-after").is_none());
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "STALE_CURSOR");
        assert_eq!(body["commandId"], "events");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(message),
            "{body}"
        );
    }
    let response = server.events(TOKEN_A, "session-r", "?after=2", None).await;
    assert_eq!(response.status().as_u16(), 200);
    let mut reader = SseReader::new(response);
    assert_eq!(reader.next_event().await.unwrap().data["sequence"], 3);
    server.stop().await;
}

#[tokio::test]
async fn bad_cursors_missing_sessions_and_missing_scopes_answer_json_first() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    for cursor in ["abc", "1e3", "0x10", "-1"] {
        let response = server
            .events(TOKEN_A, &session, &format!("?after={cursor}"), None)
            .await;
        assert_eq!(response.status().as_u16(), 400, "decision P8: {cursor}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    }
    let response = server.events(TOKEN_A, &session, "", Some("abc")).await;
    assert_eq!(response.status().as_u16(), 400);

    let response = server.events(TOKEN_NO_READ, &session, "", None).await;
    assert_eq!(response.status().as_u16(), 403, "decision P2");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "FORBIDDEN");
    assert_eq!(body["commandId"], "events");

    for (token, id) in [(TOKEN_A, "no-such-session"), (TOKEN_B, session.as_str())] {
        let response = server.events(token, id, "", None).await;
        assert_eq!(response.status().as_u16(), 404);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "SESSION_NOT_FOUND");
    }
    let response = server
        .client
        .get(format!("{}/sessions/{session}/events", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    server.stop().await;
}

#[tokio::test]
async fn an_idle_stream_sends_heartbeats_and_then_live_events_by_push() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let response = server.events(TOKEN_A, &session, "", None).await;
    let mut reader = SseReader::new(response);
    let waiting = tokio::spawn(async move {
        let frame = reader.next_event().await;
        (frame, reader.heartbeats)
    });
    // Heartbeats are every 200 ms in tests; wait for a few before producing an event.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    server.submit(TOKEN_A, &session, "hi").await;
    let (frame, heartbeats) = waiting.await.unwrap();
    assert_eq!(frame.unwrap().data["sequence"], 1);
    assert!(heartbeats >= 1, "heartbeats while idle");
    server.stop().await;
}

/// One request written byte for byte (so that headers reqwest would refuse can be sent) on its
/// own connection; returns the status and the body.
async fn raw_events(server: &TestServer, target: &str, extra_headers: &[u8]) -> (u16, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = server
        .base
        .trim_start_matches("http://")
        .trim_end_matches("/v1/agent");
    let mut socket = tokio::net::TcpStream::connect(authority).await.unwrap();
    let mut request = format!(
        "GET /v1/agent{target} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {TOKEN_A}\r\n"
    )
    .into_bytes();
    request.extend_from_slice(extra_headers);
    request.extend_from_slice(b"Connection: close\r\n\r\n");
    socket.write_all(&request).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        socket.read_to_end(&mut answer),
    )
    .await
    .expect("an error answer ends the connection")
    .unwrap();
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.as_bytes().to_vec())
        .unwrap_or_default();
    (status, body)
}

fn is_invalid_cursor(body: &[u8]) -> bool {
    // The body may be chunked; the JSON object sits between the chunk framing.
    let text = String::from_utf8_lossy(body);
    let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
        return false;
    };
    let body: Value = serde_json::from_str(&text[start..=end]).unwrap_or(Value::Null);
    body["error"]["code"] == "INVALID_COMMAND"
        && body["error"]["message"] == "Event cursor is invalid"
}

/// SSE-05: every malformed cursor, in the query or in `Last-Event-ID`, is a 400 before any byte of
/// the stream, and never a silent replay from the start.
#[tokio::test]
async fn sse_05_malformed_cursors_are_refused_never_replayed_from_the_start() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let path = format!("/sessions/{session}/events");
    let too_big = "9".repeat(10_240);
    let queries = [
        "abc",
        "-1",
        "1e3",
        "%2B1",
        "+1",
        "18446744073709551616",
        "9007199254740992",
        "%00",
        "1%00",
        "%0D",
        "1%0A2",
        "%201",
        "0x10",
        too_big.as_str(),
    ];
    for cursor in queries {
        let (status, body) = raw_events(&server, &format!("{path}?after={cursor}"), b"").await;
        assert_eq!(status, 400, "?after={cursor:.40}");
        assert!(is_invalid_cursor(&body), "?after={cursor:.40}");
    }
    let headers: [&[u8]; 6] = [
        b"Last-Event-ID: abc\r\n",
        b"Last-Event-ID: -1\r\n",
        b"Last-Event-ID: 18446744073709551616\r\n",
        // Not visible ASCII: refused, never taken as cursor 0.
        b"Last-Event-ID: 1\x80\r\n",
        // Repeated: which one did the client mean? Refused, not guessed.
        b"Last-Event-ID: 1\r\nLast-Event-ID: 2\r\n",
        b"Last-Event-ID: 1\r\nlast-event-id: 1\r\n",
    ];
    for header in headers {
        let (status, body) = raw_events(&server, &path, header).await;
        let shown = String::from_utf8_lossy(header);
        assert_eq!(status, 400, "{shown}");
        assert!(is_invalid_cursor(&body), "{shown}");
    }
    let long = format!("Last-Event-ID: {too_big}\r\n");
    let (status, body) = raw_events(&server, &path, long.as_bytes()).await;
    assert_eq!(status, 400);
    assert!(is_invalid_cursor(&body));
    // A NUL byte is not even a valid header: the HTTP layer refuses the request.
    let (status, _) = raw_events(&server, &path, b"Last-Event-ID: 1\x002\r\n").await;
    assert_eq!(status, 400);
    // The server is still serving, and a good cursor still streams.
    let response = server.events(TOKEN_A, &session, "", Some("0")).await;
    assert_eq!(response.status().as_u16(), 200);
    server.stop().await;
}

/// ATK-08: a repeated `after` query parameter is `400 INVALID_COMMAND` "Event cursor is invalid",
/// like a repeated `Last-Event-ID` (which one did the client mean?), also when one of them is empty
/// or both are equal; a single `after` still streams.
#[tokio::test]
async fn atk_08_a_repeated_after_parameter_is_an_invalid_cursor() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let path = format!("/sessions/{session}/events");
    for query in [
        "after=0&after=1",
        "after=1&after=0",
        "after=0&after=0",
        "after=&after=0",
        "after=0&x=1&after=0",
    ] {
        let (status, body) = raw_events(&server, &format!("{path}?{query}"), b"").await;
        assert_eq!(status, 400, "?{query}: {}", String::from_utf8_lossy(&body));
        assert!(is_invalid_cursor(&body), "?{query}");
    }
    let response = server.events(TOKEN_A, &session, "?after=0&x=1", None).await;
    assert_eq!(response.status().as_u16(), 200);
    server.stop().await;
}

/// One event as the WHATWG "interpret an event stream" algorithm dispatches it.
struct SpecEvent {
    id: String,
    event_type: String,
    data: String,
    data_lines: usize,
}

/// The WHATWG event-stream parser (html.spec.whatwg.org, "Interpreting an event stream"): a
/// leading BOM is dropped, lines end at CRLF, LF or a lone CR, `:` lines are comments, a field's
/// value loses one leading space, `data` lines are joined with LF, a blank line dispatches.
fn whatwg_events(stream: &[u8]) -> Vec<SpecEvent> {
    let text = std::str::from_utf8(stream).expect("an SSE stream is UTF-8");
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut events = Vec::new();
    let (mut id, mut event_type, mut data, mut data_lines) =
        (String::new(), String::new(), String::new(), 0);
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.find(['\r', '\n']).unwrap_or(rest.len());
        let line = &rest[..end];
        let after = &rest[end..];
        rest = after
            .strip_prefix("\r\n")
            .or_else(|| after.strip_prefix('\r'))
            .or_else(|| after.strip_prefix('\n'))
            .unwrap_or(after);
        if line.is_empty() {
            if data_lines > 0 {
                events.push(SpecEvent {
                    id: id.clone(),
                    event_type: std::mem::take(&mut event_type),
                    data: std::mem::take(&mut data),
                    data_lines: std::mem::take(&mut data_lines),
                });
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => {
                if data_lines > 0 {
                    data.push('\n');
                }
                data.push_str(value);
                data_lines += 1;
            }
            "event" => event_type = value.to_owned(),
            "id" if !value.contains('\0') => id = value.to_owned(),
            _ => {}
        }
    }
    events
}

/// SSE-08: payloads with every kind of line break, U+2028/U+2029, a BOM, NUL, SSE look-alikes
/// (`data:`, `id:`, blank lines, a comment) and a 1 MiB string each leave as exactly one `data:`
/// line, and a WHATWG-conformant parser gives back the exact payload.
#[tokio::test]
async fn sse_08_hostile_payloads_round_trip_through_a_spec_conformant_parser() {
    let store = selected_store(DEFAULT_RETENTION).await;
    put_session(&store, "session-8").await;
    let big = "x".repeat(1 << 20);
    let payloads = [
        "line\nbreak",
        "crlf\r\nbreak",
        "lone\rreturn",
        "\r\n\r\n",
        "separators\u{2028}and\u{2029}",
        "\u{feff}a BOM first",
        "data: fake\n\nid: 99\nevent: session.closed\n\n",
        ": a comment\n",
        "nul\u{0}byte",
        "emoji 🦀 and \"quotes\" \\ backslash",
        big.as_str(),
    ];
    for payload in payloads {
        let data = content("session-8", payload);
        append(&store, "session-8", EventType::SessionStream, data).await;
    }
    append(&store, "session-8", EventType::SessionClosed, json!({})).await;
    let server = server_with_store(store, 10_000).await;

    let response = server.events(TOKEN_A, "session-8", "", Some("0")).await;
    assert_eq!(response.status().as_u16(), 200);
    let body = tokio::time::timeout(std::time::Duration::from_secs(10), response.bytes())
        .await
        .expect("the stream ends after session.closed")
        .unwrap();
    let events = whatwg_events(&body);
    assert_eq!(
        events.len(),
        payloads.len() + 1,
        "one event per stored event"
    );
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event.id, (index + 1).to_string(), "ids are bare sequences");
        assert_eq!(event.data_lines, 1, "one data line per event");
    }
    for (event, payload) in events.iter().zip(payloads) {
        assert_eq!(event.event_type, "session.stream");
        let envelope: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(envelope["data"]["delta"], payload, "byte-exact payload");
    }
    assert_eq!(events.last().unwrap().event_type, "session.closed");
    server.stop().await;
}
