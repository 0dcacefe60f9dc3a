//! The protocol-schema behaviours of docs/protocol.md §12, items 45 to 49 (`protocol.test.ts`).

use agent_runtime::protocol::command::{CommandKind, SubmitInputData};
use agent_runtime::protocol::content::{ContentPart, ImageUrl, Priority, UserContent};
use agent_runtime::protocol::result::InitializeResult;
use agent_runtime::protocol::{
    CommandResult, ErrorCode, EventPayload, ResultData, StreamMessage, parse_command,
    parse_command_result, parse_event,
};
use serde_json::{Value, json};

fn bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("JSON")
}

#[test]
fn item_45_submit_with_mixed_parts_and_next_priority_parses() {
    let body = json!({
        "protocolVersion": 1,
        "commandId": "submit-1",
        "type": "input.submit",
        "data": {
            "sessionId": "session-1",
            "input": [
                {"type": "text", "text": "Describe this"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
            ],
            "priority": "next"
        }
    });
    let command = parse_command(&bytes(&body)).expect("mixed parts parse");
    let expected = CommandKind::SubmitInput(SubmitInputData {
        session_id: "session-1".into(),
        input: UserContent::Parts(vec![
            ContentPart::Text {
                text: "Describe this".into(),
                provider_options: None,
            },
            ContentPart::ImageUrl {
                image_url: ImageUrl {
                    url: "https://example.com/a.png".into(),
                },
            },
        ]),
        priority: Some(Priority::Next),
        expected_request_id: None,
        max_turns: None,
    });
    assert_eq!(command.command_id, "submit-1");
    assert_eq!(command.kind, expected);
    assert_eq!(command.to_value(), body);
}

#[test]
fn item_46_bad_version_unsafe_command_id_and_extra_key_are_rejected() {
    let valid =
        json!({"protocolVersion": 1, "commandId": "c-1", "type": "session.list", "data": {}});
    assert!(parse_command(&bytes(&valid)).is_ok());

    let mut version_2 = valid.clone();
    version_2["protocolVersion"] = json!(2);
    // Decision P7: a wrong protocolVersion has its own code (still HTTP 400).
    let error = parse_command(&bytes(&version_2)).unwrap_err();
    assert_eq!(error.code, ErrorCode::ProtocolVersionUnsupported);
    assert_eq!(error.http_status(), 400);

    let mut unsafe_id = valid.clone();
    unsafe_id["commandId"] = json!("../unsafe");
    let mut extra_key = valid;
    extra_key["extra"] = json!(true);
    for body in [unsafe_id, extra_key] {
        let error = parse_command(&bytes(&body)).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidCommand, "{body}");
        assert_eq!(error.message, "Command validation failed");
        assert_eq!(error.http_status(), 400);
    }
}

#[test]
fn item_47_success_and_failure_results_parse_including_retry_after() {
    let success = json!({"protocolVersion": 1, "commandId": "c-1", "ok": true,
        "data": {"sessionId": "session-1", "aborted": true}});
    let parsed = parse_command_result(&bytes(&success)).expect("success parses");
    assert!(parsed.is_ok());
    assert_eq!(parsed.command_id(), "c-1");
    assert_eq!(parsed.to_value(), success);

    let failure = json!({"protocolVersion": 1, "commandId": "c-2", "ok": false, "error": {
        "code": "COMMAND_IN_PROGRESS", "message": "busy", "retryable": true, "retryAfterMs": 250}});
    let parsed = parse_command_result(&bytes(&failure)).expect("failure parses");
    let CommandResult::Failure { command_id, error } = &parsed else {
        panic!("expected a failure: {parsed:?}");
    };
    assert_eq!(command_id, "c-2");
    assert_eq!(error.code, ErrorCode::CommandInProgress);
    assert!(error.retryable);
    assert_eq!(error.retry_after_ms, Some(250));
    assert_eq!(parsed.http_status(), 409);
    assert_eq!(parsed.retry_after_seconds(), Some(1));
    assert_eq!(parsed.to_value(), failure);
}

#[test]
fn item_48_initialize_server_time_must_be_an_iso_datetime() {
    let valid = InitializeResult::new("2026-08-25T00:00:00.000Z").to_data();
    let parsed = InitializeResult::from_data(&valid).expect("valid serverTime parses");
    assert_eq!(parsed.server_time, "2026-08-25T00:00:00.000Z");
    let mut with_offset = valid.clone();
    with_offset.insert("serverTime".into(), json!("2026-08-25T02:00:00+02:00"));
    assert!(InitializeResult::from_data(&with_offset).is_ok());

    let mut invalid = valid;
    invalid.insert("serverTime".into(), json!("invalid"));
    let error = InitializeResult::from_data(&invalid).unwrap_err();
    assert_eq!(error.code, ErrorCode::InternalError);
}

fn stream_event(data: Value) -> Value {
    json!({
        "protocolVersion": 1,
        "eventId": "evt-1",
        "sequence": 1,
        "sessionId": "session-1",
        "requestId": "request-1",
        "occurredAt": "2026-08-25T00:00:00.000Z",
        "type": "session.stream",
        "data": data,
    })
}

#[test]
fn item_49_event_envelope_strictness_and_session_match() {
    let valid = stream_event(json!({"type": "content", "sessionId": "session-1", "delta": "ok"}));
    let event = parse_event(&bytes(&valid)).expect("envelope parses");
    assert_eq!(event.sequence, 1);
    assert_eq!(
        EventPayload::from_event(&event).unwrap(),
        EventPayload::Stream(StreamMessage::content("session-1", "ok"))
    );

    let mut extra_key = valid.clone();
    extra_key["extra"] = json!(1);
    assert!(parse_event(&bytes(&extra_key)).is_err());

    let missing_delta = stream_event(json!({"type": "content", "sessionId": "session-1"}));
    assert!(parse_event(&bytes(&missing_delta)).is_err());

    let other_session =
        stream_event(json!({"type": "content", "sessionId": "session-2", "delta": "ok"}));
    let error = parse_event(&bytes(&other_session)).unwrap_err();
    assert!(
        error.message.contains("does not match"),
        "{}",
        error.message
    );
}
