//! Subagents (docs/agent.md §6.6): `Task` runs a child agent loop with its own history, the
//! session's roots and a narrowed tool set, in the foreground (its final text is the result) or
//! in the background (`TaskOutput` reads it, `TaskStop` ends it). The loop itself belongs to the
//! session ([`AgentRunner`]): it runs under the parent's lease, fence and budgets, and asks the
//! parent session's approver whenever a child's call needs a permission.
//!
//! Depth is 1: a child has no `Task` (nor `TaskStop`, the prompt tools, `Skill` or
//! `DiscoverTools`), so a child cannot start children.

mod registry;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use registry::{AgentRecord, ChildOutcome, SessionAgents};

use super::output::{failed, failure, now_ms, success};
use super::tasks::{TaskOperation, TaskTool};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome, ToolProgressUpdate};
use crate::provider::ToolSpec;
use crate::tools::text;

pub const TASK_AGENT_TOOL: &str = "Task";
pub const TASK_STOP_TOOL: &str = "TaskStop";
/// What a child never has: the tools that start children, ask the user or change the
/// session's own state.
pub const CHILD_EXCLUDED_TOOLS: [&str; 7] = [
    "Task",
    "TaskStop",
    "AskUserQuestion",
    "EnterPlanMode",
    "ExitPlanMode",
    "Skill",
    "DiscoverTools",
];
/// What `TaskOutput` says of a background child this process does not have.
pub const LOST_AGENT: &str = "lost: the executor that ran this subagent stopped (a restart or a \
     handoff to another executor); it was not started again and its result is gone.";

/// One kind of subagent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentDefinition {
    /// What the model passes as `subagent_type`.
    pub name: String,
    /// Shown to the model in `Task`'s description.
    pub description: String,
    /// The child's system prompt.
    pub system_prompt: String,
    /// The child's tools (`None`: every tool a child may have).
    pub allowed_tools: Option<Vec<String>>,
    /// The child's model (`None`: the session's).
    pub model: Option<String>,
}

impl AgentDefinition {
    fn new(name: &str, description: &str, system_prompt: &str, tools: Option<&[&str]>) -> Self {
        Self {
            name: name.to_owned(),
            description: description.to_owned(),
            system_prompt: system_prompt.to_owned(),
            allowed_tools: tools.map(|list| list.iter().map(|t| (*t).to_owned()).collect()),
            model: None,
        }
    }

    /// Whether a child of this kind has `tool`.
    pub fn permits(&self, tool: &str) -> bool {
        !CHILD_EXCLUDED_TOOLS.contains(&tool)
            && self
                .allowed_tools
                .as_ref()
                .is_none_or(|list| list.iter().any(|t| t == tool))
    }

    pub fn validate(&self) -> Result<(), String> {
        let plain = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
        if !plain {
            return Err(format!(
                "agent {:?}: a name is 1 to 64 letters, digits, - and _",
                self.name
            ));
        }
        if self.description.trim().is_empty() || self.system_prompt.trim().is_empty() {
            return Err(format!(
                "agent {}: description and system_prompt must not be empty",
                self.name
            ));
        }
        Ok(())
    }
}

/// The reference's built-in agents.
pub fn builtin_agents() -> Vec<AgentDefinition> {
    vec![
        AgentDefinition::new(
            "general-purpose",
            "General-purpose agent for researching complex questions, searching for code and carrying out multi-step tasks.",
            "You are a subagent working on one task for another agent. Do the task with the tools you have, then answer with a concise report of what you found or did: your final message is all the other agent sees.",
            None,
        ),
        AgentDefinition::new(
            "Explore",
            "Fast read-only agent for exploring a codebase: finds files by pattern, searches code for keywords, reads files.",
            "You are a read-only exploration subagent. Find what the task asks for with the search and read tools; do not delegate. Answer with the relevant paths, lines and a short explanation.",
            Some(&["Glob", "Grep", "Read", "WebFetch", "WebSearch"]),
        ),
        AgentDefinition::new(
            "Plan",
            "Software architect agent for designing an implementation plan: returns step-by-step plans, critical files and trade-offs.",
            "You are a planning subagent. Study what the task needs and answer with a step-by-step implementation plan, the files involved and the trade-offs.",
            None,
        ),
    ]
}

