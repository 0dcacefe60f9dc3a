//! The agent loop of one request (docs/agent.md §1): model step → tools → model step … until the
//! model answers without tool calls (`result`), fails (`error` + `result`), is aborted, or runs out
//! of turns. Every event reaches the store before anyone sees it.

use std::sync::Arc;

use agent_runtime::protocol::content::{ModelMessage, Priority, Role};
use agent_runtime_store::{RequestStep, RequestStepKind, StoreError, TranscriptMutation};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

use super::emit;
use super::messages::{append_message, assistant_message};
use super::store_failure::{JournalEnd, StoreFailure, close_after_store_failure};
use super::tool_step::run_tool_calls;
use super::{Input, LiveSession, RunningRequest, max_turns, message_object};
use crate::provider::{ModelDelta, ModelRequest, ModelTurn, ProviderError, ToolSpec};
use crate::session::model_call::ModelCallTelemetry;

/// Most deltas written in one append.
const MAX_DELTA_BATCH: usize = 64;

/// Runs requests until the queue is empty.
pub(super) async fn drive(session: Arc<LiveSession>, first: RunningRequest) {
    let mut next = Some(first);
    while let Some(request) = next {
        if let Err(failure) = run(&session, &request).await {
            close_after_store_failure(&session, &request, failure).await;
        }
        next = session.finish_request().await;
    }
}

/// How a request ended.
enum Outcome {
    /// The model's answer, and its message (unless the conversation already has it), which
    /// the request's end step writes.
    Success {
        content: String,
        message: Option<Box<ModelMessage>>,
    },
    Failed {
        message: String,
        code: String,
    },
    Stopped,
}

async fn run(session: &Arc<LiveSession>, request: &RunningRequest) -> Result<(), StoreFailure> {
    let mut started = request.started;
    if request.needs_acceptance {
        started = session.starts_in_one_step(request);
        session
            .start_request(request, None)
            .await
            .map_err(StoreFailure::before_end)?;
    }
    let outcome = match run_turns(session, request, started)
        .await
        .map_err(StoreFailure::before_end)?
    {
        Some(outcome) => outcome,
        None => Outcome::Stopped,
    };
    finish(session, request, outcome).await
}

/// Writes a request's last message, its terminal events (one append, so they land together or
/// not at all) and its terminal journal entry: in one commit where the store can, else one
/// after the other.
async fn finish(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    outcome: Outcome,
) -> Result<(), StoreFailure> {
    let sid = &session.session_id;
    session.begin_ending();
    let mut last_message = None;
    let (events, end) = match outcome {
        Outcome::Success { content, message } => {
            last_message = message;
            (
                vec![emit::result_success(sid, &content)],
                JournalEnd::new("request_completed", request.ending_facts(true, json!({}))),
            )
        }
        Outcome::Failed { message, code } => (
            vec![
                emit::error(sid, &message, &code),
                emit::result_error(sid, &message),
            ],
            JournalEnd::new(
                "request_failed",
                request.ending_facts(
                    false,
                    json!({ "error": { "message": message, "code": code } }),
                ),
            ),
        ),
        Outcome::Stopped => {
            let reason = session.stop_reason();
            (
                vec![
                    emit::error(sid, reason.message(), reason.code()),
                    emit::result_error(sid, reason.message()),
                ],
                JournalEnd::new(
                    "request_interrupted",
                    request.ending_facts(false, json!({ "reason": reason.durable_reason() })),
                ),
            )
        }
    };
    if session.deps.sink.writes_steps_atomically() {
        // All or nothing (R1): a failure leaves nothing of the end stored.
        let step = RequestStep {
            kind: RequestStepKind::End,
            events: Vec::new(),
            journal: vec![end.draft(&request.request_id)],
            transcript: last_message
                .map(|message| TranscriptMutation::AppendMessages(vec![message_object(&message)])),
            receipt: None,
        };
        return session
            .write_step(&request.request_id, events, step)
            .await
            .map(|_| ())
            .map_err(StoreFailure::before_end);
    }
    if let Some(message) = &last_message {
        append_message(session, message)
            .await
            .map_err(StoreFailure::before_end)?;
    }
    session
        .publish_stream_batch(&request.request_id, events)
        .await
        .map_err(StoreFailure::before_end)?;
    end.write(session, &request.request_id)
        .await
        .map_err(|error| StoreFailure {
            error,
            ended: Some(end),
        })
}

