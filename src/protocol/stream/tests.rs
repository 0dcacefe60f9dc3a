use serde_json::{Value, json};

use super::*;
use crate::protocol::error::ErrorCode;

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

fn parses(value: Value) -> StreamMessage {
    match StreamMessage::from_data(&object(value.clone())) {
        Ok(message) => {
            assert_eq!(Value::Object(message.to_data()), value, "round trip");
            message
        }
        Err(error) => panic!("rejected {value}: {error}"),
    }
}

fn rejects(value: Value) {
    let error = StreamMessage::from_data(&object(value.clone())).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidCommand, "{value}");
}

#[test]
fn every_variant_reports_its_type_and_session() {
    let samples = [
        json!({"type": "turn_start", "sessionId": "s", "turn": 1}),
        json!({"type": "turn_end", "sessionId": "s", "turn": 1}),
        json!({"type": "turn_interrupted", "sessionId": "s", "inputId": "i", "requestId": "r", "turn": 2}),
        json!({"type": "input_applied", "sessionId": "s", "inputId": "i", "requestId": "r", "priority": "next", "turn": 2}),
        json!({"type": "content", "sessionId": "s", "delta": "ok"}),
        json!({"type": "thinking", "sessionId": "s", "delta": "hmm"}),
        json!({"type": "tool_use", "sessionId": "s", "id": "t", "name": "ls", "input": {"path": "."}}),
        json!({"type": "tool_progress", "sessionId": "s", "id": "t", "name": "ls", "progress": {"kind": "progress"}}),
        json!({"type": "tool_message", "sessionId": "s", "id": "t", "name": "ls", "content": {"summary": "x"}}),
        json!({"type": "tool_runtime_patch", "sessionId": "s", "id": "t", "name": "skill",
            "patch": {"scope": "turn", "source": "skill"}}),
        json!({"type": "tool_context_patch", "sessionId": "s", "id": "t", "name": "ctx", "patch": {"scope": "session"}}),
        json!({"type": "tool_new_messages", "sessionId": "s", "id": "t", "name": "n", "messages": []}),
        json!({"type": "tool_permission_updates", "sessionId": "s", "id": "t", "name": "p", "updates": []}),
        json!({"type": "tool_result", "sessionId": "s", "id": "t", "name": "ls", "output": null}),
        json!({"type": "usage", "sessionId": "s", "usage": {"inputTokens": 1, "outputTokens": 2,
            "totalTokens": 3, "maxContextTokens": 100}}),
        json!({"type": "result", "sessionId": "s", "subtype": "success"}),
        json!({"type": "error", "sessionId": "s", "message": "boom"}),
    ];
    assert_eq!(samples.len(), STREAM_MESSAGE_TYPES.len());
    for (sample, expected_type) in samples.into_iter().zip(STREAM_MESSAGE_TYPES) {
        let message = parses(sample);
        assert_eq!(message.message_type(), expected_type);
        assert_eq!(message.session_id(), "s");
    }
}

#[test]
fn every_variant_rejects_unknown_keys() {
    for message_type in STREAM_MESSAGE_TYPES {
        rejects(json!({"type": message_type, "sessionId": "s", "delta": "x", "extra": true}));
    }
    rejects(json!({"type": "content", "sessionId": "s", "delta": "x", "extra": true}));
    rejects(
        json!({"type": "tool_message", "sessionId": "s", "id": "t", "name": "n",
        "content": {"summary": "x", "extra": 1}}),
    );
    rejects(
        json!({"type": "tool_runtime_patch", "sessionId": "s", "id": "t", "name": "n",
        "patch": {"scope": "turn", "source": "tool", "toolPolicy": {"allow": [], "extra": 1}}}),
    );
}

