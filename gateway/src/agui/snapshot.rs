//! A thread's transcript as an AG-UI `MESSAGES_SNAPSHOT` (docs/protocols.md §1.5): what a client
//! that joins late, or whose cursor is older than the retained log, starts from.

use agent_runtime_store::TranscriptEntry;
use serde_json::{Value, json};

use crate::projected::message_text;

/// The AG-UI messages of a transcript: user, assistant (with its tool calls), tool and system
/// messages; images as URL or data sources.
pub fn messages(entries: &[TranscriptEntry]) -> Vec<Value> {
    entries.iter().filter_map(message).collect()
}

fn message(entry: &TranscriptEntry) -> Option<Value> {
    let stored = &entry.message;
    let role = stored.get("role").and_then(Value::as_str)?;
    let id = stored
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or(&entry.id)
        .to_owned();
    let content = stored.get("content");
    let message = match role {
        "user" => json!({"id": id, "role": "user", "content": user_content(content)}),
        "system" => json!({"id": id, "role": "system", "content": message_text(content)}),
        "tool" => json!({
            "id": id,
            "role": "tool",
            "content": message_text(content),
            "toolCallId": stored.get("tool_call_id").and_then(Value::as_str).unwrap_or_default(),
        }),
        "assistant" => {
            let mut message = json!({"id": id, "role": "assistant"});
            let text = message_text(content);
            if !text.is_empty() {
                message["content"] = Value::String(text);
            }
            if let Some(Value::Array(calls)) = stored.get("tool_calls") {
                message["toolCalls"] = Value::Array(calls.iter().map(tool_call).collect());
            }
            message
        }
        _ => return None,
    };
    Some(message)
}

fn tool_call(call: &Value) -> Value {
    let function = call.get("function");
    let field = |name: &str| {
        function
            .and_then(|function| function.get(name))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    json!({
        "id": call.get("id").and_then(Value::as_str).unwrap_or_default(),
        "type": "function",
        "function": {"name": field("name"), "arguments": field("arguments")},
    })
}

/// A user's content: text stays text; parts become AG-UI text and image parts.
fn user_content(content: Option<&Value>) -> Value {
    let Some(Value::Array(parts)) = content else {
        return Value::String(message_text(content));
    };
    let parts = parts
        .iter()
        .filter_map(|part| match part.get("type").and_then(Value::as_str)? {
            "text" => Some(json!({"type": "text", "text": part.get("text")?.as_str()?})),
            "image_url" => {
                let url = part.get("image_url")?.get("url")?.as_str()?;
                Some(json!({"type": "image", "source": image_source(url)}))
            }
            _ => None,
        })
        .collect();
    Value::Array(parts)
}

/// A `data:` URL as AG-UI's data source, any other URL as its URL source.
fn image_source(url: &str) -> Value {
    let data = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"));
    match data {
        Some((mime, value)) => json!({"type": "data", "value": value, "mimeType": mime}),
        None => json!({"type": "url", "value": url}),
    }
}
