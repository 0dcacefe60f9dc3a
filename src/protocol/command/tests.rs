use serde_json::{Value, json};

use super::*;
use crate::protocol::content::{ContentPart, Priority, UserContent};
use crate::protocol::error::ErrorCode;

fn body(command_type: &str, data: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "protocolVersion": 1,
        "commandId": "cmd-1",
        "type": command_type,
        "data": data,
    }))
    .unwrap()
}

fn rejected(body: &[u8]) -> ProtocolError {
    match parse_command(body) {
        Ok(command) => panic!("accepted: {command:?}"),
        Err(error) => error,
    }
}

fn assert_validation_failed(command_type: &str, data: Value) {
    let error = rejected(&body(command_type, data.clone()));
    assert_eq!(
        error.code,
        ErrorCode::InvalidCommand,
        "{command_type} {data}"
    );
    assert_eq!(
        error.message, "Command validation failed",
        "{command_type} {data}"
    );
}

#[test]
fn bad_json_duplicate_keys_and_non_finite_numbers_are_not_valid_json() {
    let duplicate_at_depth = br#"{"protocolVersion":1,"commandId":"c","type":"session.create","data":{"metadata":{"a":1,"a":2}}}"#;
    let huge =
        br#"{"protocolVersion":1,"commandId":"c","type":"session.list","data":{"limit":1e400}}"#;
    for bad in [&b"{"[..], b"", duplicate_at_depth, huge, b"{\"a\":NaN}"] {
        let error = rejected(bad);
        assert_eq!(error.code, ErrorCode::InvalidCommand);
        assert_eq!(error.message, "Command body is not valid JSON");
    }
}

#[test]
fn p7_other_protocol_version_on_an_object_is_unsupported() {
    for version in [json!(2), json!("1"), json!(null), json!(0.5), json!([1])] {
        let body = serde_json::to_vec(&json!({
            "protocolVersion": version, "commandId": "c", "type": "session.list", "data": {}
        }))
        .unwrap();
        let error = rejected(&body);
        assert_eq!(
            error.code,
            ErrorCode::ProtocolVersionUnsupported,
            "{version}"
        );
        assert_eq!(error.http_status(), 400);
        assert!(!error.retryable);
    }
    // A missing version or a non-object body is an ordinary schema failure.
    let missing = br#"{"commandId":"c","type":"session.list","data":{}}"#;
    assert_eq!(rejected(missing).message, "Command validation failed");
    assert_eq!(rejected(b"[1]").message, "Command validation failed");
    // 1.0 is the number one to JavaScript.
    let float_one = br#"{"protocolVersion":1.0,"commandId":"c","type":"session.list","data":{}}"#;
    assert!(parse_command(float_one).is_ok());
}

#[test]
fn envelope_is_strict() {
    let cases: [&[u8]; 5] = [
        br#"{"protocolVersion":1,"commandId":"c","type":"session.list"}"#,
        br#"{"protocolVersion":1,"commandId":"c","type":"session.list","data":{},"extra":1}"#,
        br#"{"protocolVersion":1,"commandId":"../unsafe","type":"session.list","data":{}}"#,
        br#"{"protocolVersion":1,"commandId":"c","type":"session.nope","data":{}}"#,
        br#"{"protocolVersion":1,"commandId":"c","type":"session.list","data":[]}"#,
    ];
    for case in cases {
        assert_eq!(rejected(case).message, "Command validation failed");
    }
}

#[test]
fn unknown_keys_are_rejected_at_every_level() {
    assert_validation_failed("session.list", json!({"extra": true}));
    assert_validation_failed(
        "initialize",
        json!({"client": {"name": "c", "version": "1", "extra": 1}}),
    );
    assert_validation_failed(
        "initialize",
        json!({"client": {"name": "c", "version": "1"}, "capabilities": {"streaming": true}}),
    );
    assert_validation_failed(
        "input.submit",
        json!({"sessionId": "s", "input": [{"type": "text", "text": "x", "extra": 1}]}),
    );
    assert_validation_failed(
        "input.submit",
        json!({"sessionId": "s", "input": [{"type": "image_url", "image_url": {"url": "u", "detail": "high"}}]}),
    );
}

