use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_runtime::protocol::result::SessionResult;
use agent_runtime::protocol::{ErrorCode, JsonObject, ProtocolError, ResultData};
use reqwest::StatusCode;
use serde_json::json;

use super::*;
use crate::error::ErrorKind;

fn raw(data: &JsonObject) -> Result<JsonObject, ProtocolError> {
    Ok(data.clone())
}

fn body(value: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&value).unwrap()
}

#[test]
fn a_success_returns_its_data() {
    let answer = body(json!({"protocolVersion":1,"commandId":"c1","ok":true,"data":{"x":1}}));
    let data = interpret_command_response(StatusCode::OK, None, &answer, raw).unwrap();
    assert_eq!(data["x"], 1);
}

#[test]
fn a_structured_failure_keeps_the_bodys_retryability_and_retry_after() {
    let answer = body(
        json!({"protocolVersion":1,"commandId":"c1","ok":false,"error":{
        "code":"COMMAND_IN_PROGRESS","message":"busy","retryable":true,"retryAfterMs":1500}}),
    );
    let header = Some(Duration::from_secs(30));
    let error = interpret_command_response(StatusCode::CONFLICT, header, &answer, raw).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Server);
    assert_eq!(error.code, ErrorCode::CommandInProgress);
    assert_eq!(error.status, Some(409));
    assert!(error.retryable);
    // The body's retryAfterMs, not the header.
    assert_eq!(error.retry_after, Some(Duration::from_millis(1500)));

    // A 503 whose body says "not retryable" is not retried: the body decides.
    let answer = body(
        json!({"protocolVersion":1,"commandId":"c1","ok":false,"error":{
        "code":"INTERNAL_ERROR","message":"no","retryable":false}}),
    );
    let error = interpret_command_response(StatusCode::SERVICE_UNAVAILABLE, None, &answer, raw)
        .unwrap_err();
    assert!(!error.retryable);
}

#[test]
fn command_abandoned_is_never_retryable_even_when_flagged_so() {
    let answer = body(
        json!({"protocolVersion":1,"commandId":"c1","ok":false,"error":{
        "code":"COMMAND_ABANDONED","message":"gone","retryable":true}}),
    );
    let error = interpret_command_response(StatusCode::CONFLICT, None, &answer, raw).unwrap_err();
    assert_eq!(error.code, ErrorCode::CommandAbandoned);
    assert!(!error.retryable);
}

#[test]
fn an_unparseable_body_is_internal_error_retryable_by_status_with_the_header_delay() {
    for (status, retryable) in [
        (429, true),
        (408, true),
        (500, true),
        (502, true),
        (400, false),
    ] {
        let status = StatusCode::from_u16(status).unwrap();
        let header = Some(Duration::from_secs(2));
        let error =
            interpret_command_response(status, header, b"<html>oops</html>", raw).unwrap_err();
        assert_eq!(error.kind, ErrorKind::InvalidResponse);
        assert_eq!(error.code, ErrorCode::InternalError);
        assert_eq!(error.status, Some(status.as_u16()));
        assert_eq!(error.retryable, retryable, "{status}");
        assert_eq!(error.retry_after, header);
    }
}

#[test]
fn ok_true_with_a_non_2xx_status_is_internal_error() {
    let answer = body(json!({"protocolVersion":1,"commandId":"c1","ok":true,"data":{}}));
    let error =
        interpret_command_response(StatusCode::BAD_GATEWAY, None, &answer, raw).unwrap_err();
    assert_eq!(error.code, ErrorCode::InternalError);
    assert!(error.retryable);
}

#[test]
fn a_result_with_an_unknown_key_or_wrong_data_shape_is_rejected() {
    let extra = body(json!({"protocolVersion":1,"commandId":"c1","ok":true,"data":{},"extra":1}));
    let error = interpret_command_response(StatusCode::OK, None, &extra, raw).unwrap_err();
    assert_eq!(error.code, ErrorCode::InternalError);
    assert!(!error.retryable, "a 200 is not retried");

    let wrong = body(json!({"protocolVersion":1,"commandId":"c1","ok":true,"data":{"session":{}}}));
    let error = interpret_command_response(StatusCode::OK, None, &wrong, SessionResult::from_data)
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::InvalidResponse);
}

#[test]
fn retry_after_is_seconds_or_an_http_date() {
    let now = UNIX_EPOCH + Duration::from_secs(1_445_412_400); // 2015-10-21T07:26:40Z
    assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after("120", now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
        Some(Duration::from_secs(80))
    );
    // A date in the past means "retry now".
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon", now), None);
    assert_eq!(parse_retry_after("-5", SystemTime::now()), None);
}