/// Whether the first turn of `request` may begin (the turn and token limits the loop checks).
pub(super) fn first_turn_allowed(session: &LiveSession, request: &RunningRequest) -> bool {
    max_turns(session, request) >= 1 && session.deps.max_request_tokens != Some(0)
}

/// The turn loop. `Ok(None)` means the request was stopped (abort, close, shutdown). `started`:
/// the request's start step applied its input and announced the first `turn_start`.
/// Stays whole: the turn loop, where every stop condition is read in the order the reference checks
/// them.
async fn run_turns(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    started: bool,
) -> Result<Option<Outcome>, StoreError> {
    let request_id = &request.request_id;
    let sid = session.session_id.clone();
    if !started {
        apply_input(session, &request.input, request_id, None).await?;
    }
    let max_turns = max_turns(session, request);
    let mut messages = session.model_messages().await?;
    let mut turn: u64 = 0;
    loop {
        turn += 1;
        // Turns and model tokens (from the provider's `usage`, RES-11), its subagents' included;
        // checked before each model call, after the previous turn's tools ran, so the transcript
        // stays valid for the provider.
        let max_tokens = session.deps.max_request_tokens;
        if let Err(spent) = request.budget.take_turn(max_turns, max_tokens) {
            return Ok(Some(Outcome::Failed {
                message: spent.message,
                code: spent.code.to_owned(),
            }));
        }
        if !(started && turn == 1) {
            session
                .publish_stream(request_id, emit::turn_start(&sid, turn))
                .await?;
        }

        // Only a `now` input that arrives during this model step interrupts it.
        let mut interrupts = request.interrupt.subscribe();
        let step = tokio::select! {
            biased;
            () = request.cancel.cancelled() => return Ok(None),
            Ok(()) = interrupts.changed() => Step::Interrupted,
            step = model_step(session, request, &messages) => step?,
        };
        let model_turn = match step {
            Step::Interrupted => {
                // Partial output of the interrupted step stays out of the model's context.
                apply_interrupting_inputs(session, request_id, turn).await?;
                messages = session.model_messages().await?;
                continue;
            }
            Step::Failed(error) => {
                return Ok(Some(Outcome::Failed {
                    message: error.message,
                    code: error.code.as_str().to_owned(),
                }));
            }
            Step::Done(model_turn) => model_turn,
        };

        request.budget.add_tokens(&model_turn.usage);
        session.defer_stream(request_id, emit::usage(&sid, model_turn.usage));
        let assistant = assistant_message(&model_turn);
        let had_tool_calls = !model_turn.tool_calls.is_empty();
        if had_tool_calls {
            append_message(session, &assistant).await?;
            messages.push(Arc::new(assistant.clone()));
            let step = run_tool_calls(session, request, &model_turn.tool_calls).await?;
            messages.extend(step.messages.into_iter().map(Arc::new));
            if request.cancel.is_cancelled() {
                return Ok(None);
            }
            if step.ends_request {
                // The user declined a prompt that ends the request (a rejected plan): the
                // conversation already holds the turn; the request ends without a new message.
                session.defer_stream(request_id, emit::turn_end(&sid, turn));
                return Ok(Some(Outcome::Success {
                    content: model_turn.content,
                    message: None,
                }));
            }
        }
        session.defer_stream(request_id, emit::turn_end(&sid, turn));

        let steering = session.take_steering().await;
        if steering.is_empty() && !had_tool_calls {
            // The answer: its message is written with the request's end (`finish`).
            return Ok(Some(Outcome::Success {
                content: model_turn.content,
                message: Some(Box::new(assistant)),
            }));
        }
        if !had_tool_calls {
            append_message(session, &assistant).await?;
        }
        if !steering.is_empty() {
            for input in &steering {
                apply_input(session, input, request_id, Some(turn)).await?;
            }
            messages = session.model_messages().await?;
        }
    }
}

/// A `now` input interrupted the model step of `turn`: each waiting input announces the
/// interruption, then each is applied.
async fn apply_interrupting_inputs(
    session: &LiveSession,
    request_id: &str,
    turn: u64,
) -> Result<(), StoreError> {
    let steering = session.take_steering().await;
    for input in &steering {
        session
            .publish_stream(
                request_id,
                emit::turn_interrupted(&session.session_id, &input.input_id, request_id, turn),
            )
            .await?;
    }
    for input in &steering {
        apply_input(session, input, request_id, Some(turn)).await?;
    }
    Ok(())
}

enum Step {
    Done(ModelTurn),
    Failed(ProviderError),
    Interrupted,
}

