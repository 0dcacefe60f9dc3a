//! Plan mode: `EnterPlanMode` and `ExitPlanMode` (docs/agent.md §6.9).
//!
//! Both ask the user through `permission.requested` (`kind: "plan"`). An approved
//! `EnterPlanMode` switches the session to the `plan` permission mode (only read-only tools run);
//! an approved `ExitPlanMode` (the plan is its input, shown to the user) restores the mode the
//! session had before, and the request goes on; a rejected plan ends the request, with the
//! user's `reason` as the feedback the model gets next time.
//!
//! The mode is session state, kept where the conversation is: the approved calls are in the
//! transcript, and [`effective_mode`] reads them back, so the mode survives a restart and a
//! handoff, and a fork starts in the mode of its fork point.

use std::sync::Arc;

use agent_runtime::protocol::content::{ModelMessage, Role};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::output::{failure, success};
use super::{Tool, ToolContext, ToolEffect, ToolOutcome, UserPrompt};
use crate::permissions::PermissionMode;
use crate::provider::{ToolSpec, is_tool_error, text_of};

pub const ENTER_PLAN_MODE_TOOL: &str = "EnterPlanMode";
pub const EXIT_PLAN_MODE_TOOL: &str = "ExitPlanMode";

const ENTERED: &str = "You are now in PLAN MODE. Explore with read-only tools and design an \
    approach; then call ExitPlanMode with your plan for the user's approval. Tools that change \
    files or run commands are blocked until the plan is approved.";
const ENTER_DECLINED: &str = "User declined to enter Plan mode. Proceed with the task directly.";
const PLAN_APPROVED: &str = "Plan approved by user. Proceed with the implementation.";
const PLAN_REJECTED: &str = "Plan rejected by user. Awaiting user feedback.";
const NO_HANDLER: &str = "No confirmation handler available.";

/// The permission mode the conversation leaves the session in, starting from `configured`: each
/// approved `EnterPlanMode` switches to `plan` (remembering the mode before), each approved
/// `ExitPlanMode` goes back to it.
pub fn effective_mode(
    configured: PermissionMode,
    conversation: &[Arc<ModelMessage>],
) -> PermissionMode {
    let mut before: Vec<PermissionMode> = Vec::new();
    let mut mode = configured;
    for message in conversation {
        if message.role != Role::Tool {
            continue;
        }
        let text = text_of(&message.content);
        if is_tool_error(&text) {
            continue;
        }
        let said = serde_json::from_str::<String>(&text).unwrap_or_default();
        match message.name.as_deref() {
            Some(ENTER_PLAN_MODE_TOOL) if said == ENTERED => {
                before.push(mode);
                mode = PermissionMode::Plan;
            }
            Some(EXIT_PLAN_MODE_TOOL) if said == PLAN_APPROVED => {
                mode = before.pop().unwrap_or(configured);
            }
            _ => {}
        }
    }
    mode
}

#[derive(Debug, Default)]
pub struct EnterPlanModeTool;

#[async_trait]
impl Tool for EnterPlanModeTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: ENTER_PLAN_MODE_TOOL.to_owned(),
            description: "Asks the user to switch to plan mode: explore with read-only tools and \
                design an approach before changing anything, then present the plan with \
                ExitPlanMode."
                .to_owned(),
            input_schema: json!({ "type": "object", "properties": {}, "additionalProperties": false }),
        }
    }

    /// Changes nothing by itself; its prompt is its own.
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn approval_title(&self, _input: &Value) -> String {
        "Enter plan mode".to_owned()
    }

    fn user_prompt(&self, input: &Value) -> Option<UserPrompt> {
        Some(UserPrompt {
            title: self.approval_title(input),
            message: "The agent wants to plan before it changes anything: only read-only tools \
                run until you approve its plan."
                .to_owned(),
            kind: Some("plan".to_owned()),
        })
    }

    async fn run(&self, _input: Value, context: ToolContext) -> ToolOutcome {
        match context.answer {
            None => failure(NO_HANDLER),
            Some(answer) if answer.approved => success(Value::from(ENTERED), "Plan mode"),
            Some(_) => success(Value::from(ENTER_DECLINED), "Declined"),
        }
    }
}

#[derive(Debug, Default)]
pub struct ExitPlanModeTool;

#[async_trait]
impl Tool for ExitPlanModeTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: EXIT_PLAN_MODE_TOOL.to_owned(),
            description: "Presents the plan (Markdown) for the user's approval. Approved: plan \
                mode ends and you implement it. Rejected: the request ends and the user's \
                feedback follows."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "plan": { "type": "string", "minLength": 1 } },
                "required": ["plan"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn approval_title(&self, _input: &Value) -> String {
        "Approve the plan".to_owned()
    }

    fn user_prompt(&self, input: &Value) -> Option<UserPrompt> {
        Some(UserPrompt {
            title: self.approval_title(input),
            message: "The agent presents its plan for your approval.".to_owned(),
            kind: Some("plan".to_owned()),
        })
    }

    fn ends_request_when_declined(&self) -> bool {
        true
    }

    async fn run(&self, _input: Value, context: ToolContext) -> ToolOutcome {
        match context.answer {
            None => failure(NO_HANDLER),
            Some(answer) if answer.approved => success(Value::from(PLAN_APPROVED), "Approved"),
            Some(answer) => {
                let text = match answer.reason.as_deref().map(str::trim) {
                    Some(feedback) if !feedback.is_empty() => {
                        format!("{PLAN_REJECTED}\n\n{feedback}")
                    }
                    _ => PLAN_REJECTED.to_owned(),
                };
                success(Value::from(text), "Rejected")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str, text: &str) -> Arc<ModelMessage> {
        Arc::new(ModelMessage {
            tool_call_id: Some(format!("call-{name}")),
            name: Some(name.to_owned()),
            ..ModelMessage::new(Role::Tool, serde_json::to_string(text).unwrap())
        })
    }

    #[test]
    fn approved_calls_switch_the_mode_and_back_and_nothing_else_does() {
        let configured = PermissionMode::AutoEdit;
        let entered = vec![result(ENTER_PLAN_MODE_TOOL, ENTERED)];
        assert_eq!(effective_mode(configured, &entered), PermissionMode::Plan);
        let mut exited = entered.clone();
        exited.push(result(EXIT_PLAN_MODE_TOOL, PLAN_APPROVED));
        assert_eq!(
            effective_mode(configured, &exited),
            PermissionMode::AutoEdit
        );
        let declined = vec![
            result(ENTER_PLAN_MODE_TOOL, ENTER_DECLINED),
            result(EXIT_PLAN_MODE_TOOL, PLAN_REJECTED),
        ];
        assert_eq!(effective_mode(configured, &declined), configured);
        let mut rejected = entered;
        rejected.push(result(EXIT_PLAN_MODE_TOOL, PLAN_REJECTED));
        assert_eq!(effective_mode(configured, &rejected), PermissionMode::Plan);
        // Another tool's result that says the same words changes nothing.
        let spoofed = vec![result("Read", ENTERED)];
        assert_eq!(effective_mode(configured, &spoofed), configured);
    }
}
