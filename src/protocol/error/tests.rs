use serde_json::json;

use super::*;

#[test]
fn status_table_matches_protocol_section_3() {
    let expected = [
        ("PROTOCOL_VERSION_UNSUPPORTED", 400, false),
        ("INVALID_COMMAND", 400, false),
        ("UNAUTHENTICATED", 401, false),
        ("FORBIDDEN", 403, false),
        ("SESSION_NOT_FOUND", 404, false),
        ("PERMISSION_NOT_FOUND", 404, false),
        ("SESSION_CONFLICT", 409, false),
        ("COMMAND_CONFLICT", 409, false),
        ("COMMAND_IN_PROGRESS", 409, true),
        ("COMMAND_ABANDONED", 409, false),
        ("STREAM_FRAME_TOO_LARGE", 502, false),
        ("RATE_LIMITED", 429, true),
        ("OVERLOADED", 503, true),
        ("STALE_CURSOR", 409, false),
        ("INTERNAL_ERROR", 500, true),
    ];
    assert_eq!(ErrorCode::ALL.len(), expected.len());
    for (code, (name, status, retryable)) in ErrorCode::ALL.into_iter().zip(expected) {
        assert_eq!(code.as_str(), name);
        assert_eq!(code.http_status(), status, "{name}");
        assert_eq!(code.default_retryable(), retryable, "{name}");
        assert_eq!(ErrorCode::parse(name), Some(code));
        assert_eq!(serde_json::to_value(code).unwrap(), json!(name));
    }
    assert_eq!(ErrorCode::parse("NOPE"), None);
}

#[test]
fn command_abandoned_is_not_retryable_per_p3() {
    let error = ProtocolError::command_abandoned("operator gave up");
    assert!(!error.retryable);
    assert_eq!(
        error.message,
        "This command was abandoned without a result: operator gave up"
    );
    assert_eq!(error.http_status(), 409);
}

#[test]
fn site_statuses_override_the_code_status() {
    assert_eq!(ProtocolError::body_too_large().http_status(), 413);
    assert_eq!(
        ProtocolError::body_too_large().code,
        ErrorCode::InvalidCommand
    );
    assert_eq!(ProtocolError::route_not_found().http_status(), 404);
    assert_eq!(ProtocolError::invalid_json().http_status(), 400);
    assert_eq!(ProtocolError::invalid_event_cursor().http_status(), 400);
    assert_eq!(ProtocolError::event_cursor_stale().http_status(), 409);
}

#[test]
fn uncertain_outcome_is_in_progress_409_with_the_lease_ttl() {
    let error = ProtocolError::command_outcome_uncertain(DEFAULT_COMMAND_LEASE_TTL_MS);
    assert_eq!(error.code, ErrorCode::CommandInProgress);
    assert_eq!(error.http_status(), 409);
    assert!(error.retryable);
    assert_eq!(error.retry_after_ms, Some(30_000));
    assert_eq!(error.retry_after_seconds(), Some(30));
}

#[test]
fn retry_after_is_at_least_one_millisecond_and_rounds_up_to_seconds() {
    assert_eq!(
        ProtocolError::command_in_progress(0).retry_after_ms,
        Some(1)
    );
    assert_eq!(ProtocolError::rate_limited(0).retry_after_ms, Some(1));
    assert_eq!(
        ProtocolError::rate_limited(1).retry_after_seconds(),
        Some(1)
    );
    assert_eq!(
        ProtocolError::rate_limited(1001).retry_after_seconds(),
        Some(2)
    );
    assert_eq!(ProtocolError::queue_full().retry_after_seconds(), Some(1));
    assert_eq!(ProtocolError::internal().retry_after_seconds(), None);
    let zero = ProtocolError::internal().with_retry_after_ms(0);
    assert_eq!(zero.retry_after_seconds(), None);
}

#[test]
fn standard_messages() {
    let cases = [
        (
            ProtocolError::validation_failed(),
            "Command validation failed",
        ),
        (ProtocolError::unauthenticated(), "Authentication required"),
        (
            ProtocolError::session_not_active("s-1"),
            "Session s-1 is not active; resume it before issuing this command",
        ),
        (
            ProtocolError::permission_not_pending("p-1"),
            "Permission request p-1 is not pending",
        ),
        (
            ProtocolError::command_conflict(),
            "This commandId was already used for a different command",
        ),
        (
            ProtocolError::session_limit(),
            "Tenant active Session limit exceeded",
        ),
        (ProtocolError::queue_full(), "Tenant command queue is full"),
        (
            ProtocolError::session_closed_conflict(),
            "Session is closed",
        ),
        (ProtocolError::internal(), "Internal server error"),
        (
            ProtocolError::event_cursor_ahead(),
            "Event cursor is ahead of the session head",
        ),
    ];
    for (error, message) in cases {
        assert_eq!(error.message, message);
    }
}

#[test]
fn absent_optionals_are_never_serialised_as_null() {
    let body = serde_json::to_value(ProtocolError::internal()).unwrap();
    assert_eq!(
        body,
        json!({"code": "INTERNAL_ERROR", "message": "Internal server error", "retryable": true})
    );
    let with_retry = serde_json::to_value(ProtocolError::queue_full()).unwrap();
    assert_eq!(with_retry["retryAfterMs"], json!(1000));
    assert!(with_retry.get("details").is_none());
}

#[test]
fn error_objects_are_strict() {
    let parsed: ProtocolError = serde_json::from_value(json!({
        "code": "RATE_LIMITED", "message": "m", "retryable": true, "retryAfterMs": 59999
    }))
    .unwrap();
    assert_eq!(parsed.retry_after_ms, Some(59_999));
    for bad in [
        json!({"code": "RATE_LIMITED", "message": "m", "retryable": true, "extra": 1}),
        json!({"code": "RATE_LIMITED", "message": "m", "retryable": true, "retryAfterMs": -1}),
        json!({"code": "RATE_LIMITED", "message": "m", "retryable": true, "retryAfterMs": 1.5}),
        json!({"code": "RATE_LIMITED", "message": "m", "retryable": true, "details": null}),
        json!({"code": "NOPE", "message": "m", "retryable": true}),
        json!({"code": "RATE_LIMITED", "message": "m"}),
    ] {
        assert!(
            serde_json::from_value::<ProtocolError>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn display_names_code_and_message() {
    assert_eq!(
        ProtocolError::forbidden(Scope::SessionWrite).to_string(),
        "FORBIDDEN: Missing required scope: session:write"
    );
}
