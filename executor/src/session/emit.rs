//! The `session.stream` messages the agent loop emits (docs/protocol.md §6.2), built from the typed
//! protocol messages so that nothing the executor writes can drift from the schema.

use agent_runtime::protocol::JsonObject;
use agent_runtime::protocol::PermissionRequestedData;
use agent_runtime::protocol::content::Priority;
use agent_runtime::protocol::stream::{
    PermissionBehavior, PermissionRule, PermissionUpdate, ProgressKind, ResultSubtype,
    StreamMessage, ToolDisplay, ToolProgress, Usage,
};
use serde_json::{Number, Value};

use crate::provider::ModelUsage;
use crate::tools::UserPrompt;

fn sid(session_id: &str) -> String {
    session_id.to_owned()
}

fn turn_number(turn: u64) -> i64 {
    i64::try_from(turn).unwrap_or(i64::MAX)
}

pub fn turn_start(session_id: &str, turn: u64) -> JsonObject {
    StreamMessage::TurnStart {
        session_id: sid(session_id),
        turn: turn_number(turn),
    }
    .to_data()
}

pub fn turn_end(session_id: &str, turn: u64) -> JsonObject {
    StreamMessage::TurnEnd {
        session_id: sid(session_id),
        turn: turn_number(turn),
    }
    .to_data()
}

pub fn turn_interrupted(
    session_id: &str,
    input_id: &str,
    request_id: &str,
    turn: u64,
) -> JsonObject {
    StreamMessage::TurnInterrupted {
        session_id: sid(session_id),
        input_id: input_id.to_owned(),
        request_id: request_id.to_owned(),
        turn: turn_number(turn),
    }
    .to_data()
}

pub fn input_applied(
    session_id: &str,
    input_id: &str,
    request_id: &str,
    priority: Priority,
    turn: u64,
) -> JsonObject {
    StreamMessage::InputApplied {
        session_id: sid(session_id),
        input_id: input_id.to_owned(),
        request_id: request_id.to_owned(),
        priority,
        turn: turn_number(turn),
    }
    .to_data()
}

pub fn content(session_id: &str, delta: &str) -> JsonObject {
    StreamMessage::content(session_id, delta).to_data()
}

pub fn thinking(session_id: &str, delta: &str) -> JsonObject {
    StreamMessage::Thinking {
        session_id: sid(session_id),
        delta: delta.to_owned(),
    }
    .to_data()
}

pub fn tool_use(session_id: &str, id: &str, name: &str, input: &Value) -> JsonObject {
    StreamMessage::ToolUse {
        session_id: sid(session_id),
        id: id.to_owned(),
        name: name.to_owned(),
        input: input.clone(),
    }
    .to_data()
}

pub fn tool_progress(
    session_id: &str,
    id: &str,
    name: &str,
    update: &crate::tools::ToolProgressUpdate,
) -> JsonObject {
    StreamMessage::ToolProgress {
        session_id: sid(session_id),
        id: id.to_owned(),
        name: name.to_owned(),
        progress: ToolProgress {
            kind: ProgressKind::Progress,
            message: update.message.clone(),
            data: update.data.clone(),
            completed: update.completed.clone(),
            total: update.total.clone(),
            resume_token: None,
        },
    }
    .to_data()
}

pub fn tool_message(
    session_id: &str,
    id: &str,
    name: &str,
    update: &crate::tools::ToolProgressUpdate,
) -> JsonObject {
    StreamMessage::ToolMessage {
        session_id: sid(session_id),
        id: id.to_owned(),
        name: name.to_owned(),
        content: ToolDisplay {
            summary: update.message.clone().unwrap_or_default(),
            detail: None,
        },
    }
    .to_data()
}

/// `tool_permission_updates`: the session now allows `name` (an approval for the session).
pub fn tool_permission_allowed(session_id: &str, id: &str, name: &str) -> JsonObject {
    StreamMessage::ToolPermissionUpdates {
        session_id: sid(session_id),
        id: id.to_owned(),
        name: name.to_owned(),
        updates: vec![PermissionUpdate::AddRules {
            rules: vec![PermissionRule {
                tool_name: name.to_owned(),
                rule_content: None,
            }],
            behavior: PermissionBehavior::Allow,
        }],
    }
    .to_data()
}

