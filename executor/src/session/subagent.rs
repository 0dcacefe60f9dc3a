//! The child agent loop of `Task` (docs/agent.md §6.6): its own history (the definition's system
//! prompt and the task), the session's tools narrowed to the definition's (never `Task`: depth
//! 1), the session's provider, roots, sandbox, rules and permission mode, and the parent
//! request's budgets. A child call the rules do not settle asks the parent session's approver
//! (`permission.requested` names the subagent); nothing is auto-approved. The child lives inside
//! the `Task` call (foreground) or the session's subagent registry (background): dropping it
//! (abort, close, lease loss, `TaskStop`) ends its model call and its running tool.

use std::sync::Arc;

use agent_runtime::protocol::content::{ModelMessage, Role, UserContent};
use agent_runtime::telemetry::{AttributeValue, TraceContext};
use agent_runtime_store::{AgentMemories, StoreError};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::approval_step::{Asker, approve, subject_mode};
use super::max_turns;
use super::messages::{assistant_message, tool_message};
use super::model_call::ModelCallTelemetry;
use super::{LiveSession, RequestBudget, RunningRequest};
use crate::permissions::Subject;
use crate::provider::{ModelRequest, ModelToolCall};
use crate::tools::agents::{AgentDefinition, AgentRunner, ChildOutcome};
use crate::tools::output::failure;
use crate::tools::{Tool, ToolContext, ToolOutcome, ToolProgressUpdate, effective_mode, schema};

/// Runs the children of one request of a session.
#[derive(Debug)]
pub(super) struct ChildRunner {
    asker: Asker,
    budget: Arc<RequestBudget>,
    max_turns: u64,
    /// The parent request's trace: the child's model and tool calls are part of it.
    trace: Option<TraceContext>,
}

impl ChildRunner {
    pub fn new(session: &Arc<LiveSession>, request: &RunningRequest) -> Self {
        Self {
            asker: Asker::of(session, request),
            budget: Arc::clone(&request.budget),
            max_turns: max_turns(session, request),
            trace: request.input.trace.clone(),
        }
    }

    fn session(&self) -> &Arc<LiveSession> {
        &self.asker.session
    }

    /// One child tool call through the permission pipeline.
    async fn call(
        &self,
        agent: &AgentDefinition,
        call: &ModelToolCall,
        conversation: &[Arc<ModelMessage>],
    ) -> Result<ToolOutcome, StoreError> {
        let session = self.session();
        if !agent.permits(&call.name) {
            return Ok(failure(format!("Unknown tool: {}", call.name)));
        }
        let Some(tool) = session.tools.get(&call.name) else {
            return Ok(session.tools.not_offered(&call.name));
        };
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        if let Err(error) = schema::validate(&tool.spec().input_schema, &input) {
            return Ok(failure(format!("Invalid input: {error}")));
        }
        let check = match tool.check(&input) {
            Ok(check) => check,
            Err(reason) => return Ok(failure(format!("Refused: {reason}"))),
        };
        let subject = check.subject.as_deref().map(|text| Subject {
            text,
            mode: subject_mode(&call.name),
        });
        // The parent's mode, as its conversation has it now (a plan mode it is in holds).
        let policy = &session.profile.permissions;
        let mode = effective_mode(policy.mode, &session.model_messages().await?);
        let verdict = policy.decide_in(mode, &call.name, tool.effect_of(&input), subject);
        let child = Some(agent.name.as_str());
        if let Some(denied) = approve(
            &self.asker,
            call,
            &tool,
            &input,
            &check,
            &verdict,
            mode,
            child,
        )
        .await?
        {
            return Ok(denied);
        }
        Ok(self.run(&tool, input, conversation).await)
    }

    async fn run(
        &self,
        tool: &Arc<dyn Tool>,
        input: Value,
        conversation: &[Arc<ModelMessage>],
    ) -> ToolOutcome {
        let session = self.session();
        // A child's own progress stays with it: the parent's stream gets one report per call.
        let (progress, _) = mpsc::channel(1);
        let context = ToolContext {
            progress,
            conversation: conversation.to_vec(),
            answer: None,
            shells: Arc::clone(&session.shells),
            tenant_id: session.tenant_id.clone(),
            creator: session.creator.clone(),
            memories: Some(Arc::clone(&session.deps.store) as Arc<dyn AgentMemories>),
            agents: Arc::clone(&session.agents),
            runner: None,
            trace: self.trace.clone(),
        };
        tool.run(input, context).await
    }
}

#[async_trait]
impl AgentRunner for ChildRunner {
    async fn run_child(
        &self,
        agent: AgentDefinition,
        agent_id: String,
        prompt: String,
        progress: Option<mpsc::Sender<ToolProgressUpdate>>,
    ) -> Result<ChildOutcome, String> {
        let session = self.session();
        let mut messages = vec![
            Arc::new(ModelMessage::new(
                Role::System,
                UserContent::Text(agent.system_prompt.clone()),
            )),
            Arc::new(ModelMessage::new(Role::User, UserContent::Text(prompt))),
        ];
        let tools: Vec<_> = session
            .tools
            .specs()
            .into_iter()
            .filter(|spec| agent.permits(&spec.name))
            .collect();
        let mut outcome = ChildOutcome::default();
        loop {
            // The child spends its parent request's turns and tokens.
            let max_tokens = session.deps.max_request_tokens;
            self.budget
                .take_turn(self.max_turns, max_tokens)
                .map_err(|spent| spent.message)?;
            outcome.turns += 1;
            // Traced and counted like the parent's calls, and named after the subagent.
            let mut call_telemetry =
                ModelCallTelemetry::start(session, self.trace.as_ref(), agent.model.as_deref());
            call_telemetry.span.set(
                "gen_ai.agent.name",
                AttributeValue::String(agent.name.clone()),
            );
            let request = ModelRequest {
                messages: messages.clone(),
                tools: tools.clone(),
                model: agent.model.clone(),
                trace: Some(call_telemetry.span.context().clone()),
            };
            // The child's text is not streamed to the parent (the reference's contract).
            let (deltas, mut drained) = mpsc::channel(64);
            let provider = Arc::clone(&session.profile.provider);
            let (turn, ()) = tokio::join!(provider.complete(&request, deltas), async {
                while drained.recv().await.is_some() {}
            });
            call_telemetry.end(&turn);
            let turn = turn.map_err(|error| error.message)?;
            self.budget.add_tokens(&turn.usage);
            outcome.tokens += turn
                .usage
                .input_tokens
                .saturating_add(turn.usage.output_tokens);
            if turn.tool_calls.is_empty() {
                outcome.result = turn.content;
                return Ok(outcome);
            }
            messages.push(Arc::new(assistant_message(&turn)));
            for call in &turn.tool_calls {
                outcome.tool_calls += 1;
                if let Some(progress) = &progress {
                    // Its name, never its arguments.
                    let _ = progress.try_send(ToolProgressUpdate {
                        message: Some(format!("{}: {}", agent.name, call.name)),
                        data: Some(
                            json!({ "subagentId": agent_id, "event": "tool", "name": call.name }),
                        ),
                        ..ToolProgressUpdate::default()
                    });
                }
                let result = self
                    .call(&agent, call, &messages)
                    .await
                    .map_err(|error| format!("the session's store failed: {error}"))?;
                messages.push(Arc::new(tool_message(call, &result)));
            }
        }
    }
}
