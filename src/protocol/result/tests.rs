use serde_json::{Value, json};

use super::*;
use crate::protocol::content::Priority;
use crate::protocol::error::{ErrorCode, pseudo_command_id};
use crate::protocol::recovery::RecoveryObject;

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

#[test]
fn success_and_failure_serialise_to_the_wire_shape() {
    let success = CommandResult::success("c-1", object(json!({"sessionId": "s"})));
    assert_eq!(
        success.to_value(),
        json!({"protocolVersion": 1, "commandId": "c-1", "ok": true, "data": {"sessionId": "s"}})
    );
    assert_eq!(success.http_status(), 200);
    let failure = CommandResult::failure(pseudo_command_id::INVALID, ProtocolError::invalid_json());
    assert_eq!(
        failure.to_value(),
        json!({"protocolVersion": 1, "commandId": "invalid", "ok": false, "error": {
            "code": "INVALID_COMMAND", "message": "Command body is not valid JSON", "retryable": false
        }})
    );
    assert_eq!(failure.http_status(), 400);
    assert_eq!(failure.retry_after_seconds(), None);
}

#[test]
fn retry_after_header_follows_the_failure() {
    let failure = CommandResult::failure("c-1", ProtocolError::rate_limited(59_999));
    assert_eq!(failure.http_status(), 429);
    assert_eq!(failure.retry_after_seconds(), Some(60));
    let parsed = parse_command_result(&serde_json::to_vec(&failure).unwrap()).unwrap();
    assert_eq!(parsed, failure);
}

#[test]
fn results_are_strict() {
    let bad = [
        json!({"protocolVersion": 1, "commandId": "c", "ok": true, "data": []}),
        json!({"protocolVersion": 1, "commandId": "c", "ok": true, "data": {}, "extra": 1}),
        json!({"protocolVersion": 1, "commandId": "c", "ok": false, "data": {}}),
        json!({"protocolVersion": 1, "commandId": "c", "ok": true, "error": {
            "code": "INTERNAL_ERROR", "message": "m", "retryable": true}}),
        json!({"protocolVersion": 2, "commandId": "c", "ok": true, "data": {}}),
        json!({"protocolVersion": 1, "commandId": "../c", "ok": true, "data": {}}),
        json!({"protocolVersion": 1, "commandId": "c", "ok": false, "error": {
            "code": "INTERNAL_ERROR", "message": "m", "retryable": true, "retryAfterMs": null}}),
        json!([1, "c", true, {}]),
    ];
    for value in bad {
        let error = CommandResult::from_value(value.clone()).unwrap_err();
        assert_eq!(error.code, ErrorCode::InternalError, "{value}");
    }
    assert_eq!(
        parse_command_result(b"not json").unwrap_err().code,
        ErrorCode::InternalError
    );
}

#[test]
fn submit_result_status_rules() {
    let valid = [
        json!({"sessionId": "s", "inputId": "i", "status": "started", "requestId": "r"}),
        json!({"sessionId": "s", "inputId": "i", "status": "steered", "requestId": "r", "priority": "now"}),
        json!({"sessionId": "s", "inputId": "i", "status": "steered", "requestId": "r", "priority": "next"}),
        json!({"sessionId": "s", "inputId": "i", "status": "queued", "priority": "later"}),
    ];
    for value in valid {
        let result = SubmitResult::from_data(&object(value.clone())).unwrap();
        assert_eq!(Value::Object(result.to_data()), value);
    }
    let invalid = [
        json!({"sessionId": "s", "inputId": "i", "status": "started"}),
        json!({"sessionId": "s", "inputId": "i", "status": "started", "requestId": "r", "priority": "now"}),
        json!({"sessionId": "s", "inputId": "i", "status": "steered", "requestId": "r"}),
        json!({"sessionId": "s", "inputId": "i", "status": "steered", "requestId": "r", "priority": "later"}),
        json!({"sessionId": "s", "inputId": "i", "status": "queued", "priority": "next"}),
        json!({"sessionId": "s", "inputId": "i", "status": "queued", "requestId": "r", "priority": "later"}),
        json!({"sessionId": "s", "inputId": "i", "status": "done", "requestId": "r"}),
    ];
    for value in invalid {
        assert!(
            SubmitResult::from_data(&object(value.clone())).is_err(),
            "{value}"
        );
    }
}

#[test]
fn submit_result_accessors() {
    let steered = SubmitResult {
        session_id: "s".into(),
        input_id: "i".into(),
        outcome: SubmitOutcome::Steered {
            request_id: "r".into(),
            priority: Priority::Next,
        },
    };
    assert_eq!(steered.status(), SubmitStatus::Steered);
    assert_eq!(steered.request_id(), Some("r"));
}