pub fn tool_runtime_patch(
    session_id: &str,
    id: &str,
    name: &str,
    patch: &agent_runtime::protocol::stream::RuntimePatch,
) -> JsonObject {
    StreamMessage::ToolRuntimePatch {
        session_id: sid(session_id),
        id: id.to_owned(),
        name: name.to_owned(),
        patch: patch.clone(),
    }
    .to_data()
}

pub fn tool_context_patch(
    session_id: &str,
    id: &str,
    name: &str,
    patch: &agent_runtime::protocol::stream::ContextPatch,
) -> JsonObject {
    StreamMessage::ToolContextPatch {
        session_id: sid(session_id),
        id: id.to_owned(),
        name: name.to_owned(),
        patch: patch.clone(),
    }
    .to_data()
}

pub fn tool_new_messages(
    session_id: &str,
    id: &str,
    name: &str,
    messages: &[agent_runtime::protocol::content::ModelMessage],
) -> JsonObject {
    StreamMessage::ToolNewMessages {
        session_id: sid(session_id),
        id: id.to_owned(),
        name: name.to_owned(),
        messages: messages.to_vec(),
    }
    .to_data()
}

pub fn tool_result(
    session_id: &str,
    id: &str,
    name: &str,
    output: &Value,
    summary: &str,
    is_error: bool,
) -> JsonObject {
    StreamMessage::ToolResult {
        session_id: sid(session_id),
        id: id.to_owned(),
        name: name.to_owned(),
        output: output.clone(),
        display: Some(ToolDisplay {
            summary: summary.to_owned(),
            detail: None,
        }),
        is_error: Some(is_error),
    }
    .to_data()
}

pub fn usage(session_id: &str, usage: ModelUsage) -> JsonObject {
    StreamMessage::Usage {
        session_id: sid(session_id),
        usage: Usage {
            input_tokens: Number::from(usage.input_tokens),
            output_tokens: Number::from(usage.output_tokens),
            total_tokens: Number::from(usage.input_tokens + usage.output_tokens),
            max_context_tokens: Number::from(usage.max_context_tokens),
            cache_read_input_tokens: None,
            cache_miss_input_tokens: None,
            billable_input_tokens: None,
            reasoning_tokens: None,
        },
    }
    .to_data()
}

pub fn result_success(session_id: &str, content: &str) -> JsonObject {
    StreamMessage::Result {
        session_id: sid(session_id),
        subtype: ResultSubtype::Success,
        content: Some(content.to_owned()),
        error: None,
    }
    .to_data()
}

pub fn result_error(session_id: &str, error: &str) -> JsonObject {
    StreamMessage::Result {
        session_id: sid(session_id),
        subtype: ResultSubtype::Error,
        content: None,
        error: Some(error.to_owned()),
    }
    .to_data()
}

pub fn error(session_id: &str, message: &str, code: &str) -> JsonObject {
    StreamMessage::Error {
        session_id: sid(session_id),
        message: message.to_owned(),
        code: Some(code.to_owned()),
    }
    .to_data()
}

/// `permission.requested` data (docs/protocol.md §6.3).
pub fn permission_requested(
    permission_request_id: &str,
    tool_name: &str,
    input: &Value,
    prompt: &UserPrompt,
    affected_paths: &[String],
) -> JsonObject {
    let input = input.as_object().cloned().unwrap_or_default();
    PermissionRequestedData {
        permission_request_id: permission_request_id.to_owned(),
        tool_name: tool_name.to_owned(),
        input,
        title: prompt.title.clone(),
        message: prompt.message.clone(),
        kind: prompt.kind.clone(),
        affected_paths: affected_paths.to_vec(),
        risks: Vec::new(),
    }
    .to_data()
}
