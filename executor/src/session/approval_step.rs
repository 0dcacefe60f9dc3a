//! The approval step of a tool call that the rules and the mode leave at `ask`: the question to
//! the session's client (`permission.requested`) and its answer. Shared by a request's own calls
//! and a subagent's, whose asks are raised on the parent session.

use std::sync::Arc;

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::EventType;
use agent_runtime_store::StoreError;
use serde_json::{Value, json};

use super::{LiveSession, RunningRequest, emit};
use crate::approvals::{ApprovalDecision, ApprovalFailure, ApprovalRequest, ApprovalScope};
use crate::permissions::{GlobMode, PermissionMode, Verdict};
use crate::provider::ModelToolCall;
use crate::tools::output::{failed, failure};
use crate::tools::{Tool, ToolCheck, ToolOutcome, UserPrompt};

/// Rule patterns of file tools match paths (`*` stays within a directory); the subject of
/// `Bash` is a command line judged per simple command; the others' are URLs.
pub(super) fn subject_mode(tool: &str) -> GlobMode {
    match tool {
        "Read" | "Write" | "Edit" | "NotebookEdit" | "Glob" | "Grep" => GlobMode::Path,
        "Bash" => GlobMode::Command,
        "WebFetch" => GlobMode::Url,
        _ => GlobMode::Text,
    }
}

/// Step 5 for a call the rules did not deny: asks a human when the verdict (or a call of a
/// stronger kind than its tool's) requires it. `Some(outcome)` when the call must not run.
/// `child` names the subagent making the call: its prompt says so, and a session-wide approval
/// it gets is not remembered (each child call outside one asks).
#[allow(clippy::too_many_arguments)]
pub(super) async fn approve(
    asker: &Asker,
    call: &ModelToolCall,
    tool: &Arc<dyn Tool>,
    input: &Value,
    check: &ToolCheck,
    verdict: &Verdict,
    mode: PermissionMode,
    child: Option<&str>,
) -> Result<Option<ToolOutcome>, StoreError> {
    let session = &asker.session;
    // A call of a stronger kind than its tool's (a WebFetch POST) is asked for each time outside
    // `yolo`: rules and session approvals given for the tool's reads do not cover it.
    let escalated = tool.effect_of(input) != tool.effect() && mode != PermissionMode::Yolo;
    match verdict {
        Verdict::Deny(reason) => return Ok(Some(failure(reason.clone()))),
        Verdict::Allow if !escalated => return Ok(None),
        Verdict::Ask if !escalated && session.approved_for_session(&call.name) => return Ok(None),
        Verdict::Allow | Verdict::Ask => {}
    }
    let title = tool.approval_title(input);
    let prompt = UserPrompt {
        title: match child {
            Some(agent) => format!("[{agent}] {title}"),
            None => title,
        },
        message: match child {
            Some(agent) => format!("The subagent {agent} wants to run the tool {}.", call.name),
            None => format!("The agent wants to run the tool {}.", call.name),
        },
        kind: None,
    };
    match asker
        .answer(&call.name, input, &prompt, &check.affected_paths)
        .await?
    {
        Ok(decision) if decision.approved => {
            if !escalated && child.is_none() && decision.scope == Some(ApprovalScope::Session) {
                session.remember_session_approval(&call.name);
                // The session now allows the tool: said as the reference's permission update.
                let update =
                    emit::tool_permission_allowed(&session.session_id, &call.id, &call.name);
                session.publish_stream(&asker.request_id, update).await?;
            }
            Ok(None)
        }
        Ok(decision) => {
            let reason = decision
                .reason
                .unwrap_or_else(|| "The user denied this tool call".to_owned());
            Ok(Some(failed(
                json!({ "denied": true, "reason": reason }),
                "Denied".to_owned(),
            )))
        }
        Err(failed) => Ok(Some(failure(failed.to_string()))),
    }
}

/// Who answers a session's permission prompts, and for which request: the request's approver,
/// for the request's own calls and for its subagents' (whose prompts name them).
#[derive(Clone, Debug)]
pub(super) struct Asker {
    pub session: Arc<LiveSession>,
    pub approver: String,
    pub request_id: String,
}

impl Asker {
    pub fn of(session: &Arc<LiveSession>, request: &RunningRequest) -> Self {
        Self {
            session: Arc::clone(session),
            approver: session.approver(request),
            request_id: request.request_id.clone(),
        }
    }

    /// Publishes `permission.requested` and waits for `permission.resolve`. A request that
    /// could not be published is a store failure (nobody could have seen it).
    pub async fn answer(
        &self,
        tool_name: &str,
        input: &Value,
        prompt: &UserPrompt,
        affected_paths: &[String],
    ) -> Result<Result<ApprovalDecision, ApprovalFailure>, StoreError> {
        let session = &self.session;
        let permission_request_id = nanoid();
        let approval = ApprovalRequest {
            tenant_id: session.tenant_id.clone(),
            session_id: session.session_id.clone(),
            subject: self.approver.clone(),
            permission_request_id: permission_request_id.clone(),
            request_id: Some(self.request_id.clone()),
        };
        let data = emit::permission_requested(
            &permission_request_id,
            tool_name,
            input,
            prompt,
            affected_paths,
        );
        // `permission.requested` carries no requestId (docs/protocol.md §6.1).
        let publish = async {
            session
                .publish(EventType::PermissionRequested, None, data)
                .await
                .map_err(|error| error.to_string())
        };
        match session.deps.approvals.request(approval, publish).await {
            Err(ApprovalFailure::PublishFailed(message)) => Err(StoreError::Backend {
                message,
                retry_safe: false,
            }),
            answered => Ok(answered),
        }
    }
}
