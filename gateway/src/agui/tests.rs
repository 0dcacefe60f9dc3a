//! The projection alone, on logs written by hand: AG-UI's open/close discipline holds whatever the
//! log does, every frame carries a cursor, and a run waiting for its input follows the request
//! that takes it.

use agent_runtime::protocol::EventEnvelope;
use serde_json::{Value, json};

use super::projection::{Projector, RunStart};
use crate::projected::{Cursor, Projection};

fn event(sequence: u64, request: Option<&str>, kind: &str, data: Value) -> EventEnvelope {
    let mut envelope = json!({
        "protocolVersion": 1,
        "eventId": format!("e-{sequence}"),
        "sequence": sequence,
        "sessionId": "t-1",
        "occurredAt": "2026-01-01T00:00:00.000Z",
        "type": kind,
        "data": data,
    });
    if let Some(request) = request {
        envelope["requestId"] = json!(request);
    }
    serde_json::from_value(envelope).unwrap()
}

fn stream(sequence: u64, request: &str, data: Value) -> EventEnvelope {
    let mut data = data;
    data["sessionId"] = json!("t-1");
    event(sequence, Some(request), "session.stream", data)
}

/// What AG-UI's verifier checks: items opened once and closed before the run's end, nothing
/// after the terminal event.
fn check_discipline(types: &[(String, Option<String>)]) {
    let mut open: Vec<String> = Vec::new();
    let mut running = false;
    for (kind, id) in types {
        let id = id.clone().unwrap_or_default();
        match kind.as_str() {
            "RUN_STARTED" => {
                assert!(!running, "a run started inside a run");
                running = true;
            }
            "RUN_FINISHED" | "RUN_ERROR" => {
                assert!(open.is_empty(), "{open:?} open at the end of a run");
                running = false;
            }
            _ => assert!(running, "{kind} outside a run"),
        }
        let opens = ["TEXT_MESSAGE_START", "STEP_STARTED", "REASONING_START"];
        let closes = ["TEXT_MESSAGE_END", "STEP_FINISHED", "REASONING_END"];
        if opens.contains(&kind.as_str()) {
            assert!(!open.contains(&id), "{id} opened twice");
            open.push(id);
        } else if closes.contains(&kind.as_str()) {
            let at = open
                .iter()
                .position(|o| *o == id)
                .expect("closed but not open");
            open.remove(at);
        }
    }
}

fn item(event: &Value) -> (String, Option<String>) {
    let kind = event["type"].as_str().unwrap().to_owned();
    let id = ["messageId", "stepName"]
        .iter()
        .find_map(|name| event[name].as_str().map(str::to_owned));
    (kind, id)
}

