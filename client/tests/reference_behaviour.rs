//! The browser client's tested behaviours (docs/protocol.md §12, items 27-34), against a scripted
//! HTTP server that answers exactly what each case needs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::protocol::command::ClientInfo;
use agent_runtime::protocol::result::InitializeResult;
use agent_runtime::protocol::{CommandResult, ErrorCode, ResultData};
use agent_runtime_client::{
    After, AgentClient, ClientOptions, CommandOptions, EventCursor, EventStream, EventsOptions,
};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde_json::{Value, json};

/// One canned answer.
struct Canned {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Body,
}

impl Canned {
    fn sse(text: &str) -> Canned {
        Canned {
            status: 200,
            headers: vec![("content-type", "text/event-stream".to_owned())],
            body: Body::from(text.to_owned()),
        }
    }

    fn json(status: u16, value: Value) -> Canned {
        Canned {
            status,
            headers: vec![("content-type", "application/json".to_owned())],
            body: Body::from(value.to_string()),
        }
    }
}

/// A request the server saw.
#[derive(Clone, Debug)]
struct Seen {
    uri: String,
    last_event_id: Option<String>,
    body: Value,
}

#[derive(Default)]
struct Script {
    posts: Mutex<VecDeque<Canned>>,
    gets: Mutex<VecDeque<Canned>>,
    posted: Mutex<Vec<Seen>>,
    got: Mutex<Vec<Seen>>,
}

