//! AG-UI over real HTTP (docs/protocols.md §1): a run and a thread's stream continue exactly
//! after every event a client may have seen last, a stale or absent cursor gets a snapshot, and
//! the routes keep the protocol's scopes and tenant isolation. The official client's own run is
//! in cli/tests/agui.rs.

use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};

/// The frames of a stream, heartbeats left out: to its end, or `limit` of them.
async fn frames(response: reqwest::Response, limit: usize) -> Vec<Frame> {
    assert_eq!(response.status().as_u16(), 200);
    let mut reader = SseReader::new(response);
    let mut frames = Vec::new();
    while frames.len() < limit {
        let next = tokio::time::timeout(Duration::from_secs(20), reader.next_event())
            .await
            .expect("a frame in time");
        match next {
            Some(frame) => frames.push(frame),
            None => break,
        }
    }
    frames
}

async fn run(
    server: &TestServer,
    token: &str,
    body: &Value,
    cursor: Option<&str>,
) -> reqwest::Response {
    let mut request = server
        .client
        .post(format!("{}/ag-ui", server.base))
        .header("authorization", format!("Bearer {token}"))
        .json(body);
    if let Some(cursor) = cursor {
        request = request.header("last-event-id", cursor);
    }
    request.send().await.unwrap()
}

async fn thread(
    server: &TestServer,
    token: &str,
    thread: &str,
    cursor: Option<&str>,
) -> reqwest::Response {
    let mut request = server
        .client
        .get(format!("{}/ag-ui/threads/{thread}/events", server.base))
        .header("authorization", format!("Bearer {token}"));
    if let Some(cursor) = cursor {
        request = request.header("last-event-id", cursor);
    }
    request.send().await.unwrap()
}

fn input(thread: &str, run: &str, text: &str) -> Value {
    json!({"threadId": thread, "runId": run, "messages": [{"id": format!("m-{run}"), "role": "user", "content": text}]})
}

fn types(frames: &[Frame]) -> Vec<&str> {
    frames
        .iter()
        .map(|frame| frame.data["type"].as_str().unwrap())
        .collect()
}

/// A frame as a reconnection must repeat it: the same event with the same id. A `RUN_STARTED`
/// is stamped when it is sent, so its time is left out.
fn comparable(frame: &Frame) -> (Option<String>, Value) {
    let mut data = frame.data.clone();
    if data["type"] == "RUN_STARTED" {
        data.as_object_mut().unwrap().remove("timestamp");
    }
    (frame.id.clone(), data)
}

/// The approval's interrupt, from a run's last frame.
fn interrupt_of(frames: &[Frame]) -> Value {
    let finished = &frames.last().unwrap().data;
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    finished["outcome"]["interrupts"][0].clone()
}

#[tokio::test]
async fn a_run_continues_after_every_event_with_no_gap_and_no_repeat() {
    let server = TestServer::memory().await;
    let body = input("agui-resume", "run-1", "needs approval");
    let whole = frames(run(&server, TOKEN_A, &body, None).await, usize::MAX).await;
    assert_eq!(types(&whole)[0], "RUN_STARTED");
    let interrupt = interrupt_of(&whole);
    for (at, frame) in whole.iter().enumerate() {
        let id = frame.id.as_ref().expect("every frame has an id");
        let rest = frames(run(&server, TOKEN_A, &body, Some(id)).await, usize::MAX).await;
        let expected: Vec<_> = whole[at + 1..].iter().map(comparable).collect();
        let got: Vec<_> = rest.iter().map(comparable).collect();
        assert_eq!(got, expected, "after id {id}");
    }
    // A retry without a cursor gets the whole run again, and runs nothing again.
    let again = frames(run(&server, TOKEN_A, &body, None).await, usize::MAX).await;
    assert_eq!(types(&again), types(&whole));
    let read = server.read(TOKEN_A, "agui-resume").await;
    let users = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 1);

    // The answer, as a resume entry: the run shows the rest of the request, and so does a
    // reconnection after each of its events.
    let resume = json!({"threadId": "agui-resume", "runId": "run-2", "messages": [],
        "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": true}}]});
    let second = frames(run(&server, TOKEN_A, &resume, None).await, usize::MAX).await;
    let kinds = types(&second);
    assert!(kinds.contains(&"TOOL_CALL_RESULT"), "{kinds:?}");
    assert_eq!(*kinds.last().unwrap(), "RUN_FINISHED");
    for (at, frame) in second.iter().enumerate() {
        let id = frame.id.as_ref().expect("every frame has an id");
        let rest = frames(run(&server, TOKEN_A, &resume, Some(id)).await, usize::MAX).await;
        let expected: Vec<_> = second[at + 1..].iter().map(comparable).collect();
        let got: Vec<_> = rest.iter().map(comparable).collect();
        assert_eq!(got, expected, "after id {id}");
    }
}

