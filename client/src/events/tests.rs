use agent_runtime::protocol::ErrorCode;
use serde_json::json;

use super::*;

fn frame(session_id: &str, sequence: u64) -> String {
    json!({
        "protocolVersion": 1,
        "eventId": format!("event-{sequence}"),
        "sequence": sequence,
        "sessionId": session_id,
        "occurredAt": "2026-01-01T00:00:00.000Z",
        "type": "session.stream",
        "data": { "type": "content", "sessionId": session_id, "delta": "hi" }
    })
    .to_string()
}

#[test]
fn a_valid_frame_becomes_a_typed_event() {
    let event = check_event(&frame("s-1", 3), "s-1", 2).unwrap();
    assert_eq!(event.sequence(), 3);
    assert!(matches!(
        event.stream_message(),
        Some(StreamMessage::Content { delta, .. }) if delta == "hi"
    ));
    assert_eq!(event.cursor().event_id, "event-3");
    assert!(!event.is_request_end());
}

#[test]
fn an_event_of_another_session_fails_closed() {
    let error = check_event(&frame("s-2", 1), "s-1", 0).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidCommand);
    assert_eq!(error.status, Some(502));
    assert!(!error.retryable);
}

#[test]
fn a_sequence_not_above_the_last_fails_closed() {
    for sequence in [1, 2] {
        let error = check_event(&frame("s-1", sequence), "s-1", 2).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidCommand);
        assert_eq!(error.status, Some(502));
        assert!(!error.retryable);
        assert!(error.message.contains("non-monotonic"), "{}", error.message);
    }
}

#[test]
fn an_invalid_frame_is_retryable_like_a_network_error() {
    let mut value: serde_json::Value = serde_json::from_str(&frame("s-1", 1)).unwrap();
    value["extra"] = json!(true);
    for data in [value.to_string(), "not json".to_owned()] {
        let error = check_event(&data, "s-1", 0).unwrap_err();
        assert_eq!(error.kind, ErrorKind::InvalidResponse);
        assert_eq!(error.status, Some(502));
        assert!(error.retryable);
    }
}

#[test]
fn cursors_convert_into_start_positions() {
    assert_eq!(After::from(7), After::Sequence(7));
    let cursor = EventCursor {
        session_id: "s-1".into(),
        sequence: 4,
        event_id: "e".into(),
    };
    assert!(cursor.is_valid());
    assert!(
        !EventCursor {
            sequence: 0,
            ..cursor.clone()
        }
        .is_valid()
    );
    assert_eq!(After::from(cursor.clone()), After::Cursor(cursor));
}