#[test]
fn field_rules() {
    rejects(json!({"type": "content", "sessionId": "s"}));
    rejects(json!({"type": "content", "sessionId": "", "delta": "x"}));
    rejects(json!({"type": "content", "delta": "x"}));
    rejects(json!({"type": "unknown", "sessionId": "s"}));
    rejects(json!({"type": "turn_start", "sessionId": "s", "turn": 1.5}));
    rejects(
        json!({"type": "input_applied", "sessionId": "s", "inputId": "i", "requestId": "r",
        "priority": "later", "turn": 1}),
    );
    rejects(json!({"type": "tool_use", "sessionId": "s", "id": "t", "name": "ls"}));
    rejects(json!({"type": "tool_use", "sessionId": "s", "id": "", "name": "ls", "input": {}}));
    rejects(
        json!({"type": "tool_progress", "sessionId": "s", "id": "t", "name": "n",
        "progress": {"kind": "done"}}),
    );
    rejects(
        json!({"type": "usage", "sessionId": "s", "usage": {"inputTokens": -1, "outputTokens": 2,
        "totalTokens": 3, "maxContextTokens": 100}}),
    );
    rejects(json!({"type": "result", "sessionId": "s", "subtype": "partial"}));
    rejects(json!({"type": "result", "sessionId": "s", "subtype": "success", "content": null}));
    rejects(
        json!({"type": "tool_permission_updates", "sessionId": "s", "id": "t", "name": "p",
        "updates": [{"type": "addRules", "rules": [{"toolName": "ls"}]}]}),
    );
    rejects(
        json!({"type": "tool_runtime_patch", "sessionId": "s", "id": "t", "name": "n",
        "patch": {"scope": "turn", "source": "tool", "hooks": [{"event": "Never", "type": "command"}]}}),
    );
}

#[test]
fn stream_ids_need_only_be_non_empty() {
    // Stream payloads are exempt from the identifier rule (§1.1).
    let message = parses(
        json!({"type": "turn_interrupted", "sessionId": "s", "inputId": "../odd id",
        "requestId": "r/1", "turn": -1}),
    );
    assert_eq!(message.own_request_id(), Some("r/1"));
}

#[test]
fn rich_payloads_round_trip() {
    parses(
        json!({"type": "tool_progress", "sessionId": "s", "id": "t", "name": "n", "progress": {
        "kind": "progress", "message": "half", "data": null, "completed": 1.5, "total": 3, "resumeToken": "tok"}}),
    );
    parses(
        json!({"type": "tool_result", "sessionId": "s", "id": "t", "name": "n", "output": [1, "two"],
        "display": {"summary": "done", "detail": {"lines": 2}}, "isError": false}),
    );
    parses(
        json!({"type": "tool_permission_updates", "sessionId": "s", "id": "t", "name": "p", "updates": [
        {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "ls:*"}], "behavior": "allow"},
        {"type": "removeRules", "rules": [{"toolName": "Write"}]}]}),
    );
    parses(
        json!({"type": "usage", "sessionId": "s", "usage": {"inputTokens": 10, "outputTokens": 2.5,
        "totalTokens": 12.5, "maxContextTokens": 200000, "cacheReadInputTokens": 0,
        "cacheMissInputTokens": 1, "billableInputTokens": 9, "reasoningTokens": 3}}),
    );
    parses(
        json!({"type": "result", "sessionId": "s", "subtype": "error", "content": "partial", "error": "boom"}),
    );
    parses(json!({"type": "error", "sessionId": "s", "message": "boom", "code": "PROVIDER"}));
}

#[test]
fn constructors_and_terminal_marker() {
    let content = StreamMessage::content("s", "ok");
    assert_eq!(
        Value::Object(content.to_data()),
        json!({"type": "content", "sessionId": "s", "delta": "ok"})
    );
    assert!(!content.is_request_terminal());
    let done = StreamMessage::success("s");
    assert!(done.is_request_terminal());
    assert_eq!(
        Value::Object(done.to_data()),
        json!({"type": "result", "sessionId": "s", "subtype": "success"})
    );
    assert_eq!(done.own_request_id(), None);
}

#[test]
fn streamed_messages_follow_the_newest_strict_message_schema() {
    let injected = |message: serde_json::Value| {
        json!({"type": "tool_new_messages", "sessionId": "s", "id": "t", "name": "Skill",
            "messages": [message]})
    };
    let newest = json!({"role": "user", "content": "skill text",
        "provenance": {"source": "tool_injection"},
        "correlation": {"inputId": "i-1", "requestId": "r-1"}});
    parses(injected(newest.clone()));
    let mut partial = newest.clone();
    partial["correlation"] = json!({"inputId": "i-1"});
    rejects(injected(partial));
    let mut null = newest.clone();
    null["correlation"] = json!({"inputId": "i-1", "requestId": null});
    rejects(injected(null));
    let mut empty = newest;
    empty["correlation"] = json!({"inputId": "", "requestId": "r-1"});
    rejects(injected(empty));
    rejects(injected(json!({"role": "assistant", "content": "",
        "tool_calls": [{"id": "", "type": "function", "function": {"name": "n", "arguments": "{}"}}]})));
}