#[tokio::test]
async fn a_thread_stream_continues_after_every_event_and_starts_from_a_snapshot() {
    let server = TestServer::memory().await;
    let first = frames(
        run(
            &server,
            TOKEN_A,
            &input("agui-thread", "r-1", "demo:deltas=3 one"),
            None,
        )
        .await,
        usize::MAX,
    )
    .await;
    let interrupted = frames(
        run(
            &server,
            TOKEN_A,
            &input("agui-thread", "r-2", "needs approval"),
            None,
        )
        .await,
        usize::MAX,
    )
    .await;
    let interrupt = interrupt_of(&interrupted);
    let resume = json!({"threadId": "agui-thread", "runId": "r-3", "messages": [],
        "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": false, "reason": "not now"}}]});
    let last = frames(run(&server, TOKEN_A, &resume, None).await, usize::MAX).await;
    assert!(!first.is_empty() && !last.is_empty());

    // From the start: three runs (the request, its stretch up to the approval, and after it).
    let whole = thread(&server, TOKEN_A, "agui-thread", Some("0")).await;
    let finishes = |frames: &[Frame]| {
        types(frames)
            .iter()
            .filter(|t| **t == "RUN_FINISHED")
            .count()
    };
    let mut all = Vec::new();
    let mut reader = SseReader::new(whole);
    while finishes(&all) < 3 {
        all.push(reader.next_event().await.expect("a frame"));
    }
    let runs: Vec<&str> = all
        .iter()
        .filter(|f| f.data["type"] == "RUN_STARTED")
        .map(|f| f.data["runId"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 3);
    assert_ne!(
        runs[1], runs[2],
        "the stretch after an approval is a run of its own"
    );
    let denied = all
        .iter()
        .any(|f| f.data["type"] == "TEXT_MESSAGE_CONTENT" && f.data["delta"] == "denied");
    assert!(denied, "the denial reached the model");
    for (at, frame) in all.iter().enumerate() {
        let id = frame.id.as_ref().expect("every frame has an id");
        let rest = frames(
            thread(&server, TOKEN_A, "agui-thread", Some(id)).await,
            all.len() - at - 1,
        )
        .await;
        let got: Vec<_> = rest.iter().map(comparable).collect();
        let expected: Vec<_> = all[at + 1..].iter().map(comparable).collect();
        assert_eq!(got, expected, "after id {id}");
    }

    // Without a cursor: a snapshot run whose last frame carries the head.
    let snapshot = frames(thread(&server, TOKEN_A, "agui-thread", None).await, 3).await;
    assert_eq!(
        types(&snapshot),
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    let messages = snapshot[1].data["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant"
        ]
    );
    assert!(messages[3]["toolCalls"][0]["function"]["name"] == "demo_approval");
    assert_eq!(snapshot[2].id.as_deref(), all.last().unwrap().id.as_deref());
}

