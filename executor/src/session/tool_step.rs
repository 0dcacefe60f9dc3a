//! Running the tool calls of one model step through the permission pipeline.
//!
//! Order (agent.md): input validation → rules and mode (read-only tools are allowed, the rest
//! ask unless approved for the session) → approval → run. Every call ends with a `tool_result`,
//! even when it was denied, cancelled or never started, so the conversation stays valid.

use std::sync::Arc;

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::EventType;
use agent_runtime::protocol::content::{ModelMessage, Role, UserContent};
use agent_runtime_store::StoreError;
use serde_json::{Value, json};

use super::request::append_message;
use super::{LiveSession, RunningRequest, emit};
use crate::approvals::{ApprovalFailure, ApprovalRequest, ApprovalScope};
use crate::provider::ModelToolCall;
use crate::tools::{ToolEffect, ToolOutcome};

/// Runs the calls in order and returns the tool messages added to the conversation.
pub(super) async fn run_tool_calls(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    calls: &[ModelToolCall],
) -> Result<Vec<ModelMessage>, StoreError> {
    let sid = session.session_id.clone();
    let request_id = &request.request_id;
    let mut messages = Vec::with_capacity(calls.len());
    for call in calls {
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        session
            .publish_stream(
                request_id,
                emit::tool_use(&sid, &call.id, &call.name, &input),
            )
            .await?;
        let outcome = if request.cancel.is_cancelled() {
            interrupted()
        } else {
            tokio::select! {
                biased;
                () = request.cancel.cancelled() => interrupted(),
                outcome = decide_and_run(session, request, call, input) => outcome?,
            }
        };
        session
            .publish_stream(
                request_id,
                emit::tool_result(
                    &sid,
                    &call.id,
                    &call.name,
                    &outcome.output,
                    &outcome.summary,
                    outcome.is_error,
                ),
            )
            .await?;
        let message = tool_message(call, &outcome);
        append_message(session, &message).await?;
        messages.push(message);
    }
    Ok(messages)
}

async fn decide_and_run(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    call: &ModelToolCall,
    input: Value,
) -> Result<ToolOutcome, StoreError> {
    let Some(tool) = session.deps.tools.get(&call.name).cloned() else {
        return Ok(refused(&format!("Unknown tool: {}", call.name)));
    };
    if !input.is_object() {
        return Ok(refused("Tool input must be a JSON object"));
    }
    let needs_approval = match tool.effect() {
        ToolEffect::ReadOnly => false,
        ToolEffect::Edit | ToolEffect::Execute => !session.approved_for_session(&call.name),
    };
    if needs_approval {
        let permission_request_id = nanoid();
        let approval = ApprovalRequest {
            tenant_id: session.tenant_id.clone(),
            session_id: session.session_id.clone(),
            subject: session.approver(),
            permission_request_id: permission_request_id.clone(),
            request_id: Some(request.request_id.clone()),
        };
        let data = emit::permission_requested(
            &permission_request_id,
            &call.name,
            &input,
            &tool.approval_title(&input),
            &format!("The agent wants to run the tool {}.", call.name),
        );
        // `permission.requested` carries no requestId (protocol.md §6.1).
        let publish = async {
            session
                .publish(EventType::PermissionRequested, None, data)
                .await
                .map_err(|error| error.to_string())
        };
        match session.deps.approvals.request(approval, publish).await {
            Ok(decision) if decision.approved => {
                if decision.scope == Some(ApprovalScope::Session) {
                    session.remember_session_approval(&call.name);
                }
            }
            Ok(decision) => {
                let reason = decision
                    .reason
                    .unwrap_or_else(|| "The user denied this tool call".to_owned());
                return Ok(ToolOutcome {
                    output: json!({ "denied": true, "reason": reason }),
                    is_error: true,
                    summary: "Denied".to_owned(),
                });
            }
            Err(ApprovalFailure::PublishFailed(message)) => {
                return Err(StoreError::Backend {
                    message,
                    retry_safe: false,
                });
            }
            Err(failure) => return Ok(refused(&failure.to_string())),
        }
    }
    Ok(tool.run(input, crate::tools::ToolContext::detached()).await)
}

fn refused(message: &str) -> ToolOutcome {
    ToolOutcome {
        output: json!({ "error": message }),
        is_error: true,
        summary: message.to_owned(),
    }
}

fn interrupted() -> ToolOutcome {
    ToolOutcome {
        output: json!({ "error": "The tool call was interrupted" }),
        is_error: true,
        summary: "Interrupted".to_owned(),
    }
}

fn tool_message(call: &ModelToolCall, outcome: &ToolOutcome) -> ModelMessage {
    let output = serde_json::to_string(&outcome.output).unwrap_or_default();
    let content = if outcome.is_error {
        format!("Error: {output}")
    } else {
        output
    };
    ModelMessage {
        id: None,
        role: Role::Tool,
        content: UserContent::Text(content),
        reasoning_content: None,
        tool_call_id: Some(call.id.clone()),
        name: Some(call.name.clone()),
        tool_calls: None,
        metadata: None,
        model_identity: None,
    }
}