/// Runs a child agent loop for a session (implemented by the session).
#[async_trait]
pub trait AgentRunner: Send + Sync + std::fmt::Debug {
    /// Runs `agent` on `prompt` to its end. `progress` (foreground children) receives one
    /// report per child tool call.
    async fn run_child(
        &self,
        agent: AgentDefinition,
        agent_id: String,
        prompt: String,
        progress: Option<mpsc::Sender<ToolProgressUpdate>>,
    ) -> Result<ChildOutcome, String>;
}

/// `Task`: starts a subagent.
#[derive(Debug)]
pub struct SubagentTool {
    pub agents: Vec<AgentDefinition>,
    /// Longest a child runs. Default 10 min.
    pub timeout: Duration,
}

impl SubagentTool {
    fn listing(&self) -> String {
        self.agents
            .iter()
            .map(|agent| {
                let tools = match &agent.allowed_tools {
                    Some(list) => list.join(", "),
                    None => "All tools".to_owned(),
                };
                format!("- {}: {} (Tools: {tools})", agent.name, agent.description)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Ends a foreground child whose call was dropped (abort, close, lease loss).
struct StopOnDrop(Arc<AgentRecord>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

#[async_trait]
impl Tool for SubagentTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: TASK_AGENT_TOOL.to_owned(),
            description: format!(
                "Launches a subagent to handle a task on its own, with its own context. \
                 Available agent types:\n{}\nWith run_in_background the call returns at once with \
                 an agent id: read its result with TaskOutput, stop it with TaskStop.",
                self.listing()
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "subagent_type": { "type": "string", "minLength": 1 },
                    "description": { "type": "string", "minLength": 3, "maxLength": 100 },
                    "prompt": { "type": "string", "minLength": 10, "maxLength": 100000 },
                    "run_in_background": { "type": "boolean" },
                },
                "required": ["subagent_type", "description", "prompt"],
                "additionalProperties": false,
            }),
        }
    }

    /// Starting a child asks nothing; each of its calls is checked on its own.
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        Ok(ToolCheck::on_field(input, "subagent_type"))
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Start the subagent {}", text(input, "subagent_type"))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let kind = text(&input, "subagent_type");
        let Some(agent) = self.agents.iter().find(|a| a.name == kind).cloned() else {
            let known: Vec<&str> = self.agents.iter().map(|a| a.name.as_str()).collect();
            return failure(format!(
                "Unknown subagent type: {kind}. Available types: {}",
                known.join(", ")
            ));
        };
        let Some(runner) = context.runner.clone() else {
            return failure("A subagent cannot start subagents");
        };
        let description = text(&input, "description");
        let prompt = text(&input, "prompt").to_owned();
        let background = input["run_in_background"] == true;
        let id = agent_runtime::ids::nanoid();
        let record = match context.agents.admit(id.clone(), kind, description) {
            Ok(record) => record,
            Err(error) => return failure(error),
        };
        let timeout = self.timeout;
        if background {
            let child = Arc::clone(&record);
            tokio::spawn(async move {
                let cancel = child.cancel_token();
                let run = runner.run_child(agent, child.id.clone(), prompt, None);
                let outcome = tokio::select! {
                    () = cancel.cancelled() => Err("cancelled".to_owned()),
                    outcome = tokio::time::timeout(timeout, run) => outcome
                        .unwrap_or_else(|_| Err(format!("the subagent ran longer than {} s", timeout.as_secs()))),
                };
                child.finish(outcome);
            });
            return success(
                json!({
                    "agent_id": id, "status": "running", "background": true, "subagent_type": kind,
                    "message": format!("Started the {kind} subagent in the background. Use TaskOutput(task_id: \"{id}\") to read its result."),
                }),
                format!("Started {kind} in the background"),
            );
        }
        context.say(format!("Starting {kind} subagent: {description}"));
        context.report("Running the task", Some(json!({ "subagentType": kind })));
        let guard = StopOnDrop(Arc::clone(&record));
        let started = std::time::Instant::now();
        let run = runner.run_child(agent, id.clone(), prompt, Some(context.progress.clone()));
        let outcome = tokio::time::timeout(timeout, run)
            .await
            .unwrap_or_else(|_| Err(format!("it ran longer than {} s", timeout.as_secs())));
        record.finish(outcome.clone());
        drop(guard);
        match outcome {
            Ok(done) => {
                let summary = format!(
                    "{kind} finished: {} tool calls, {} tokens, {:.1} s",
                    done.tool_calls,
                    done.tokens,
                    started.elapsed().as_secs_f64()
                );
                success(Value::String(done.result), summary)
            }
            Err(error) => {
                let message = format!("Subagent execution failed: {error}");
                failed(json!({ "error": message, "agent_id": id }), message)
            }
        }
    }
}

