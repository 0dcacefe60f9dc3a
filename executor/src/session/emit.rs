//! The `session.stream` messages the agent loop emits (protocol.md §6.2), built in one place.

use agent_runtime::protocol::JsonObject;
use serde_json::{Value, json};

use crate::provider::ModelUsage;

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("stream messages are JSON objects"),
    }
}

pub fn turn_start(session_id: &str, turn: u64) -> JsonObject {
    object(json!({ "type": "turn_start", "sessionId": session_id, "turn": turn }))
}

pub fn turn_end(session_id: &str, turn: u64) -> JsonObject {
    object(json!({ "type": "turn_end", "sessionId": session_id, "turn": turn }))
}

pub fn turn_interrupted(session_id: &str, input_id: &str, request_id: &str, turn: u64) -> JsonObject {
    object(json!({
        "type": "turn_interrupted",
        "sessionId": session_id,
        "inputId": input_id,
        "requestId": request_id,
        "turn": turn,
    }))
}

pub fn input_applied(
    session_id: &str,
    input_id: &str,
    request_id: &str,
    priority: &str,
    turn: u64,
) -> JsonObject {
    object(json!({
        "type": "input_applied",
        "sessionId": session_id,
        "inputId": input_id,
        "requestId": request_id,
        "priority": priority,
        "turn": turn,
    }))
}

pub fn content(session_id: &str, delta: &str) -> JsonObject {
    object(json!({ "type": "content", "sessionId": session_id, "delta": delta }))
}

pub fn thinking(session_id: &str, delta: &str) -> JsonObject {
    object(json!({ "type": "thinking", "sessionId": session_id, "delta": delta }))
}

pub fn tool_use(session_id: &str, id: &str, name: &str, input: &Value) -> JsonObject {
    object(json!({ "type": "tool_use", "sessionId": session_id, "id": id, "name": name, "input": input }))
}

pub fn tool_result(
    session_id: &str,
    id: &str,
    name: &str,
    output: &Value,
    summary: &str,
    is_error: bool,
) -> JsonObject {
    object(json!({
        "type": "tool_result",
        "sessionId": session_id,
        "id": id,
        "name": name,
        "output": output,
        "display": { "summary": summary },
        "isError": is_error,
    }))
}

pub fn usage(session_id: &str, usage: ModelUsage) -> JsonObject {
    object(json!({
        "type": "usage",
        "sessionId": session_id,
        "usage": {
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "totalTokens": usage.input_tokens + usage.output_tokens,
            "maxContextTokens": usage.max_context_tokens,
        },
    }))
}

pub fn result_success(session_id: &str, content: &str) -> JsonObject {
    object(json!({ "type": "result", "sessionId": session_id, "subtype": "success", "content": content }))
}

pub fn result_error(session_id: &str, error: &str) -> JsonObject {
    object(json!({ "type": "result", "sessionId": session_id, "subtype": "error", "error": error }))
}

pub fn error(session_id: &str, message: &str, code: &str) -> JsonObject {
    object(json!({ "type": "error", "sessionId": session_id, "message": message, "code": code }))
}

/// `permission.requested` data (protocol.md §6.3).
pub fn permission_requested(
    permission_request_id: &str,
    tool_name: &str,
    input: &Value,
    title: &str,
    message: &str,
) -> JsonObject {
    let input = match input {
        Value::Object(map) => Value::Object(map.clone()),
        _ => json!({}),
    };
    object(json!({
        "permissionRequestId": permission_request_id,
        "toolName": tool_name,
        "input": input,
        "title": title,
        "message": message,
        "affectedPaths": [],
        "risks": [],
    }))
}