#[test]
fn initialize_result_lists_every_command_and_feature() {
    let result = InitializeResult::new("2026-08-25T00:00:00.000Z");
    let data = Value::Object(result.to_data());
    assert_eq!(
        data["commands"],
        json!(crate::protocol::command::COMMAND_TYPES)
    );
    assert_eq!(data["transports"], json!(["http-sse"]));
    assert_eq!(
        data["features"],
        json!({"approvals": true, "durableEvents": true, "eventReplay": true, "idempotentCommands": true})
    );
    assert_eq!(
        InitializeResult::from_data(&object(data.clone())).unwrap(),
        result
    );
    let mut false_feature = data.clone();
    false_feature["features"]["approvals"] = json!(false);
    assert!(InitializeResult::from_data(&object(false_feature)).is_err());
    let mut unknown_command = data;
    unknown_command["commands"] = json!(["session.delete"]);
    assert!(InitializeResult::from_data(&object(unknown_command)).is_err());
}

#[test]
fn recovery_omits_unknowns_and_writes_incomplete_only_when_true() {
    let unloaded = RecoveryObject::default();
    assert_eq!(
        serde_json::to_value(&unloaded).unwrap(),
        json!({"sessionLoaded": false})
    );
    let incomplete = RecoveryObject {
        recovery_incomplete: true,
        ..RecoveryObject::default()
    };
    assert_eq!(
        serde_json::to_value(&incomplete).unwrap(),
        json!({"sessionLoaded": false, "recoveryIncomplete": true})
    );
    let loaded = RecoveryObject {
        session_loaded: true,
        pending_input_count: Some(0),
        last_event_sequence: Some(3),
        ..RecoveryObject::default()
    };
    assert_eq!(
        serde_json::to_value(&loaded).unwrap(),
        json!({"sessionLoaded": true, "pendingInputCount": 0, "lastEventSequence": 3})
    );
}

#[test]
fn read_session_result_round_trips_messages_and_pending_inputs() {
    let data = json!({
        "session": {"sessionId": "s", "status": "active",
            "createdAt": "2026-08-25T00:00:00.000Z", "updatedAt": "2026-08-25T00:00:01.000Z"},
        "messages": [
            {"role": "user", "content": "hello", "correlation": {"inputId": "i-1", "requestId": "r"}},
            {"id": "m-2", "role": "assistant", "content": [{"type": "text", "text": "hi"}],
             "reasoningContent": "thinking", "telemetry": {"usage": {"inputTokens": 3, "outputTokens": 1}},
             "tool_calls": [{"id": "t", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
             "modelIdentity": {"provider": "p", "api": "a", "model": "m"}},
            {"role": "tool", "content": "files", "tool_call_id": "t", "name": "ls"}
        ],
        "pendingInputs": [{"inputId": "i", "content": "later", "priority": "later",
            "targetRequestId": "r", "acceptedAt": 1756080000123u64}],
        "loaded": true,
        "recovery": {"sessionLoaded": true, "pendingInputCount": 1, "lastEventSequence": 2,
            "routeState": "waiting_approval", "attempt": 2, "fencingToken": 7, "workerId": "w-1"}
    });
    let result = ReadSessionResult::from_data(&object(data.clone())).unwrap();
    assert_eq!(result.messages.len(), 3);
    assert_eq!(Value::Object(result.to_data()), data);
    let mut bad_role = data.clone();
    bad_role["messages"][0]["role"] = json!("robot");
    assert!(ReadSessionResult::from_data(&object(bad_role)).is_err());
    // The newest schema has no `metadata` bag, not even a null one.
    let mut with_metadata = data.clone();
    with_metadata["messages"][1]["metadata"] = json!(null);
    assert!(ReadSessionResult::from_data(&object(with_metadata)).is_err());
    let mut explicit_false = data;
    explicit_false["recovery"]["recoveryIncomplete"] = json!(false);
    assert!(ReadSessionResult::from_data(&object(explicit_false)).is_err());
}

#[test]
fn literal_true_results() {
    assert_eq!(
        Value::Object(AbortResult::new("s").to_data()),
        json!({"sessionId": "s", "aborted": true})
    );
    assert!(AbortResult::from_data(&object(json!({"sessionId": "s", "aborted": false}))).is_err());
    assert_eq!(
        Value::Object(ResolvePermissionResult::new("s", "p").to_data()),
        json!({"sessionId": "s", "permissionRequestId": "p", "resolved": true})
    );
}

#[test]
fn success_data_is_sent_as_its_own_type_reads_it() {
    let submit = SubmitResult {
        session_id: "s".into(),
        input_id: "i".into(),
        outcome: SubmitOutcome::Queued,
    };
    let data = SuccessData::SubmitInput(submit.clone()).to_data();
    assert_eq!(data, submit.to_data());
    assert_eq!(SubmitResult::from_data(&data).unwrap(), submit);

    let initialize = InitializeResult::new("2026-08-25T00:00:00.000Z");
    let data = SuccessData::Initialize(initialize.clone()).to_data();
    assert_eq!(InitializeResult::from_data(&data).unwrap(), initialize);

    let value = success_value("c-1", data.clone());
    assert_eq!(
        value,
        json!({"protocolVersion": 1, "commandId": "c-1", "ok": true, "data": Value::Object(data)})
    );
}
