//! `Skill`: the model loads one of the skills the operator configured (docs/agent.md §6.11).
//!
//! Skills come from configuration, read once at start-up; nothing is discovered on disk per
//! session, and inline host commands (`` !`cmd` ``) in a skill are left as text, never run. The
//! tool is registered exactly when skills are configured, even with `builtin_tools = false`
//! (the reference's server rule).
//!
//! Loading a skill answers its instructions (`{{args}}` replaced by the call's `args`) and emits
//! `tool_runtime_patch {scope, source: "skill", skill, toolPolicy}`. The patch's tool policy then
//! narrows the tools of the session (`scope: "session"`) or of the request that loaded it
//! (`"turn"`): the model is offered only the allowed tools, and a call to another one is refused.
//! Like the session's other tool state, the active skill is read back from the transcript, so it
//! survives a restart and a handoff.

use std::sync::Arc;

use agent_runtime::protocol::content::{ModelMessage, Role};
use agent_runtime::protocol::stream::{
    ModelOverride, PatchScope, PatchSource, RuntimePatch, SkillRef, ToolPolicy,
};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::file_state::TOOL_STATE_EXTENSION;
use super::output::{failure, success};
use super::{Tool, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;
use crate::tools::text;

pub const SKILL_TOOL: &str = "Skill";
/// Longest skill name (kebab-case) and description.
const MAX_NAME_CHARS: usize = 64;
const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The most of a description the tool's own description shows.
const LISTED_DESCRIPTION_CHARS: usize = 100;

/// A skill the operator configured.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillDefinition {
    pub name: String,
    pub description: String,
    /// The instruction document (Markdown); `{{args}}` and `{{args.raw}}` become the call's args.
    pub instructions: String,
    /// While the skill is active, only these tools (and `Skill`) are offered. `None`: all.
    pub allowed_tools: Option<Vec<String>>,
    /// While the skill is active, these tools are not offered.
    pub disallowed_tools: Vec<String>,
    /// How long the skill's tool policy holds: the request that loaded it, or the session.
    pub scope: PatchScope,
    /// Text the skill adds to the system prompt when it loads: published in its runtime patch
    /// (`systemPromptAppend`) and added to the conversation as a system message
    /// (`tool_new_messages`, `provenance.source: "tool_injection"`), so it outlives a restart.
    pub system_prompt_append: Option<String>,
    /// The model the session's calls use while the skill is active (the profile's provider,
    /// endpoint and key; only the model changes). Set by the operator, never by the model.
    pub model: Option<String>,
}

impl SkillDefinition {
    /// Refuses a definition the reference would not load: a name that is not kebab-case (at most
    /// 64 characters), a description over 1024 characters, empty instructions.
    pub fn validate(&self) -> Result<(), String> {
        let kebab = !self.name.is_empty()
            && self.name.chars().count() <= MAX_NAME_CHARS
            && self.name.split('-').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            });
        if !kebab {
            return Err(format!(
                "skill name {:?} must be kebab-case (a-z, 0-9, single dashes), at most {MAX_NAME_CHARS} characters",
                self.name
            ));
        }
        if self.description.trim().is_empty()
            || self.description.chars().count() > MAX_DESCRIPTION_CHARS
        {
            return Err(format!(
                "skill {}: the description must have 1 to {MAX_DESCRIPTION_CHARS} characters",
                self.name
            ));
        }
        if self.instructions.trim().is_empty() {
            return Err(format!("skill {}: the instructions are empty", self.name));
        }
        Ok(())
    }

    fn policy(&self) -> ToolPolicy {
        ToolPolicy {
            allow: self.allowed_tools.clone(),
            deny: (!self.disallowed_tools.is_empty()).then(|| self.disallowed_tools.clone()),
        }
    }
}

/// The tool policy of the skill active at the end of `conversation`, with the skill's name: the
/// latest skill loaded whose scope still holds (a `turn` skill ends with its request, at the next
/// user message; a `session` one holds until another skill is loaded).
pub fn active_policy(conversation: &[Arc<ModelMessage>]) -> Option<(String, ToolPolicy)> {
    let skill = active(conversation)?;
    let name = skill.get("name")?.as_str()?.to_owned();
    let policy = serde_json::from_value(skill.get("toolPolicy")?.clone()).ok()?;
    Some((name, policy))
}

