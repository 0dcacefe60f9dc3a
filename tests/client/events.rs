//! The Rust client's event stream against the real server (docs/protocol.md §11.4): reconnects
//! after a killed connection without loss or duplicates, `STALE_CURSOR` surfaced and never retried,
//! the end after `session.closed`, approvals, and cancellation.

use std::time::Duration;

use crate::support::client::*;
use crate::support::*;
use agent_runtime::protocol::command::PermissionScope;
use agent_runtime::protocol::{ErrorCode, EventPayload, StreamMessage};
use agent_runtime_client::{
    After, CommandOptions, ErrorKind, EventCursor, EventStream, EventsOptions, PermissionDecision,
    SessionEvent, SubmitOptions,
};
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

fn address(server: &TestServer) -> std::net::SocketAddr {
    server.server.as_ref().unwrap().address
}

/// The next item of `events`, failing the test after 20 s.
async fn next(
    events: &mut EventStream,
) -> Option<Result<SessionEvent, agent_runtime_client::ClientError>> {
    tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("an event (or the end) before the deadline")
}

/// Events until the `result` of `request_id`.
async fn until_result(events: &mut EventStream, request_id: &str) -> Vec<SessionEvent> {
    let mut seen = Vec::new();
    loop {
        let event = next(events)
            .await
            .expect("the stream goes on until the result")
            .expect("no error");
        let done =
            event.is_request_end() && event.envelope.request_id.as_deref() == Some(request_id);
        seen.push(event);
        if done {
            return seen;
        }
    }
}

