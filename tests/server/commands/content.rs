//! User content is data: Unicode hazards (FUZZ-03) and content that looks like our own internal
//! objects or event types (FUZZ-08) are either refused with 400 or stored and replayed byte for
//! byte, across a restart, on JSONL and (in the PostgreSQL rerun) on PostgreSQL.

use crate::support::*;
use serde_json::{Value, json};

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
    let read = server.read(TOKEN_A, &session).await;
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
    let again = restarted.read(TOKEN_A, &session).await;
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
        let after = events
            .last()
            .map_or(0, |e: &Value| e["sequence"].as_u64().unwrap());
        events.extend(server.run_request(TOKEN_A, &session, input, after).await.1);
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

/// Sends `data` spliced raw into a command body (numbers JSON text cannot carry through
/// `serde_json::Value`, such as `1e400` or `NaN`); returns (status, body).
async fn raw_command(server: &TestServer, kind: &str, data: &str) -> (u16, Value) {
    let id = agent_runtime::ids::nanoid();
    let body =
        format!(r#"{{"protocolVersion":1,"commandId":"{id}","type":"{kind}","data":{data}}}"#);
    let (status, _, body) = server.post_raw(TOKEN_A, body.into_bytes()).await;
    (status, body)
}

/// FUZZ-05: number edge cases in every numeric field of the protocol get a typed 400 and run
/// nothing; nothing wraps around (u64::MAX + 1 is not 0, a cursor at the largest safe integer
/// is ahead of the head, not back at the start). JSON numbers follow the reference client's
/// JavaScript semantics: `1e2` and `100.0` are the integer 100.
#[tokio::test]
async fn fuzz_05_number_edge_cases_get_a_typed_400_and_nothing_wraps() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let head = |read: &Value| read["recovery"]["lastEventSequence"].clone();
    let before = server.read(TOKEN_A, &session).await;

    let not_json = [
        "1e400",
        "-1e400",
        "NaN",
        "Infinity",
        "-Infinity",
        "0x10",
        "+1",
        ".5",
        "01",
    ];
    let invalid = [
        "0",
        "-1",
        "-0",
        "1.5",
        "1e-3",
        "18446744073709551615",
        "9007199254740993",
        "\"10\"",
        "null",
        "true",
        "[1]",
    ];
    let expect_400 = |field: &str, value: &str, status: u16, body: &Value, message: &str| {
        assert_eq!(status, 400, "{field}={value}: {body}");
        assert_eq!(body["error"]["code"], "INVALID_COMMAND", "{field}={value}");
        assert_eq!(body["error"]["message"], message, "{field}={value}");
    };
    // Numbers parsing would not keep exactly are refused before any schema (ATK-07).
    let inexact = [
        "18446744073709551616",
        "-9223372036854775809",
        "1.00000000000000000001",
    ];
    for value in not_json.iter().chain(&invalid).chain(&inexact) {
        let message = if not_json.contains(value) {
            "Command body is not valid JSON"
        } else if inexact.contains(value) {
            "Command body has a number that cannot be represented exactly"
        } else {
            "Command validation failed"
        };
        let (status, body) =
            raw_command(&server, "session.list", &format!(r#"{{"limit":{value}}}"#)).await;
        expect_400("limit", value, status, &body, message);
        let data = format!(r#"{{"sessionId":"{session}","input":"hi","maxTurns":{value}}}"#);
        let (status, body) = raw_command(&server, "input.submit", &data).await;
        expect_400("maxTurns", value, status, &body, message);
    }
    for value in ["101", "100.5", "1e3"] {
        let (status, body) =
            raw_command(&server, "session.list", &format!(r#"{{"limit":{value}}}"#)).await;
        expect_400("limit", value, status, &body, "Command validation failed");
    }
    // protocolVersion: only the number 1 (as JavaScript reads it).
    for value in ["2", "0", "-0", "1.5", "-1", "18446744073709551615"] {
        let id = agent_runtime::ids::nanoid();
        let body = format!(
            r#"{{"protocolVersion":{value},"commandId":"{id}","type":"session.list","data":{{}}}}"#
        );
        let (status, _, body) = server.post_raw(TOKEN_A, body.into_bytes()).await;
        assert_eq!(status, 400, "protocolVersion={value}: {body}");
        assert_eq!(
            body["error"]["code"], "PROTOCOL_VERSION_UNSUPPORTED",
            "{value}"
        );
    }
    for value in ["1e400", "NaN"] {
        let body = format!(
            r#"{{"protocolVersion":{value},"commandId":"x","type":"session.list","data":{{}}}}"#
        );
        let (status, _, body) = server.post_raw(TOKEN_A, body.into_bytes()).await;
        expect_400(
            "protocolVersion",
            value,
            status,
            &body,
            "Command body is not valid JSON",
        );
    }
    // The JavaScript spellings of integers are integers.
    for value in ["1e2", "100.0", "1E1"] {
        let (status, body) =
            raw_command(&server, "session.list", &format!(r#"{{"limit":{value}}}"#)).await;
        assert_eq!(status, 200, "limit={value}: {body}");
    }

    // Nothing above ran: the session's log did not move.
    let after = server.read(TOKEN_A, &session).await;
    assert_eq!(
        head(&after),
        head(&before),
        "no invalid submission started a request"
    );

    // Cursors: the largest safe integer is ahead of the head, one more is not a cursor at all;
    // neither wraps to a replay from the start.
    for (cursor, status, code) in [
        ("9007199254740991", 409, "STALE_CURSOR"),
        ("9007199254740992", 400, "INVALID_COMMAND"),
        ("18446744073709551615", 400, "INVALID_COMMAND"),
        ("18446744073709551616", 400, "INVALID_COMMAND"),
        ("-0", 400, "INVALID_COMMAND"),
    ] {
        for (query, header) in [
            (format!("?after={cursor}"), None),
            (String::new(), Some(cursor)),
        ] {
            let response = server.events(TOKEN_A, &session, &query, header).await;
            assert_eq!(response.status().as_u16(), status, "cursor {cursor}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], code, "cursor {cursor}: {body}");
        }
    }
    server.stop().await;
}
