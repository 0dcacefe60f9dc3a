//! The transcript messages a request writes: the model's answer, a tool call's result.

use agent_runtime::protocol::content::{ModelMessage, Role, UserContent};
use agent_runtime_store::{StoreError, TranscriptMutation};
use serde_json::{Value, json};

use super::{LiveSession, message_object};
use crate::provider::{ModelToolCall, ModelTurn};
use crate::tools::ToolOutcome;

/// The model's answer of one turn, as the transcript keeps it.
pub(super) fn assistant_message(turn: &ModelTurn) -> ModelMessage {
    let tool_calls: Vec<Value> = turn
        .tool_calls
        .iter()
        .map(|call| json!({ "id": call.id, "type": "function", "function": { "name": call.name, "arguments": call.arguments } }))
        .collect();
    let mut message = json!({ "role": "assistant", "content": turn.content });
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    if let Some(reasoning) = &turn.reasoning {
        message["reasoningContent"] = Value::String(reasoning.clone());
    }
    serde_json::from_value(message)
        .expect("an assistant message built here is a valid ModelMessage")
}

pub(super) async fn append_message(
    session: &LiveSession,
    message: &ModelMessage,
) -> Result<(), StoreError> {
    session
        .mutate_transcript(TranscriptMutation::AppendMessages(vec![message_object(
            message,
        )]))
        .await
}

/// A tool call's result, as the transcript keeps it (an error carries the provider's prefix).
pub(super) fn tool_message(call: &ModelToolCall, outcome: &ToolOutcome) -> ModelMessage {
    let output = serde_json::to_string(&outcome.output).unwrap_or_default();
    let content = if outcome.is_error {
        format!("{}{output}", crate::provider::TOOL_ERROR_PREFIX)
    } else {
        output
    };
    ModelMessage {
        tool_call_id: Some(call.id.clone()),
        name: Some(call.name.clone()),
        extensions: outcome.state.clone().map(crate::tools::state_extensions),
        ..ModelMessage::new(Role::Tool, UserContent::Text(content))
    }
}
