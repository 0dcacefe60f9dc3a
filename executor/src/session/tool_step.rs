//! Running the tool calls of one model step through the permission pipeline.
//!
//! Order (docs/agent.md §3): 1. input validation against the tool's schema → 2. the tool's own
//! safety checks (path safety, URL safety; no rule can override them) → 3. rules (`deny`, `ask`,
//! `allow`) → 4. the mode's default → 5. approval for `ask` (unless approved for the session)
//! → 6. run (sandboxed for `Bash`). Every call ends with a `tool_result`, even when it was
//! refused, denied, cancelled or never started, so the conversation stays valid and the model
//! learns why.

use std::sync::Arc;

use agent_runtime_store::AgentMemories;

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::EventType;
use agent_runtime::protocol::content::{
    ModelMessage, Provenance, ProvenanceSource, Role, UserContent,
};
use agent_runtime::protocol::stream::{ContextPatch, PatchScope};
use agent_runtime_store::StoreError;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::request::append_message;
use super::subagent::ChildRunner;
use super::{LiveSession, RunningRequest, emit};
use crate::approvals::{ApprovalDecision, ApprovalFailure, ApprovalRequest, ApprovalScope};
use crate::permissions::{GlobMode, PermissionMode, Subject, Verdict};
use crate::provider::ModelToolCall;
use crate::tools::agents::TASK_AGENT_TOOL;
use crate::tools::output::{failed, failure};
use crate::tools::{
    SKILL_TOOL, Tool, ToolCheck, ToolContext, ToolOutcome, UserAnswer, UserPrompt, active_policy,
    effective_mode, permits, schema,
};

/// The tool messages one step added to the conversation, and whether the step ends the request
/// (the user declined a prompt that ends it: a rejected plan).
pub(super) struct StepResults {
    pub messages: Vec<ModelMessage>,
    pub ends_request: bool,
}

/// What one call came to.
struct CallResult {
    outcome: ToolOutcome,
    ends_request: bool,
}

impl From<ToolOutcome> for CallResult {
    fn from(outcome: ToolOutcome) -> CallResult {
        CallResult {
            outcome,
            ends_request: false,
        }
    }
}