#[test]
fn field_rules() {
    assert_validation_failed("session.read", json!({"sessionId": "../unsafe"}));
    assert_validation_failed("session.read", json!({}));
    assert_validation_failed("session.list", json!({"limit": 1.5}));
    assert_validation_failed("session.list", json!({"limit": 0}));
    assert_validation_failed("session.list", json!({"limit": 101}));
    assert_validation_failed("session.list", json!({"limit": "10"}));
    assert_validation_failed("session.list", json!({"cursor": ""}));
    assert_validation_failed(
        "input.submit",
        json!({"sessionId": "s", "input": "x", "maxTurns": 0}),
    );
    assert_validation_failed(
        "input.submit",
        json!({"sessionId": "s", "input": "x", "maxTurns": 2.5}),
    );
    assert_validation_failed(
        "input.submit",
        json!({"sessionId": "s", "input": "x", "priority": "soon"}),
    );
    assert_validation_failed("input.submit", json!({"sessionId": "s", "input": 5}));
    assert_validation_failed(
        "input.submit",
        json!({"sessionId": "s", "input": [{"type": "image_url", "image_url": {"url": ""}}]}),
    );
    assert_validation_failed(
        "input.submit",
        json!({"sessionId": "s", "input": "x", "expectedRequestId": ":r"}),
    );
    assert_validation_failed(
        "initialize",
        json!({"client": {"name": "c", "version": "1", "title": ""}}),
    );
    assert_validation_failed(
        "initialize",
        json!({"client": {"name": "c", "version": "1", "title": "t".repeat(257)}}),
    );
    assert_validation_failed(
        "permission.resolve",
        json!({"sessionId": "s", "permissionRequestId": "p", "approved": "yes"}),
    );
    assert_validation_failed(
        "permission.resolve",
        json!({"sessionId": "s", "permissionRequestId": "p", "approved": true, "reason": "r".repeat(4097)}),
    );
    assert_validation_failed(
        "permission.resolve",
        json!({"sessionId": "s", "permissionRequestId": "p", "approved": true, "scope": "forever"}),
    );
    assert_validation_failed("session.create", json!({"metadata": []}));
}

#[test]
fn explicit_null_is_not_an_absent_optional() {
    assert_validation_failed("session.create", json!({"metadata": null}));
    assert_validation_failed("session.list", json!({"cursor": null}));
    assert_validation_failed("session.fork", json!({"sessionId": "s", "messageId": null}));
    assert_validation_failed(
        "input.submit",
        json!({"sessionId": "s", "input": "x", "priority": null}),
    );
}

#[test]
fn boundaries_that_pass() {
    let limit = parse_command(&body(
        "session.list",
        json!({"limit": 100.0, "cursor": "5"}),
    ))
    .unwrap();
    assert_eq!(
        limit.kind,
        CommandKind::ListSessions(ListSessionsData {
            cursor: Some("5".into()),
            limit: Some(100)
        })
    );
    let reason = "r".repeat(4096);
    let resolve = parse_command(&body(
        "permission.resolve",
        json!({"sessionId": "s", "permissionRequestId": "p", "approved": false, "reason": reason, "scope": "session"}),
    ))
    .unwrap();
    assert_eq!(resolve.session_id(), Some("s"));
}

#[test]
fn absent_optionals_are_never_serialised() {
    let command = Command::new(
        "cmd-1",
        CommandKind::SubmitInput(SubmitInputData {
            session_id: "s".into(),
            input: UserContent::Parts(vec![ContentPart::Text {
                text: "hi".into(),
                provider_options: None,
            }]),
            priority: Some(Priority::Later),
            expected_request_id: None,
            max_turns: None,
        }),
    );
    let text = serde_json::to_string(&command).unwrap();
    assert!(!text.contains("null"), "{text}");
    assert_eq!(
        command.to_value(),
        json!({
            "protocolVersion": 1, "commandId": "cmd-1", "type": "input.submit",
            "data": {"sessionId": "s", "input": [{"type": "text", "text": "hi"}], "priority": "later"}
        })
    );
    let list = Command::new("l", CommandKind::ListSessions(ListSessionsData::default()));
    assert_eq!(list.to_value()["data"], json!({}));
}

#[test]
fn type_session_and_scopes_per_command() {
    let cases = [
        (
            body(
                "initialize",
                json!({"client": {"name": "c", "version": "1.0.0"}}),
            ),
            None,
            vec![],
        ),
        (
            body("session.create", json!({})),
            None,
            vec![Scope::SessionCreate],
        ),
        (
            body("session.read", json!({"sessionId": "s"})),
            Some("s"),
            vec![Scope::SessionRead],
        ),
        (
            body("session.list", json!({})),
            None,
            vec![Scope::SessionRead],
        ),
        (
            body("session.resume", json!({"sessionId": "s"})),
            Some("s"),
            vec![Scope::SessionWrite],
        ),
        (
            body("session.fork", json!({"sessionId": "s"})),
            Some("s"),
            vec![Scope::SessionRead, Scope::SessionCreate],
        ),
        (
            body("session.close", json!({"sessionId": "s"})),
            Some("s"),
            vec![Scope::SessionWrite],
        ),
        (
            body("input.submit", json!({"sessionId": "s", "input": "x"})),
            Some("s"),
            vec![Scope::SessionWrite],
        ),
        (
            body("request.abort", json!({"sessionId": "s"})),
            Some("s"),
            vec![Scope::SessionWrite],
        ),
        (
            body(
                "permission.resolve",
                json!({"sessionId": "s", "permissionRequestId": "p", "approved": true}),
            ),
            Some("s"),
            vec![Scope::PermissionResolve],
        ),
    ];
    for ((body, session_id, scopes), expected_type) in cases.into_iter().zip(COMMAND_TYPES) {
        let command = parse_command(&body).unwrap();
        assert_eq!(command.command_type(), expected_type);
        assert_eq!(command.session_id(), session_id);
        assert_eq!(command.required_scopes(), scopes.as_slice());
        assert_eq!(command.command_id, "cmd-1");
        let reparsed: Command = serde_json::from_value(command.to_value()).unwrap();
        assert_eq!(reparsed, command);
    }
}