fn deltas(events: &[SessionEvent]) -> String {
    events
        .iter()
        .filter_map(|event| match event.stream_message() {
            Some(StreamMessage::Content { delta, .. }) => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_killed_stream_reconnects_and_delivers_every_event_once_and_in_order() {
    let server = TestServer::memory().await;
    let proxy = Proxy::start(address(&server)).await;
    let log = RetryLog::default();
    let client = client(&proxy.base(), TOKEN_A, &log);
    let session = client
        .create_session(None, CommandOptions::default())
        .await
        .unwrap();

    // Two connections of the stream are cut mid-answer (mid-frame, most likely).
    for after_bytes in [5_000, 9_000] {
        proxy.arm(Fault::CutResponse {
            marker: format!("/sessions/{}/events", session.session_id()),
            after_bytes,
        });
    }
    let mut events = session.events(EventsOptions::default());
    let submitted = session
        .send(
            "demo:deltas=200",
            SubmitOptions::default(),
            CommandOptions::default(),
        )
        .await
        .unwrap();
    let request_id = submitted.request_id().unwrap().to_owned();
    let seen = until_result(&mut events, &request_id).await;

    assert_eq!(proxy.fired(), 2, "both connections were cut");
    assert!(log.reconnects().len() >= 2, "{:?}", log.entries());
    let sequences: Vec<u64> = seen.iter().map(SessionEvent::sequence).collect();
    let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
    assert_eq!(sequences, expected, "every event exactly once, in order");
    let all: String = (1..=200).map(|i| format!("delta-{i} ")).collect();
    assert_eq!(deltas(&seen), all);
    let results = seen.iter().filter(|event| event.is_request_end()).count();
    assert_eq!(results, 1);
    // Each reconnect resumed after the last sequence delivered.
    assert_eq!(proxy.sent("/events?after=0"), 1);
    assert!(proxy.sent("last-event-id: ") >= 2);
    server.stop().await;
}

#[tokio::test]
async fn a_stale_cursor_is_surfaced_at_once_and_never_retried() {
    let mut config = memory_config();
    config.max_events_per_session = 5;
    let server = TestServer::start(config).await;
    let proxy = Proxy::start(address(&server)).await;
    let log = RetryLog::default();
    let client = client(&proxy.base(), TOKEN_A, &log);
    let session = client
        .create_session(None, CommandOptions::default())
        .await
        .unwrap();
    session
        .send(
            "demo:deltas=20",
            SubmitOptions::default(),
            CommandOptions::default(),
        )
        .await
        .unwrap();
    // Wait (with a deadline) until the request ended: its result is the recovery cursor.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let read = session.read(CommandOptions::default()).await.unwrap();
        let last = read["recovery"]["lastEventSequence"].as_u64().unwrap_or(0);
        if last > 10 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the request ends");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Event 1 was trimmed long ago.
    let mut events = session.events(EventsOptions::after(1));
    let error = next(&mut events).await.unwrap().unwrap_err();
    assert_eq!(error.code, ErrorCode::StaleCursor);
    assert_eq!(error.kind, ErrorKind::Server);
    assert_eq!(error.status, Some(409));
    assert!(next(&mut events).await.is_none(), "the stream ended");
    assert_eq!(proxy.sent("/events?after=1"), 1, "exactly one request");
    assert!(log.reconnects().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn the_stream_ends_after_session_closed_and_resumes_after_a_cursor() {
    let server = TestServer::memory().await;
    let log = RetryLog::default();
    let client = client(&server.base, TOKEN_A, &log);
    let session = client
        .create_session(None, CommandOptions::default())
        .await
        .unwrap();
    let submitted = session
        .send("hello", SubmitOptions::default(), CommandOptions::default())
        .await
        .unwrap();
    let mut events = session.events(EventsOptions::default());
    let first = until_result(&mut events, submitted.request_id().unwrap()).await;
    assert!(deltas(&first).contains("hello"));
    assert!(deltas(&first).starts_with("[demo]"));

    let closed = session.close(CommandOptions::default()).await.unwrap();
    assert_eq!(closed.session_id, session.session_id());
    let last = next(&mut events).await.unwrap().unwrap();
    assert!(last.is_session_closed());
    assert!(next(&mut events).await.is_none());

    // From a cursor, only what came after it; the stream still ends at session.closed.
    let cursor = first.last().unwrap().cursor();
    let mut rest = session.events(EventsOptions::after(cursor.clone()));
    let replayed = next(&mut rest).await.unwrap().unwrap();
    assert_eq!(replayed.sequence(), cursor.sequence + 1);
    assert!(replayed.is_session_closed());
    assert!(next(&mut rest).await.is_none());
    assert!(log.entries().is_empty(), "{:?}", log.entries());
    server.stop().await;
}

#[tokio::test]
async fn a_cursor_of_another_session_is_refused_without_a_request() {
    let server = TestServer::memory().await;
    let proxy = Proxy::start(address(&server)).await;
    let client = client(&proxy.base(), TOKEN_A, &RetryLog::default());
    let cursor = EventCursor {
        session_id: "session-2".to_owned(),
        sequence: 1,
        event_id: "event-1".to_owned(),
    };
    let mut events = client.events(
        "session-1",
        EventsOptions {
            after: After::Cursor(cursor),
            cancel: None,
        },
    );
    let error = next(&mut events).await.unwrap().unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidCommand);
    assert_eq!(error.status, Some(400));
    assert!(next(&mut events).await.is_none());
    assert_eq!(proxy.sent("HTTP/1.1"), 0, "not even initialize was sent");
    server.stop().await;
}

#[tokio::test]
async fn an_approval_is_answered_through_the_client() {
    let server = TestServer::memory().await;
    let client = client(&server.base, TOKEN_A, &RetryLog::default());
    let session = client
        .create_session(None, CommandOptions::default())
        .await
        .unwrap();
    let mut events = session.events(EventsOptions::default());
    let submitted = session
        .send(
            "this needs approval",
            SubmitOptions::default(),
            CommandOptions::default(),
        )
        .await
        .unwrap();
    let request_id = submitted.request_id().unwrap().to_owned();
    let mut seen = Vec::new();
    let mut asked = false;
    loop {
        let event = next(&mut events).await.unwrap().unwrap();
        if let EventPayload::PermissionRequested(request) = &event.payload {
            asked = true;
            let resolved = session
                .resolve_permission(
                    &request.permission_request_id,
                    PermissionDecision::approve(PermissionScope::Once),
                    CommandOptions::default(),
                )
                .await
                .unwrap();
            assert!(resolved.resolved);
        }
        let done =
            event.is_request_end() && event.envelope.request_id.as_deref() == Some(&*request_id);
        seen.push(event);
        if done {
            break;
        }
    }
    assert!(asked, "a permission.requested event arrived");
    assert!(deltas(&seen).contains("approved"));
    server.stop().await;
}

#[tokio::test]
async fn a_waiting_stream_ends_when_cancelled() {
    let server = TestServer::memory().await;
    let client = client(&server.base, TOKEN_A, &RetryLog::default());
    let session = client
        .create_session(None, CommandOptions::default())
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let mut events = session.events(EventsOptions {
        after: After::Start,
        cancel: Some(cancel.clone()),
    });
    let waiting = tokio::spawn(async move {
        let item = next(&mut events).await;
        (item, next(&mut events).await.is_none())
    });
    cancel.cancel();
    let (item, ended) = waiting.await.unwrap();
    assert!(item.unwrap().unwrap_err().is_cancelled());
    assert!(ended);
    server.stop().await;
}