/// Runs the calls in order and returns the tool messages added to the conversation.
pub(super) async fn run_tool_calls(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    calls: &[ModelToolCall],
) -> Result<StepResults, StoreError> {
    let sid = session.session_id.clone();
    let request_id = &request.request_id;
    let mut messages = Vec::with_capacity(calls.len());
    // Messages the calls add: appended after every tool result of the step (the reference's
    // order), so each tool call stays answered right after the model's message.
    let mut injected = Vec::new();
    let mut ends_request = false;
    for call in calls {
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        session
            .publish_stream(
                request_id,
                emit::tool_use(&sid, &call.id, &call.name, &input),
            )
            .await?;
        let result: CallResult = if request.cancel.is_cancelled() {
            interrupted().into()
        } else {
            tokio::select! {
                biased;
                () = request.cancel.cancelled() => interrupted().into(),
                result = decide_and_run(session, request, call, input) => result?,
            }
        };
        ends_request |= result.ends_request;
        let outcome = result.outcome;
        if let Some(patch) = &outcome.patch {
            session
                .publish_stream(
                    request_id,
                    emit::tool_runtime_patch(&sid, &call.id, &call.name, patch),
                )
                .await?;
        }
        if let Some(patch) = &outcome.context_patch {
            session
                .publish_stream(
                    request_id,
                    emit::tool_context_patch(&sid, &call.id, &call.name, patch),
                )
                .await?;
        }
        if !outcome.new_messages.is_empty() {
            let added: Vec<ModelMessage> = outcome
                .new_messages
                .iter()
                .map(|message| ModelMessage {
                    provenance: Some(Provenance {
                        source: ProvenanceSource::ToolInjection,
                    }),
                    ..message.clone()
                })
                .collect();
            session
                .publish_stream(
                    request_id,
                    emit::tool_new_messages(&sid, &call.id, &call.name, &added),
                )
                .await?;
            injected.extend(added);
        }
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
    for message in injected {
        append_message(session, &message).await?;
        messages.push(message);
    }
    Ok(StepResults {
        messages,
        ends_request,
    })
}

async fn decide_and_run(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    call: &ModelToolCall,
    input: Value,
) -> Result<CallResult, StoreError> {
    let Some(tool) = session.tools.get(&call.name) else {
        return Ok(failure(format!("Unknown tool: {}", call.name)).into());
    };
    let conversation = session.model_messages().await?;
    // Before anything about the call is checked: a hidden tool's errors would reveal it.
    if session.tools.has_deferred()
        && !session
            .tools
            .offered(&call.name, &crate::tools::discovered(&conversation))
    {
        return Ok(failure(format!(
            "{} is not available until DiscoverTools finds it",
            call.name
        ))
        .into());
    }
    if let Err(error) = schema::validate(&tool.spec().input_schema, &input) {
        return Ok(failure(format!("Invalid input: {error}")).into());
    }
    let check = match tool.check(&input) {
        Ok(check) => check,
        Err(reason) => return Ok(failure(format!("Refused: {reason}")).into()),
    };
    let subject = check.subject.as_deref().map(|text| Subject {
        text,
        mode: subject_mode(&call.name),
    });
    let skills = session.tools.get(SKILL_TOOL).is_some();
    if let Some((skill, tools)) = active_policy(&conversation).filter(|_| skills)
        && !permits(&tools, &call.name)
    {
        return Ok(failure(format!(
            "{} is not available while the skill {skill} is active",
            call.name
        ))
        .into());
    }
    let policy = &session.profile.permissions;
    // The session's mode: the configured one, or `plan` while an approved plan mode lasts.
    let mode = effective_mode(policy.mode, &conversation);
    let verdict = policy.decide_in(mode, &call.name, tool.effect_of(&input), subject);
    if let Verdict::Deny(reason) = verdict {
        return Ok(failure(reason).into());
    }
    // A tool whose work is asking the user asks whatever the mode; its answer goes to `run`.
    if let Some(prompt) = tool.user_prompt(&input) {
        // One nobody gave (a timeout, an abort) is not approved.
        let asker = Asker::of(session, request);
        let answer = match asker
            .answer(&call.name, &input, &prompt, &check.affected_paths)
            .await?
        {
            Ok(decision) => UserAnswer {
                approved: decision.approved,
                reason: decision.reason,
            },
            Err(_) => UserAnswer::default(),
        };
        let ends_request = !answer.approved && tool.ends_request_when_declined();
        let mut outcome = run_with_progress(
            session,
            request,
            call,
            tool,
            input,
            conversation.clone(),
            Some(answer),
        )
        .await?;
        // An approved plan tool changes the session's permission mode: say so, as a context
        // patch (its `metadata.permissionMode`), before the call's result.
        let mut after = conversation;
        after.push(Arc::new(tool_message(call, &outcome)));
        let changed = effective_mode(policy.mode, &after);
        if changed != mode {
            outcome.context_patch = Some(mode_patch(changed, mode));
        }
        return Ok(CallResult {
            outcome,
            ends_request,
        });
    }
    let asker = Asker::of(session, request);
    if let Some(denied) = approve(&asker, call, &tool, &input, &check, &verdict, mode, None).await?
    {
        return Ok(denied.into());
    }
    let outcome =
        run_with_progress(session, request, call, tool, input, conversation, None).await?;
    Ok(outcome.into())
}

/// Rule patterns of file tools match paths (`*` stays within a directory); the subject of
/// `Bash` is a command line judged per simple command; the others' are URLs.
pub(super) fn subject_mode(tool: &str) -> GlobMode {
    match tool {
        "Read" | "Write" | "Edit" | "NotebookEdit" | "Glob" | "Grep" => GlobMode::Path,
        "Bash" => GlobMode::Command,
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

/// Runs the tool while its progress reports become `tool_progress` events.
async fn run_with_progress(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    call: &ModelToolCall,
    tool: Arc<dyn Tool>,
    input: Value,
    conversation: Vec<Arc<ModelMessage>>,
    answer: Option<UserAnswer>,
) -> Result<ToolOutcome, StoreError> {
    let (progress, mut reports) = mpsc::channel(16);
    // The context (and with it the sender) is dropped when `run` returns, ending `forward`.
    let run = tool.run(
        input,
        ToolContext {
            progress,
            conversation,
            answer,
            shells: Arc::clone(&session.shells),
            tenant_id: session.tenant_id.clone(),
            creator: session.creator.clone(),
            memories: Some(Arc::clone(&session.deps.store) as Arc<dyn AgentMemories>),
            agents: Arc::clone(&session.agents),
            runner: (call.name == TASK_AGENT_TOOL).then(|| {
                Arc::new(ChildRunner::new(session, request))
                    as Arc<dyn crate::tools::agents::AgentRunner>
            }),
        },
    );
    let sid = session.session_id.clone();
    let forward = async {
        while let Some(update) = reports.recv().await {
            let data = match update.note {
                true => emit::tool_message(&sid, &call.id, &call.name, &update),
                false => emit::tool_progress(&sid, &call.id, &call.name, &update),
            };
            session.publish_stream(&request.request_id, data).await?;
        }
        Ok::<(), StoreError>(())
    };
    tokio::pin!(run, forward);
    tokio::select! {
        // The tool's context is dropped with its finished future, so `forward` ends once it has
        // published the last report.
        outcome = &mut run => {
            forward.await?;
            Ok(outcome)
        }
        // A report that cannot be written (the execution lease was lost: another executor may
        // own the session now, LEASE-08) ends the call at once: dropping `run` kills a running
        // command instead of letting it go on unobserved until its own end.
        forwarded = &mut forward => match forwarded {
            Err(error) => Err(error),
            Ok(()) => Ok(run.await),
        },
    }
}

/// The context patch saying the session's permission mode is now `mode` (was `before`).
fn mode_patch(mode: PermissionMode, before: PermissionMode) -> ContextPatch {
    let mut metadata = agent_runtime::protocol::JsonObject::new();
    metadata.insert("permissionMode".to_owned(), json!(mode.as_str()));
    metadata.insert("previousPermissionMode".to_owned(), json!(before.as_str()));
    ContextPatch {
        scope: PatchScope::Session,
        context: Some(agent_runtime::protocol::stream::ToolContext {
            metadata: Some(metadata),
            ..Default::default()
        }),
        reset: None,
    }
}

fn interrupted() -> ToolOutcome {
    failed(
        json!({ "error": "The tool call was interrupted" }),
        "Interrupted".to_owned(),
    )
}

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