#[test]
fn a_run_interrupted_mid_turn_closes_everything_and_its_continuation_opens_nothing_twice() {
    let log = vec![
        stream(1, "r", json!({"type": "turn_start", "turn": 1})),
        stream(2, "r", json!({"type": "thinking", "delta": "hm"})),
        stream(3, "r", json!({"type": "content", "delta": "I will"})),
        stream(
            4,
            "r",
            json!({"type": "tool_use", "id": "c1", "name": "Bash", "input": {"command": "ls"}}),
        ),
        event(
            5,
            None,
            "permission.requested",
            json!({"permissionRequestId": "p1", "toolName": "Bash",
            "input": {}, "title": "t", "message": "m", "affectedPaths": [], "risks": []}),
        ),
        stream(
            6,
            "r",
            json!({"type": "tool_result", "id": "c1", "name": "Bash", "output": "a b"}),
        ),
        stream(7, "r", json!({"type": "turn_end", "turn": 1})),
        stream(8, "r", json!({"type": "turn_start", "turn": 2})),
        stream(9, "r", json!({"type": "content", "delta": "done"})),
        stream(
            10,
            "r",
            json!({"type": "usage", "usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5, "maxContextTokens": 9}}),
        ),
        stream(
            11,
            "r",
            json!({"type": "result", "subtype": "success", "content": "done"}),
        ),
    ];
    let mut thread = Projector::thread("t-1");
    let frames: Vec<_> = log.iter().flat_map(|event| thread.feed(event)).collect();
    assert!(
        frames.iter().all(|frame| frame.id.is_some()),
        "every frame has a cursor"
    );
    let items: Vec<_> = frames.iter().map(|frame| item(&frame.event)).collect();
    check_discipline(&items);
    let runs: Vec<&Value> = frames
        .iter()
        .map(|frame| &frame.event)
        .filter(|event| event["type"] == "RUN_STARTED")
        .map(|event| &event["runId"])
        .collect();
    assert_eq!(runs, [&json!("r"), &json!("r:5")]);
    let interrupt = frames
        .iter()
        .find(|frame| frame.event["outcome"]["type"] == "interrupt")
        .unwrap();
    assert_eq!(interrupt.event["outcome"]["interrupts"][0]["id"], "5:p1");
    assert_eq!(
        interrupt.event["outcome"]["interrupts"][0]["toolCallId"],
        "c1"
    );
    let last = &frames.last().unwrap().event;
    assert_eq!(last["usage"][0]["totalTokens"], 5);
    // Frames made from one event: `SEQ-1:K` before the last, which carries the sequence.
    let of_three: Vec<_> = frames
        .iter()
        .filter(|frame| {
            frame.id.is_some_and(|id| {
                (id.after, id.frames > 0) == (3, false) || (id.after, id.frames > 0) == (2, true)
            })
        })
        .map(|frame| frame.id.unwrap())
        .collect();
    assert_eq!(
        of_three,
        [
            Cursor {
                after: 2,
                frames: 1
            },
            Cursor {
                after: 2,
                frames: 2
            },
            Cursor {
                after: 2,
                frames: 3
            },
            Cursor::at(3)
        ]
    );
}

#[test]
fn a_run_whose_request_ends_before_taking_its_input_follows_the_next_request() {
    let start = RunStart::Input {
        request_id: "r1".into(),
        input_id: "i2".into(),
    };
    let (mut run, started) = Projector::single("t-1", "run-2", start, 1);
    assert_eq!(started["type"], "RUN_STARTED");
    let log = [
        stream(1, "r1", json!({"type": "content", "delta": "long"})),
        stream(
            2,
            "r1",
            json!({"type": "error", "message": "aborted", "code": "REQUEST_ABORTED"}),
        ),
        stream(
            3,
            "r1",
            json!({"type": "result", "subtype": "error", "error": "aborted"}),
        ),
        stream(4, "r2", json!({"type": "turn_start", "turn": 1})),
        stream(
            5,
            "r2",
            json!({"type": "content", "delta": "and also this"}),
        ),
        stream(6, "r2", json!({"type": "turn_end", "turn": 1})),
        stream(7, "r2", json!({"type": "result", "subtype": "success"})),
    ];
    let frames: Vec<_> = log.iter().flat_map(|event| run.feed(event)).collect();
    let kinds: Vec<&str> = frames
        .iter()
        .map(|f| f.event["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED"
        ]
    );
    assert!(run.is_finished());
}

#[test]
fn a_run_waiting_for_its_input_ends_when_the_session_closes() {
    let start = RunStart::Input {
        request_id: "r1".into(),
        input_id: "i2".into(),
    };
    let (mut run, _) = Projector::single("t-1", "run-2", start, 1);
    let closed = event(1, None, "session.closed", json!({"reason": "user"}));
    let frames = run.feed(&closed);
    assert_eq!(frames.last().unwrap().event["type"], "RUN_ERROR");
    assert_eq!(frames.last().unwrap().event["code"], "SESSION_CLOSED");
    assert!(run.is_finished());
}

#[test]
fn cursors_are_a_sequence_or_a_sequence_and_a_frame_count() {
    assert_eq!(Cursor::parse("17"), Some(Cursor::at(17)));
    assert_eq!(
        Cursor::parse("16:2"),
        Some(Cursor {
            after: 16,
            frames: 2
        })
    );
    for bad in ["", ":1", "16:", "16:0", "16:x", "x", "-1", "1:2:3", "16: 1"] {
        assert_eq!(Cursor::parse(bad), None, "{bad:?}");
    }
    assert_eq!(
        Cursor {
            after: 16,
            frames: 2
        }
        .to_string(),
        "16:2"
    );
}
