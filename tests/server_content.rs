//! User content is data: Unicode hazards (FUZZ-03) and content that looks like our own internal
//! objects or event types (FUZZ-08) are either refused with 400 or stored and replayed byte for
//! byte, across a restart, on JSONL and (in the PostgreSQL rerun) on PostgreSQL.

mod support;

use serde_json::{Value, json};
use support::*;

/// Inputs whose bytes must survive unchanged: NFC and NFD forms of one word (two different
/// strings), an RTL override, a zero-width space, NUL, a BOM, an emoji with a skin-tone modifier,
/// and text that looks like a serialized secret reference or one of our event types.
const INPUTS: [&str; 10] = [
    "caf\u{e9}",
    "cafe\u{301}",
    "\u{202e}gnp.exe",
    "zero\u{200b}width",
    "nul\u{0}byte",
    "\u{feff}bom first",
    "thumbs \u{1f44d}\u{1f3fd}",
    r#"{"lc":1,"type":"secret","id":["OPENAI_API_KEY"]}"#,
    r#"{"__type":"Secret","env":"ANTHROPIC_API_KEY"}"#,
    "session.closed",
];

/// Metadata made of the same hazards, and keys our own records use.
fn hazardous_metadata() -> Value {
    json!({
        "type": "session.closed",
        "status": "closed",
        "lc": { "lc": 1, "type": "secret", "id": ["OPENAI_API_KEY"] },
        "__type": "Secret",
        "env": "ANTHROPIC_API_KEY",
        "names": ["caf\u{e9}", "cafe\u{301}", "\u{202e}gnp.exe", "nul\u{0}"],
    })
}

/// Every `data:` line of the session's stream from the start through its last result.
async fn raw_stream(server: &TestServer, session: &str, results: usize) -> Vec<String> {
    let response = server.events(TOKEN_A, session, "?after=0", None).await;
    assert_eq!(response.status().as_u16(), 200);
    let mut reader = SseReader::new(response);
    let mut lines = Vec::new();
    let mut seen = 0;
    while seen < results {
        let frame = reader.next_event().await.expect("the stream goes on");
        seen += usize::from(is_result(&frame.data));
        lines.push(serde_json::to_string(&frame.data).unwrap());
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_03_unicode_hazards_are_refused_or_round_trip_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let config = durable_config(dir.path()).await;
    let server = TestServer::start(config.clone()).await;

    // A lone surrogate is not Unicode: refused before anything runs, whatever the field.
    for body in [
        r#"{"protocolVersion":1,"commandId":"lone","type":"session.create","data":{"metadata":{"k":"\ud800"}}}"#,
        r#"{"protocolVersion":1,"commandId":"lone","type":"session.create","data":{"metadata":{"\udfff":1}}}"#,
    ] {
        let (status, _, refused) = server.post_raw(TOKEN_A, body.as_bytes().to_vec()).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["code"], "INVALID_COMMAND");
    }

    let created = server
        .ok(
            TOKEN_A,
            "session.create",
            json!({ "metadata": hazardous_metadata() }),
        )
        .await;
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(created["session"]["metadata"], hazardous_metadata());
    assert_eq!(created["session"]["status"], "active");
    for (n, input) in INPUTS.iter().enumerate() {
        server.submit(TOKEN_A, &session, input).await;
        let events = server
            .collect_events(TOKEN_A, &session, 0, |e| {
                is_result(e)
                    && e["data"]["content"]
                        .as_str()
                        .is_some_and(|c| c.contains(input))
            })
            .await;
        let answer = events.last().unwrap()["data"]["content"].as_str().unwrap();
        assert_eq!(answer, format!("[demo] You said: {input}"), "input {n}");
    }
    let read = server
        .ok(TOKEN_A, "session.read", json!({ "sessionId": session }))
        .await;
    let users: Vec<&str> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(users, INPUTS, "every input kept as sent, NFC and NFD apart");
    let stream = raw_stream(&server, &session, INPUTS.len()).await;
    server.stop().await;

    // After a restart (a JSONL reload, or a new process on the same database): byte-identical.
    let restarted = TestServer::start(config).await;
    restarted
        .ok(TOKEN_A, "session.resume", json!({ "sessionId": session }))
        .await;
    let again = restarted
        .ok(TOKEN_A, "session.read", json!({ "sessionId": session }))
        .await;
    assert_eq!(again["messages"], read["messages"]);
    assert_eq!(again["session"]["metadata"], hazardous_metadata());
    assert_eq!(
        again["session"]["status"], "active",
        "content changed no state"
    );
    assert_eq!(
        raw_stream(&restarted, &session, INPUTS.len()).await,
        stream,
        "the replayed stream is byte-identical"
    );
    restarted.stop().await;
}

/// FUZZ-08: text and metadata shaped like a secret reference or an event type stay opaque data:
/// no event changes type, no session changes state, nothing is looked up.
#[tokio::test]
async fn fuzz_08_content_shaped_like_internal_objects_stays_data() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let mut events = Vec::new();
    for input in &INPUTS[7..] {
        // One request per input: each waits for the previous answer.
        let submitted = server.submit(TOKEN_A, &session, input).await;
        let request = submitted["requestId"].as_str().unwrap().to_owned();
        let after = events
            .last()
            .map_or(0, |e: &Value| e["sequence"].as_u64().unwrap());
        events.extend(
            server
                .collect_events(TOKEN_A, &session, after, |e| {
                    is_result(e) && e["requestId"] == request.as_str()
                })
                .await,
        );
    }
    assert!(
        events.iter().all(|e| e["type"] == "session.stream"),
        "no event became another type"
    );
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(list["sessions"][0]["status"], "active");
    let echoed: Vec<&str> = events
        .iter()
        .filter(|e| is_result(e))
        .map(|e| e["data"]["content"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = INPUTS[7..]
        .iter()
        .map(|input| format!("[demo] You said: {input}"))
        .collect();
    assert_eq!(echoed, expected, "echoed verbatim, nothing resolved");
    server.stop().await;
}
