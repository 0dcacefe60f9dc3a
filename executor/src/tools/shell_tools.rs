//! `TaskOutput` (for background shells) and `KillShell`: the tools that read and stop what
//! `Bash` started with `run_in_background` (docs/agent.md §6.4). Both see only the calling
//! session's shells; a shell its transcript started that this process does not hold is reported
//! `lost`.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::agents::{lost_report, started_agent};
use super::output::{failure, success};
use super::process_groups;
use super::shells::{ShellStatus, started_in_transcript};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;
use crate::tools::text;

pub const TASK_OUTPUT_TOOL: &str = "TaskOutput";
pub const KILL_SHELL_TOOL: &str = "KillShell";

/// What a lost shell's report says.
const LOST: &str = "The executor that ran this background shell stopped (restart, crash or \
                    handoff to another executor); it was not started again. Its output is gone.";

/// `TaskOutput`: the status of a background shell and the output it wrote since the last read.
#[derive(Debug)]
pub struct TaskOutputTool;

#[async_trait]
impl Tool for TaskOutputTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: TASK_OUTPUT_TOOL.to_owned(),
            description: "Reads a background task: a shell started with Bash run_in_background (its status and the output written since the last read) or a subagent started with Task run_in_background (its status and result). With block (the default) it waits for the task to end, at most timeout ms.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "task_id": { "type": "string", "minLength": 1 },
                    "block": { "type": "boolean" },
                    "timeout": { "type": "integer", "minimum": 0, "maximum": 600000 },
                },
                "required": ["task_id"],
                "additionalProperties": false,
            }),
        }
    }

    /// Session state only: never prompts (docs/agent.md §6.14).
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        Ok(ToolCheck::on_field(input, "task_id"))
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Read the output of {}", text(input, "task_id"))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let id = text(&input, "task_id");
        let block = input["block"] != false;
        let timeout = Duration::from_millis(input["timeout"].as_u64().unwrap_or(30_000));
        if let Some(agent) = context.agents.get(id) {
            if block && agent.is_running() {
                context.report(format!("waiting for {id}"), None);
                agent.wait(timeout).await;
            }
            let report = agent.report();
            let summary = format!("{id}: {}", report["status"].as_str().unwrap_or_default());
            return success(report, summary);
        }
        let Some(shell) = context.shells.get(id) else {
            if started_agent(&context.conversation, id) {
                return success(lost_report(id), format!("{id}: lost"));
            }
            return match started_in_transcript(&context.conversation, id) {
                Some(command) => success(
                    json!({ "task_id": id, "type": "shell", "status": "lost", "command": command, "message": LOST }),
                    format!("{id}: lost"),
                ),
                None => failure(format!("No task found with ID: {id}")),
            };
        };
        if block && shell.status() == ShellStatus::Running {
            context.report(format!("waiting for {id}"), None);
            shell.wait(timeout).await;
        }
        let report = shell.read();
        let summary = format!("{id}: {}", report["status"].as_str().unwrap_or_default());
        success(report, summary)
    }
}

/// `KillShell`: ends a background shell (SIGTERM to its process group, SIGKILL if it lingers).
#[derive(Debug)]
pub struct KillShellTool;

#[async_trait]
impl Tool for KillShellTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: KILL_SHELL_TOOL.to_owned(),
            description: "Stops a background shell started with Bash run_in_background.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "shell_id": { "type": "string", "minLength": 1 } },
                "required": ["shell_id"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Execute
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        Ok(ToolCheck::on_field(input, "shell_id"))
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Stop the background shell {}", text(input, "shell_id"))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let id = text(&input, "shell_id");
        let Some(shell) = context.shells.get(id) else {
            return match started_in_transcript(&context.conversation, id) {
                // Exited for sure only when this executor's start-up sweep covered it; another
                // executor's (a handoff after a crash) may still run on its host.
                Some(_) => success(
                    json!({ "shell_id": id, "status": "lost", "already_exited": process_groups::swept(id).then_some(true), "pid": null, "exit_code": null, "signal": null, "message": LOST }),
                    format!("{id}: lost"),
                ),
                None => failure(format!("Shell not found: {id}")),
            };
        };
        let killed = shell.terminate().await;
        let summary = match killed {
            true => format!("Stopped {id}"),
            false => format!("{id} had already ended"),
        };
        success(shell.summary(!killed), summary)
    }
}