/// `TaskStop`: stops a background subagent, or else closes a structured task.
#[derive(Debug)]
pub struct TaskStopTool;

#[async_trait]
impl Tool for TaskStopTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: TASK_STOP_TOOL.to_owned(),
            description: "Stops a background subagent started with Task, or marks a task of the task list completed.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "taskId": { "type": "string", "minLength": 1 } },
                "required": ["taskId"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Stop {}", text(input, "taskId"))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let id = text(&input, "taskId").to_owned();
        if let Some(agent) = context.agents.get(&id) {
            let stopped = agent.stop();
            let summary = match stopped {
                true => format!("Stopped {id}"),
                false => format!("{id} had already ended"),
            };
            return success(agent.report(), summary);
        }
        if started_agent(&context.conversation, &id) {
            return success(lost_report(&id), format!("{id}: lost"));
        }
        let close =
            json!({ "taskId": id, "status": "completed", "metadata": { "stoppedAt": now_ms() } });
        TaskTool(TaskOperation::Update).run(close, context).await
    }
}

/// `TaskOutput`'s report of a background child this process does not have.
pub fn lost_report(id: &str) -> Value {
    json!({ "task_id": id, "type": "agent", "status": "failed", "result": LOST_AGENT })
}

/// Whether the conversation started the background child `id` (a `Task` result naming it).
pub fn started_agent(
    conversation: &[Arc<agent_runtime::protocol::content::ModelMessage>],
    id: &str,
) -> bool {
    super::background_output(conversation, "agent_id", id).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_never_get_the_tools_that_start_children() {
        let all = &builtin_agents()[0];
        assert!(all.permits("Read"));
        assert!(all.permits("mcp__docs__search"));
        assert!(!all.permits("Task"));
        assert!(!all.permits("AskUserQuestion"));
        let explore = &builtin_agents()[1];
        assert!(explore.permits("Grep"));
        assert!(!explore.permits("Bash"));
        for agent in builtin_agents() {
            agent.validate().unwrap();
        }
    }

    #[tokio::test]
    async fn task_without_a_runner_is_refused_and_unknown_types_name_the_known_ones() {
        let tool = SubagentTool {
            agents: builtin_agents(),
            timeout: Duration::from_secs(5),
        };
        let input = |kind: &str| json!({ "subagent_type": kind, "description": "look", "prompt": "look around the code" });
        let unknown = tool.run(input("Nope"), ToolContext::detached()).await;
        assert!(unknown.is_error);
        assert!(
            unknown
                .summary
                .contains("Available types: general-purpose, Explore, Plan")
        );
        let nested = tool.run(input("Explore"), ToolContext::detached()).await;
        assert_eq!(nested.summary, "A subagent cannot start subagents");
    }
}