fn seen(uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Seen {
    Seen {
        uri: uri.to_string(),
        last_event_id: headers
            .get("last-event-id")
            .map(|value| value.to_str().unwrap().to_owned()),
        body: serde_json::from_slice(body).unwrap_or(Value::Null),
    }
}

fn respond(canned: Canned) -> Response {
    let mut response = Response::builder().status(StatusCode::from_u16(canned.status).unwrap());
    for (name, value) in canned.headers {
        response = response.header(name, value);
    }
    response.body(canned.body).unwrap()
}

async fn commands(
    State(script): State<Arc<Script>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = seen(&uri, &headers, &body);
    let command_id = request.body["commandId"].as_str().unwrap_or("x").to_owned();
    script.posted.lock().unwrap().push(request);
    if let Some(canned) = script.posts.lock().unwrap().pop_front() {
        return respond(canned);
    }
    // Unscripted: a valid `initialize` answer.
    let data = InitializeResult::new("2026-01-01T00:00:00.000Z").to_data();
    respond(Canned::json(
        200,
        CommandResult::success(command_id, data).to_value(),
    ))
}

async fn events(State(script): State<Arc<Script>>, uri: Uri, headers: HeaderMap) -> Response {
    script.got.lock().unwrap().push(seen(&uri, &headers, b""));
    let canned = script.gets.lock().unwrap().pop_front();
    respond(canned.unwrap_or_else(|| Canned::sse("")))
}

async fn serve(script: Arc<Script>) -> String {
    let app = Router::new()
        .route("/v1/agent/commands", post(commands))
        .route("/v1/agent/sessions/{id}/events", get(events))
        .with_state(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/v1/agent/")
}

fn client(base: &str, configure: impl FnOnce(&mut ClientOptions)) -> AgentClient {
    let info = ClientInfo {
        name: "reference-tests".to_owned(),
        version: "1".to_owned(),
        title: None,
    };
    let mut options = ClientOptions::new(base, info);
    options.retry_base_delay = Duration::from_millis(1);
    configure(&mut options);
    AgentClient::new(options).unwrap()
}

fn event(session: &str, sequence: u64, closed: bool) -> String {
    let (kind, data) = if closed {
        ("session.closed", json!({ "reason": "test" }))
    } else {
        (
            "session.stream",
            json!({ "type": "content", "sessionId": session, "delta": "d" }),
        )
    };
    json!({
        "protocolVersion": 1, "eventId": format!("event-{sequence}"), "sequence": sequence,
        "sessionId": session, "occurredAt": "2026-01-01T00:00:00.000Z", "type": kind, "data": data
    })
    .to_string()
}

async fn next(
    events: &mut EventStream,
) -> Option<Result<agent_runtime_client::SessionEvent, agent_runtime_client::ClientError>> {
    tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("the stream answers before the deadline")
}

#[tokio::test]
async fn item_27_a_crlf_frame_then_a_reconnect_after_it_with_last_event_id() {
    let script = Arc::new(Script::default());
    script.gets.lock().unwrap().extend([
        Canned::sse(&format!(
            "id: 1\r\ndata: {}\r\n\r\n",
            event("session-1", 1, false)
        )),
        Canned::sse(&format!("id: 2\ndata: {}\n\n", event("session-1", 2, true))),
    ]);
    let base = serve(script.clone()).await;
    let client = client(&base, |options| options.max_event_reconnect_attempts = 1);
    assert_eq!(client.base_url(), base.trim_end_matches('/'));

    let mut events = client.events("session-1", EventsOptions::default());
    let first = next(&mut events).await.unwrap().unwrap();
    let second = next(&mut events).await.unwrap().unwrap();
    assert_eq!((first.sequence(), second.sequence()), (1, 2));
    assert!(second.is_session_closed());
    assert!(next(&mut events).await.is_none());

    let got = script.got.lock().unwrap().clone();
    assert_eq!(got.len(), 2);
    assert!(got[0].uri.ends_with("/sessions/session-1/events?after=0"));
    assert_eq!(got[0].last_event_id, None);
    assert!(got[1].uri.ends_with("?after=1"));
    assert_eq!(got[1].last_event_id.as_deref(), Some("1"));
}

#[tokio::test]
async fn item_28_five_mib_without_a_delimiter_is_stream_frame_too_large() {
    let script = Arc::new(Script::default());
    let chunks = std::iter::once(Ok::<_, std::io::Error>(Bytes::from_static(b"data: ")))
        .chain((0..80).map(|_| Ok(Bytes::from(vec![b'x'; 64 * 1024]))));
    // ...and the connection then stays open without ever finishing the frame.
    let body = futures_util::stream::iter(chunks).chain(futures_util::stream::pending());
    script.gets.lock().unwrap().push_back(Canned {
        status: 200,
        headers: vec![("content-type", "text/event-stream".to_owned())],
        body: Body::from_stream(body),
    });
    let base = serve(script.clone()).await;
    let client = client(&base, |options| options.max_event_reconnect_attempts = 0);
    let mut events = client.events("session-1", EventsOptions::default());
    let error = next(&mut events).await.unwrap().unwrap_err();
    assert_eq!(error.code, ErrorCode::StreamFrameTooLarge);
    assert_eq!(error.status, Some(502));
    assert!(!error.retryable);
}

#[tokio::test]
async fn item_29_an_always_empty_stream_fails_after_max_reconnects_plus_one_requests() {
    let script = Arc::new(Script::default());
    let base = serve(script.clone()).await;
    let client = client(&base, |options| options.max_event_reconnect_attempts = 2);
    let mut events = client.events("session-1", EventsOptions::default());
    let error = next(&mut events).await.unwrap().unwrap_err();
    assert_eq!(error.code, ErrorCode::InternalError);
    assert!(error.retryable);
    assert_eq!(
        error.message,
        "Agent event stream ended before Session closure"
    );
    assert_eq!(script.got.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn item_30_stale_cursor_is_raised_after_exactly_one_request() {
    let script = Arc::new(Script::default());
    script.gets.lock().unwrap().push_back(Canned::json(
        409,
        json!({"protocolVersion":1,"commandId":"events","ok":false,
               "error":{"code":"STALE_CURSOR","message":"Event cursor is stale","retryable":false}}),
    ));
    let base = serve(script.clone()).await;
    let client = client(&base, |options| options.max_event_reconnect_attempts = 5);
    let mut events = client.events("session-1", EventsOptions::after(3));
    let error = next(&mut events).await.unwrap().unwrap_err();
    assert_eq!(error.code, ErrorCode::StaleCursor);
    assert_eq!(error.status, Some(409));
    assert_eq!(script.got.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn item_31_a_cursor_of_another_session_sends_nothing() {
    let script = Arc::new(Script::default());
    let base = serve(script.clone()).await;
    let client = client(&base, |_| {});
    let cursor = EventCursor {
        session_id: "session-2".to_owned(),
        sequence: 1,
        event_id: "event-1".to_owned(),
    };
    let mut events = client.events("session-1", EventsOptions::after(After::Cursor(cursor)));
    let error = next(&mut events).await.unwrap().unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidCommand);
    assert_eq!(error.status, Some(400));
    assert!(script.posted.lock().unwrap().is_empty());
    assert!(script.got.lock().unwrap().is_empty());
}

#[tokio::test]
async fn item_32_a_repeated_sequence_after_a_reconnect_fails_closed() {
    let script = Arc::new(Script::default());
    script.gets.lock().unwrap().extend([
        Canned::sse(&format!("data: {}\n\n", event("session-1", 1, false))),
        Canned::sse(&format!("data: {}\n\n", event("session-1", 1, false))),
    ]);
    let base = serve(script.clone()).await;
    let client = client(&base, |_| {});
    let mut events = client.events("session-1", EventsOptions::default());
    assert_eq!(next(&mut events).await.unwrap().unwrap().sequence(), 1);
    let error = next(&mut events).await.unwrap().unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidCommand);
    assert_eq!(error.status, Some(502));
    assert!(
        next(&mut events).await.is_none(),
        "no retry after a violation"
    );
}

#[tokio::test]
async fn item_34_a_non_json_429_is_retried_with_the_same_command_id() {
    let script = Arc::new(Script::default());
    script.posts.lock().unwrap().push_back(Canned {
        status: 429,
        headers: vec![("retry-after", "0".to_owned())],
        body: Body::from("slow down"),
    });
    let base = serve(script.clone()).await;
    let client = client(&base, |options| options.max_command_attempts = 2);
    let init = client.initialize(CommandOptions::default()).await.unwrap();
    assert_eq!(init.commands.len(), 10);
    // Memoised: a second call sends nothing.
    client.initialize(CommandOptions::default()).await.unwrap();

    let posted = script.posted.lock().unwrap().clone();
    assert_eq!(posted.len(), 2);
    assert_eq!(posted[0].body["commandId"], posted[1].body["commandId"]);
    assert_eq!(posted[0].body["type"], "initialize");
    assert_eq!(posted[0].body["data"]["client"]["name"], "reference-tests");
}

#[tokio::test]
async fn a_non_retryable_structured_failure_is_sent_once_even_with_a_5xx_status() {
    let script = Arc::new(Script::default());
    script.posts.lock().unwrap().push_back(Canned::json(
        503,
        json!({"protocolVersion":1,"commandId":"c","ok":false,
               "error":{"code":"INTERNAL_ERROR","message":"no","retryable":false}}),
    ));
    let base = serve(script.clone()).await;
    let client = client(&base, |_| {});
    let error = client
        .initialize(CommandOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.status, Some(503));
    assert!(!error.retryable);
    assert_eq!(script.posted.lock().unwrap().len(), 1);
    // The failure was not memoised: the next call initializes again.
    client.initialize(CommandOptions::default()).await.unwrap();
    assert_eq!(script.posted.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn invalid_options_are_refused() {
    let info = || ClientInfo {
        name: "ok".to_owned(),
        version: "1".to_owned(),
        title: None,
    };
    let refused = |options: ClientOptions| AgentClient::new(options).unwrap_err();
    refused(ClientOptions::new("ftp://host/v1/agent", info()));
    refused(ClientOptions::new("not a url", info()));
    refused(ClientOptions::new("http://user:pw@host/v1/agent", info()));
    refused(ClientOptions::new("http://host/v1/agent?x=1", info()));
    let mut zero = ClientOptions::new("http://host/v1/agent", info());
    zero.max_command_attempts = 0;
    refused(zero);
    let mut bad_name = ClientOptions::new("http://host/v1/agent", info());
    bad_name.client.name = "../unsafe".to_owned();
    refused(bad_name);
    let mut empty_title = ClientOptions::new("http://host/v1/agent", info());
    empty_title.client.title = Some(String::new());
    refused(empty_title);

    let ok = ClientOptions::new("http://host:1/v1/agent///", info()).bearer_token("tok-secret");
    assert!(!format!("{ok:?}").contains("tok-secret"));
    let client = AgentClient::new(ok).unwrap();
    assert_eq!(client.base_url(), "http://host:1/v1/agent");
}
