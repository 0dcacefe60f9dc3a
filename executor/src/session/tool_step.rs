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

use agent_runtime::protocol::content::{ModelMessage, Provenance, ProvenanceSource};
use agent_runtime::protocol::stream::{ContextPatch, PatchScope};
use agent_runtime_store::StoreError;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::approval_step::{Asker, approve, subject_mode};
use super::messages::{append_message, tool_message};
use super::subagent::ChildRunner;
use super::{LiveSession, RunningRequest, emit};
use crate::permissions::{PermissionMode, Subject, Verdict};
use crate::provider::ModelToolCall;
use crate::tools::agents::TASK_AGENT_TOOL;
use crate::tools::output::{failed, failure};
use crate::tools::{
    SKILL_TOOL, Tool, ToolContext, ToolOutcome, UserAnswer, active_policy, effective_mode, permits,
    schema,
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
/// Stays whole: the step's calls in order, with the messages they inject kept until every result is
/// in (the reference's order).
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
        let tool_use = emit::tool_use(&sid, &call.id, &call.name, &input);
        let bound = session.deps.event_bound;
        let too_large = bound.excess(&tool_use);
        session.publish_stream(request_id, tool_use).await?;
        let result: CallResult = if request.cancel.is_cancelled() {
            interrupted().into()
        } else if let Some(size) = too_large {
            // Run, it would stream an input no event can carry; the model can split the work.
            failure(format!(
                "The input of this call is {size} bytes, more than one event may carry ({} \
                 bytes); split the work into smaller calls",
                bound.max_bytes()
            ))
            .into()
        } else {
            tokio::select! {
                biased;
                () = request.cancel.cancelled() => interrupted().into(),
                result = decide_and_run(session, request, call, input) => result?,
            }
        };
        ends_request |= result.ends_request;
        let mut outcome = result.outcome;
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
        let mut tool_result = emit::tool_result(
            &sid,
            &call.id,
            &call.name,
            &outcome.output,
            &outcome.summary,
            outcome.is_error,
        );
        // The model reads the output the stream shows, cut the same way.
        if bound.excess(&tool_result).is_some() {
            tool_result = bound.fit_one(tool_result);
            outcome.output = tool_result["output"].clone();
        }
        session.publish_stream(request_id, tool_result).await?;
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

// Stays whole: the permission pipeline in its order (hidden tool, schema, rules, hooks, approval):
// the order is the security property.
async fn decide_and_run(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    call: &ModelToolCall,
    input: Value,
) -> Result<CallResult, StoreError> {
    let Some(tool) = session.tools.get(&call.name) else {
        return Ok(session.tools.not_offered(&call.name).into());
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
            trace: request.input.trace.clone(),
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
