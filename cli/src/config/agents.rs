//! `[[agents]]`: the operator's subagents of `Task`, beside the built-in `general-purpose`,
//! `Explore` and `Plan`.

use std::path::PathBuf;

use agent_runtime_executor::tools::agents::AgentDefinition;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentSection {
    name: String,
    description: String,
    /// The system prompt inline, or
    system_prompt: Option<String>,
    /// in a file read once at start-up.
    system_prompt_file: Option<PathBuf>,
    allowed_tools: Option<Vec<String>>,
    model: Option<String>,
}

impl AgentSection {
    pub(super) fn definition(self) -> anyhow::Result<AgentDefinition> {
        let owner = format!("agent {}", self.name);
        let keys = ["system_prompt", "system_prompt_file"];
        let system_prompt =
            super::inline_or_file(&owner, keys, self.system_prompt, &self.system_prompt_file)?;
        let definition = AgentDefinition {
            name: self.name,
            description: self.description,
            system_prompt,
            allowed_tools: self.allowed_tools,
            model: self.model,
        };
        definition.validate().map_err(anyhow::Error::msg)?;
        Ok(definition)
    }
}