#[tokio::test]
async fn a_cursor_older_than_the_retained_log_gets_a_snapshot() {
    let mut config = memory_config();
    config.max_events_per_session = 8;
    let server = TestServer::start(config).await;
    // The run's own stream ends when retention passes it (as a v1 stream does): wait for the
    // answer in the transcript instead.
    let started = frames(
        run(
            &server,
            TOKEN_A,
            &input("agui-stale", "r-1", "demo:deltas=20 long"),
            None,
        )
        .await,
        usize::MAX,
    )
    .await;
    assert_eq!(types(&started)[0], "RUN_STARTED");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while server.read(TOKEN_A, "agui-stale").await["messages"]
        .as_array()
        .unwrap()
        .len()
        < 2
    {
        assert!(tokio::time::Instant::now() < deadline, "the request ends");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stale = frames(thread(&server, TOKEN_A, "agui-stale", Some("1")).await, 3).await;
    assert_eq!(
        types(&stale),
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    let text = &stale[1].data["messages"][1]["content"];
    assert!(
        text.as_str().unwrap().starts_with("delta-1 delta-2"),
        "{text}"
    );
    // A retry of a run whose request retention has dropped is refused, never left waiting.
    let short = input("agui-stale", "r-2", "demo:deltas=1 short");
    let finished = frames(run(&server, TOKEN_A, &short, None).await, usize::MAX).await;
    assert_eq!(*types(&finished).last().unwrap(), "RUN_FINISHED");
    let later = frames(
        run(
            &server,
            TOKEN_A,
            &input("agui-stale", "r-3", "demo:deltas=20 later"),
            None,
        )
        .await,
        1,
    )
    .await;
    assert_eq!(types(&later), ["RUN_STARTED"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while server.read(TOKEN_A, "agui-stale").await["messages"]
        .as_array()
        .unwrap()
        .len()
        < 6
    {
        assert!(tokio::time::Instant::now() < deadline, "the request ends");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let retried = run(&server, TOKEN_A, &short, None).await;
    assert_eq!(retried.status().as_u16(), 409);
    // A cursor past the head is refused before the stream, as on the v1 route.
    let ahead = thread(&server, TOKEN_A, "agui-stale", Some("999")).await;
    assert_eq!(ahead.status().as_u16(), 409);
}

#[tokio::test]
async fn another_tenant_neither_sees_nor_answers_a_thread() {
    let server = TestServer::memory().await;
    let interrupted = frames(
        run(
            &server,
            TOKEN_A,
            &input("agui-private", "r-1", "needs approval"),
            None,
        )
        .await,
        usize::MAX,
    )
    .await;
    let interrupt = interrupt_of(&interrupted);
    let head = server.read(TOKEN_A, "agui-private").await["recovery"]["lastEventSequence"].clone();

    let seen = thread(&server, TOKEN_B, "agui-private", None).await;
    assert_eq!(seen.status().as_u16(), 404);
    let resume = json!({"threadId": "agui-private", "runId": "b-1", "messages": [],
        "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": true}}]});
    let answered = run(&server, TOKEN_B, &resume, None).await;
    assert_eq!(answered.status().as_u16(), 400);
    // The same thread id names the other tenant's own thread: A's is untouched.
    let own = frames(
        run(
            &server,
            TOKEN_B,
            &input("agui-private", "b-2", "demo:deltas=1 mine"),
            None,
        )
        .await,
        usize::MAX,
    )
    .await;
    assert_eq!(*types(&own).last().unwrap(), "RUN_FINISHED");
    let after = server.read(TOKEN_A, "agui-private").await["recovery"]["lastEventSequence"].clone();
    assert_eq!(after, head);
    // A's approval is still A's to answer.
    let resume_a = json!({"threadId": "agui-private", "runId": "r-2", "messages": [],
        "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": true}}]});
    let finished = frames(run(&server, TOKEN_A, &resume_a, None).await, usize::MAX).await;
    assert!(types(&finished).contains(&"TOOL_CALL_RESULT"));
}

#[tokio::test]
async fn runs_keep_the_protocols_scopes_and_refuse_bad_input_before_streaming() {
    let server = TestServer::memory().await;
    for (token, status) in [(TOKEN_NO_READ, 403), (TOKEN_READ_ONLY, 403)] {
        let response = run(&server, token, &input("agui-scopes", "r-1", "hi"), None).await;
        assert_eq!(response.status().as_u16(), status);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "FORBIDDEN", "{body}");
    }
    let unauthenticated = server
        .client
        .post(format!("{}/ag-ui", server.base))
        .json(&input("t", "r", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status().as_u16(), 401);
    for bad in [
        json!({"runId": "r", "messages": []}),
        json!({"threadId": "has space", "runId": "r", "messages": [{"id": "u", "role": "user", "content": "x"}]}),
        json!({"threadId": "t", "runId": "r", "messages": [{"id": "a", "role": "assistant", "content": "x"}]}),
    ] {
        let response = run(&server, TOKEN_A, &bad, None).await;
        assert_eq!(response.status().as_u16(), 400, "{bad}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "INVALID_COMMAND");
    }
    let bad_cursor = run(
        &server,
        TOKEN_A,
        &input("agui-scopes", "r-2", "hi"),
        Some("x1"),
    )
    .await;
    assert_eq!(bad_cursor.status().as_u16(), 400);
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(
        list["sessions"],
        json!([]),
        "nothing was created by a refused run"
    );
}

#[tokio::test]
async fn the_stream_of_a_closed_thread_ends_after_what_it_has() {
    let server = TestServer::memory().await;
    let done = frames(
        run(
            &server,
            TOKEN_A,
            &input("agui-closed", "c-1", "demo:deltas=2 bye"),
            None,
        )
        .await,
        usize::MAX,
    )
    .await;
    assert_eq!(*types(&done).last().unwrap(), "RUN_FINISHED");
    server
        .ok(
            TOKEN_A,
            "session.close",
            json!({"sessionId": "agui-closed"}),
        )
        .await;
    // A snapshot, then the end of the body: nothing more can happen on a closed thread.
    let snapshot = frames(
        thread(&server, TOKEN_A, "agui-closed", None).await,
        usize::MAX,
    )
    .await;
    assert_eq!(
        types(&snapshot),
        ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    );
    let replay = frames(
        thread(&server, TOKEN_A, "agui-closed", Some("0")).await,
        usize::MAX,
    )
    .await;
    assert_eq!(*types(&replay).last().unwrap(), "RUN_FINISHED");
    // A run on a closed thread is refused before any stream byte.
    let refused = run(&server, TOKEN_A, &input("agui-closed", "c-2", "more"), None).await;
    assert_eq!(refused.status().as_u16(), 404);
}