/// The recorded state of the skill active at the end of `conversation`.
fn active(conversation: &[Arc<ModelMessage>]) -> Option<&Value> {
    let mut past_request = false;
    for message in conversation.iter().rev() {
        if message.role == Role::User {
            past_request = true;
            continue;
        }
        if let Some((skill, scope)) = loaded(message)
            && (!past_request || scope == PatchScope::Session)
        {
            return Some(skill);
        }
    }
    None
}

/// The skill a tool message loaded, from its recorded state, and its scope.
fn loaded(message: &ModelMessage) -> Option<(&Value, PatchScope)> {
    if message.role != Role::Tool || message.name.as_deref() != Some(SKILL_TOOL) {
        return None;
    }
    let state = message.extensions.as_ref()?.get(TOOL_STATE_EXTENSION)?;
    let skill = state.get("skill")?;
    let scope = serde_json::from_value(skill.get("scope")?.clone()).ok()?;
    Some((skill, scope))
}

/// Whether `tool` may be offered and run under `policy` (`Skill` always may).
pub fn permits(policy: &ToolPolicy, tool: &str) -> bool {
    tool == SKILL_TOOL
        || (policy
            .allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|t| t == tool))
            && !policy.deny.iter().flatten().any(|t| t == tool))
}

#[derive(Debug)]
pub struct SkillTool {
    pub skills: Vec<SkillDefinition>,
}

impl SkillTool {
    fn names(&self) -> String {
        let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
        names.join(", ")
    }
}

#[async_trait]
impl Tool for SkillTool {
    fn spec(&self) -> ToolSpec {
        let listed: Vec<String> = self
            .skills
            .iter()
            .map(|skill| {
                let short: String = skill
                    .description
                    .chars()
                    .take(LISTED_DESCRIPTION_CHARS)
                    .collect();
                format!("- {}: {short}", skill.name)
            })
            .collect();
        ToolSpec {
            name: SKILL_TOOL.to_owned(),
            description: format!(
                "Loads a skill: its instructions, and the tools it works with. Available \
                 skills:\n{}",
                listed.join("\n")
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "skill": { "type": "string", "minLength": 1 },
                    "args": { "type": "string" },
                },
                "required": ["skill"],
                "additionalProperties": false,
            }),
        }
    }

    /// Loading instructions changes nothing outside the conversation.
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Load the skill {}", text(input, "skill"))
    }

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        let name = text(&input, "skill");
        let Some(skill) = self.skills.iter().find(|s| s.name == name) else {
            return failure(format!(
                "Skill \"{name}\" not found. Available skills: {}",
                self.names()
            ));
        };
        let args = text(&input, "args");
        let body = skill
            .instructions
            .replace("{{args.raw}}", args)
            .replace("{{args}}", args);
        let mut text = format!(
            "# Skill: {}\n\nYou are now operating in the \"{}\" skill mode. Follow the \
             instructions below.\n",
            skill.name, skill.name
        );
        if !args.is_empty() {
            text.push_str(&format!("\n**Arguments:** {args}\n"));
        }
        text.push_str(&format!("\n---\n{body}\n---\n"));
        let policy = skill.policy();
        let patch = RuntimePatch {
            scope: skill.scope,
            source: PatchSource::Skill,
            skill: Some(SkillRef {
                id: skill.name.clone(),
                name: skill.name.clone(),
                // Configured skills live in no host directory.
                base_path: String::new(),
            }),
            tool_policy: Some(policy.clone()),
            tool_discovery: None,
            model_override: skill.model.clone().map(|model_id| ModelOverride {
                model_id,
                effort: None,
            }),
            system_prompt_append: skill.system_prompt_append.clone(),
            environment: None,
            hooks: None,
        };
        let mut outcome = success(
            Value::String(text),
            format!("Loaded the skill {}", skill.name),
        );
        outcome.state = Some(json!({ "skill": {
            "name": skill.name, "scope": skill.scope, "toolPolicy": policy,
        }}));
        outcome.patch = Some(patch);
        outcome.new_messages = skill
            .system_prompt_append
            .iter()
            .map(|text| ModelMessage::new(Role::System, text.clone()))
            .collect();
        outcome
    }
}

#[cfg(test)]
mod tests;
