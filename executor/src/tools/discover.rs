//! `DiscoverTools` and deferred exposure (docs/agent.md §6.12): tools the operator lists in
//! `tools.deferred_tools` are registered but not offered to the model until a `DiscoverTools`
//! call finds them (by words of their name and description). A discovered tool is offered from
//! the next model step on and still passes the whole permission pipeline; calling a hidden one
//! is refused. What a session discovered is session state kept in the transcript (the call's
//! `extensions.toolState`), so it survives a restart and a handoff, and the call publishes the
//! reference's `tool_runtime_patch {scope: "session", source: "tool", toolDiscovery}`.

use std::collections::BTreeSet;
use std::sync::Arc;

use agent_runtime::protocol::content::{ModelMessage, Role};
use agent_runtime::protocol::stream::{PatchScope, PatchSource, RuntimePatch, ToolDiscovery};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::file_state::TOOL_STATE_EXTENSION;
use super::output::success;
use super::{Tool, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;
use crate::tools::text;

pub const DISCOVER_TOOLS_TOOL: &str = "DiscoverTools";
/// The most of a description a discovery answer shows.
const SHORT_DESCRIPTION_CHARS: usize = 100;

/// The tools a conversation has discovered so far.
pub fn discovered(conversation: &[Arc<ModelMessage>]) -> BTreeSet<String> {
    conversation
        .iter()
        .filter(|message| message.role == Role::Tool)
        .filter_map(|message| message.extensions.as_ref()?.get(TOOL_STATE_EXTENSION))
        .filter_map(|state| state["discovered"].as_array())
        .flatten()
        .filter_map(|name| name.as_str().map(str::to_owned))
        .collect()
}

/// `DiscoverTools`: searches the hidden tools and activates the best matches.
#[derive(Debug)]
pub struct DiscoverToolsTool {
    /// The deferred tools: name and description.
    pub catalog: Vec<(String, String)>,
}

impl DiscoverToolsTool {
    /// How well a tool matches the query's words: a word in the name counts twice.
    fn score(name: &str, description: &str, words: &[String]) -> usize {
        let (name, description) = (name.to_lowercase(), description.to_lowercase());
        words
            .iter()
            .map(|word| {
                2 * usize::from(name.contains(word.as_str()))
                    + usize::from(description.contains(word.as_str()))
            })
            .sum()
    }
}

fn short(description: &str) -> String {
    let first = description
        .split(['\n', '.'])
        .next()
        .unwrap_or_default()
        .trim();
    first.chars().take(SHORT_DESCRIPTION_CHARS).collect()
}

#[async_trait]
impl Tool for DiscoverToolsTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: DISCOVER_TOOLS_TOOL.to_owned(),
            description: format!(
                "Searches {} hidden tools by name and description and makes the best matches \
                 available from the next step on.",
                self.catalog.len()
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "query": { "type": "string", "minLength": 1, "maxLength": 500 },
                    "max_results": { "type": "integer", "minimum": 1, "maximum": 10 },
                },
                "required": ["query"],
                "additionalProperties": false,
            }),
        }
    }

    /// Session state only: never prompts (docs/agent.md §6.14).
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Discover tools for {:?}", text(input, "query"))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let query = text(&input, "query");
        let limit = input["max_results"].as_u64().unwrap_or(5) as usize;
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let known = discovered(&context.conversation);
        let mut matches: Vec<(usize, &(String, String))> = self
            .catalog
            .iter()
            .filter(|(name, _)| !known.contains(name))
            .map(|tool| (Self::score(&tool.0, &tool.1, &words), tool))
            .filter(|(score, _)| *score > 0)
            .collect();
        matches.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.0.cmp(&b.1.0)));
        matches.truncate(limit);
        if matches.is_empty() {
            return success(
                Value::from(format!("No hidden tools matched \"{query}\".")),
                "No tools found",
            );
        }
        let names: Vec<String> = matches.iter().map(|(_, (name, _))| name.clone()).collect();
        let lines: Vec<String> = matches
            .iter()
            .map(|(_, (name, description))| format!("- {name}: {}", short(description)))
            .collect();
        ToolOutcome {
            output: Value::from(format!("Activated deferred tools:\n{}", lines.join("\n"))),
            is_error: false,
            summary: format!("Activated {}", names.join(", ")),
            state: Some(json!({ "discovered": names })),
            patch: Some(RuntimePatch {
                scope: PatchScope::Session,
                source: PatchSource::Tool,
                skill: None,
                tool_policy: None,
                tool_discovery: Some(ToolDiscovery {
                    discover: Some(names),
                    reset: None,
                }),
                model_override: None,
                system_prompt_append: None,
                environment: None,
                hooks: None,
            }),
            context_patch: None,
            new_messages: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;
    use crate::tools::{ToolRegistry, ToolsConfig};

    async fn registry() -> ToolRegistry {
        let root = tempfile::tempdir().unwrap();
        ToolsConfig {
            builtin_tools: true,
            allowed_tools: Some(vec!["Read".into(), "Glob".into(), "Grep".into()]),
            deferred_tools: vec!["Glob".into(), "Grep".into()],
            roots: vec![root.path().to_path_buf()],
            ..ToolsConfig::default()
        }
        .build(Vec::new())
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn deferred_tools_are_hidden_until_discovered_and_found_by_their_words() {
        let tools = registry().await;
        let none = BTreeSet::new();
        assert!(tools.offered("Read", &none));
        assert!(!tools.offered("Grep", &none));
        assert!(tools.offered(DISCOVER_TOOLS_TOOL, &none));
        assert!(tools.offered("Grep", &BTreeSet::from(["Grep".to_owned()])));

        let discover = tools.get(DISCOVER_TOOLS_TOOL).unwrap();
        assert_eq!(discover.effect(), ToolEffect::ReadOnly);
        let first = discover
            .run(json!({ "query": "glob files" }), ToolContext::detached())
            .await;
        // "glob" names Glob (twice the weight) and appears in Grep's description.
        let text = first.output.as_str().unwrap();
        assert!(
            text.starts_with("Activated deferred tools:\n- Glob: "),
            "{text}"
        );
        assert_eq!(first.state, Some(json!({ "discovered": ["Glob", "Grep"] })));
        // What the conversation already discovered is not offered again.
        let again = discover
            .run(json!({ "query": "glob" }), ToolContext::after(&[&first]))
            .await;
        assert_eq!(again.output, "No hidden tools matched \"glob\".");
        assert!(again.state.is_none() && again.patch.is_none());
        let one = discover
            .run(
                json!({ "query": "glob files", "max_results": 1 }),
                ToolContext::detached(),
            )
            .await;
        assert_eq!(one.state, Some(json!({ "discovered": ["Glob"] })));
    }

    #[tokio::test]
    async fn without_deferred_tools_there_is_no_discover_tools() {
        let tools = ToolsConfig {
            builtin_tools: true,
            allowed_tools: Some(vec!["TodoWrite".into()]),
            ..ToolsConfig::default()
        }
        .build(Vec::new())
        .await
        .unwrap();
        assert!(tools.get(DISCOVER_TOOLS_TOOL).is_none());
        assert!(!tools.has_deferred());
    }
}