/// One model call, its deltas published as they arrive.
async fn model_step(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    messages: &[Arc<ModelMessage>],
) -> Result<Step, StoreError> {
    let request_id = request.request_id.as_str();
    // Without `Skill` no skill can be active: no scan of the conversation on every turn.
    let skill = session
        .tools
        .get(crate::tools::SKILL_TOOL)
        .and_then(|_| crate::tools::active_policy(messages));
    // The active skill's model as this session's profile configures it now (a fork or a
    // changed profile never carries another profile's model over).
    let model = skill
        .as_ref()
        .and_then(|(name, _)| session.tools.skill_model(name).map(str::to_owned));
    let call_telemetry =
        ModelCallTelemetry::start(session, request.input.trace.as_ref(), model.as_deref());
    let model_request = ModelRequest {
        messages: messages.to_vec(),
        tools: offered_tools(session, messages, skill.as_ref().map(|(_, policy)| policy)),
        model,
        trace: Some(call_telemetry.span.context().clone()),
    };
    let (sender, mut receiver) = mpsc::channel(64);
    let provider = Arc::clone(&session.profile.provider);
    let call = async move {
        let answer = provider.complete(&model_request, sender).await;
        call_telemetry.end(&answer);
        answer
    };
    let sid = session.session_id.clone();
    let to_data = |delta: ModelDelta| match delta {
        ModelDelta::Content(text) => emit::content(&sid, &text),
        ModelDelta::Thinking(text) => emit::thinking(&sid, &text),
    };
    // Group commit: whatever deltas are already waiting go out in one append, so a fast stream
    // does not cost one store commit per token, and a slow one adds no latency. Where the
    // request's end is one write (`writes_steps_atomically`), deltas that arrive with the end of
    // the stream go out with the turn's next write instead (the request's end, or the turn's
    // next event), which follows at once; elsewhere the end is several writes, and they would
    // wait for the first of them.
    let defers_at_end = session.deps.sink.writes_steps_atomically();
    let forward = async {
        while let Some(first) = receiver.recv().await {
            let mut batch = vec![to_data(first)];
            let mut ended = false;
            while batch.len() < MAX_DELTA_BATCH {
                match receiver.try_recv() {
                    Ok(delta) => batch.push(to_data(delta)),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        ended = defers_at_end;
                        break;
                    }
                }
            }
            match ended {
                true => batch
                    .into_iter()
                    .for_each(|data| session.defer_stream(request_id, data)),
                false => session.publish_stream_batch(request_id, batch).await?,
            }
        }
        Ok::<(), StoreError>(())
    };
    let (answer, forwarded) = tokio::join!(call, forward);
    forwarded?;
    Ok(match answer {
        Ok(turn) => Step::Done(turn),
        Err(error) => Step::Failed(error),
    })
}

/// Applies an input to the transcript; steering inputs also announce `input_applied`.
async fn apply_input(
    session: &LiveSession,
    input: &Input,
    request_id: &str,
    turn: Option<u64>,
) -> Result<(), StoreError> {
    session
        .mutate_transcript(input_applied(input, request_id))
        .await?;
    if let Some(turn) = turn {
        let priority = match input.priority {
            Priority::Now => Priority::Now,
            Priority::Next | Priority::Later => Priority::Next,
        };
        session
            .publish_stream(
                request_id,
                super::emit::input_applied(
                    &session.session_id,
                    &input.input_id,
                    request_id,
                    priority,
                    turn,
                ),
            )
            .await?;
    }
    Ok(())
}

/// The transcript change that applies `input` for `request_id`: its user message appended, its
/// pending entry (if it waited) removed.
pub(super) fn input_applied(input: &Input, request_id: &str) -> TranscriptMutation {
    let user = ModelMessage::new(Role::User, input.content.clone());
    TranscriptMutation::ApplyInput {
        input_id: input.input_id.clone(),
        request_id: request_id.to_owned(),
        message: message_object(&user),
    }
}

/// The tools the model is offered: the session's (the deferred ones once discovered), narrowed
/// by the active skill's tool `policy`.
fn offered_tools(
    session: &LiveSession,
    messages: &[Arc<ModelMessage>],
    policy: Option<&agent_runtime::protocol::stream::ToolPolicy>,
) -> Vec<ToolSpec> {
    let mut specs = session.tools.specs();
    if session.tools.has_deferred() {
        let found = crate::tools::discovered(messages);
        specs.retain(|spec| session.tools.offered(&spec.name, &found));
    }
    if let Some(policy) = policy {
        specs.retain(|spec| crate::tools::permits(policy, &spec.name));
    }
    specs
}
