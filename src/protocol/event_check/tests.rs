use serde_json::{Value, json};

use super::*;
use crate::protocol::error::ErrorCode;

fn envelope(event_type: &str, data: Value) -> Value {
    json!({
        "protocolVersion": 1,
        "eventId": "V1StGXR8_Z5jdHi6B-myT",
        "sequence": 1,
        "sessionId": "session-1",
        "requestId": "request-1",
        "occurredAt": "2026-08-25T00:00:00.000Z",
        "type": event_type,
        "data": data,
    })
}

fn rejected(value: Value) -> ProtocolError {
    let error = event_from_value(value.clone()).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidCommand, "{value}");
    error
}

#[test]
fn valid_events_of_each_type_parse() {
    let stream = envelope(
        "session.stream",
        json!({"type": "content", "sessionId": "session-1", "delta": "ok"}),
    );
    let event = parse_event(&serde_json::to_vec(&stream).unwrap()).unwrap();
    assert_eq!(
        EventPayload::from_event(&event).unwrap(),
        EventPayload::Stream(StreamMessage::content("session-1", "ok"))
    );
    let closed = event_from_value(envelope("session.closed", json!({"reason": "user"}))).unwrap();
    assert_eq!(closed.event_type, EventType::SessionClosed);
    let mut permission = envelope(
        "permission.requested",
        json!({"permissionRequestId": "p-1", "message": "May I?"}),
    );
    permission.as_object_mut().unwrap().remove("requestId");
    let permission = event_from_value(permission).unwrap();
    let EventPayload::PermissionRequested(data) = EventPayload::from_event(&permission).unwrap()
    else {
        panic!("not a permission request");
    };
    assert_eq!(data, PermissionRequestedData::new("p-1", "May I?"));
}

#[test]
fn envelope_rules() {
    let good = envelope("session.closed", json!({}));
    let mutate = |key: &str, value: Value| {
        let mut event = good.clone();
        event[key] = value;
        event
    };
    rejected(mutate("extra", json!(1)));
    rejected(mutate("eventId", json!("../bad")));
    rejected(mutate("sessionId", json!(":bad")));
    rejected(mutate("requestId", json!("")));
    rejected(mutate("requestId", json!(null)));
    rejected(mutate("sequence", json!(0)));
    rejected(mutate("sequence", json!(1.5)));
    rejected(mutate("occurredAt", json!("yesterday")));
    rejected(mutate("protocolVersion", json!(2)));
    rejected(mutate("type", json!("session.deleted")));
    rejected(mutate("data", json!([])));
    rejected(json!(["not", "an", "envelope"]));
    assert!(parse_event(b"{\"sequence\":1,\"sequence\":2}").is_err());
}

#[test]
fn stream_session_must_match_the_envelope() {
    let event = envelope(
        "session.stream",
        json!({"type": "content", "sessionId": "session-2", "delta": "x"}),
    );
    let error = rejected(event);
    assert!(
        error.message.contains("does not match"),
        "{}",
        error.message
    );
    assert_eq!(error.message, STREAM_SESSION_MISMATCH);
}

#[test]
fn stream_payload_is_validated_by_type() {
    let error = rejected(envelope(
        "session.stream",
        json!({"type": "content", "sessionId": "session-1"}),
    ));
    assert!(
        error.message.starts_with("Stream event is invalid"),
        "{}",
        error.message
    );
    rejected(envelope(
        "permission.requested",
        json!({"permissionRequestId": "p"}),
    ));
    rejected(envelope(
        "permission.requested",
        json!({"permissionRequestId": "p", "message": "m", "extra": 1}),
    ));
    rejected(envelope(
        "permission.requested",
        json!({"permissionRequestId": "../p", "message": "m"}),
    ));
}

#[test]
fn validate_event_checks_constructed_envelopes_too() {
    let mut event =
        event_from_value(envelope("session.closed", json!({"reason": "user"}))).unwrap();
    assert!(validate_event(&event).is_ok());
    event.sequence = 0;
    assert!(validate_event(&event).is_err());
}

#[test]
fn payload_to_data_round_trips() {
    let payloads = [
        EventPayload::Stream(StreamMessage::success("s")),
        EventPayload::PermissionRequested(PermissionRequestedData::new("p", "m")),
        EventPayload::SessionClosed(JsonObject::from_iter([(
            "reason".to_owned(),
            json!("user"),
        )])),
    ];
    for payload in payloads {
        let data = payload.to_data();
        assert_eq!(
            EventPayload::from_data(payload.event_type(), &data).unwrap(),
            payload
        );
    }
    let defaults = PermissionRequestedData::new("p", "m").to_data();
    assert_eq!(
        Value::Object(defaults),
        json!({"permissionRequestId": "p", "toolName": "unknown", "input": {},
            "title": "Permission required", "message": "m", "affectedPaths": [], "risks": []})
    );
}
