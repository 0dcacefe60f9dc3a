//! One tool of an MCP server as the agent sees it: the server's schema and description, a
//! permission kind from its annotations, and its result mapped to a tool result (the text
//! items joined, placeholders for images, audio and resources, `isError` kept), capped.

use crate::tools::output::elide_middle;
use std::sync::Weak;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::McpServer;
use crate::provider::ToolSpec;
use crate::tools::output::{failed, failure, success, truncate};
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutcome};

/// Longest description passed on to the model (a server's text is untrusted input).
const MAX_DESCRIPTION: usize = 4_000;

#[derive(Debug)]
pub(super) struct McpTool {
    server: Weak<McpServer>,
    server_name: String,
    /// `mcp__<server>__<tool>`.
    name: String,
    /// The tool's name on the server.
    remote: String,
    description: String,
    input_schema: Value,
    effect: ToolEffect,
    max_output_bytes: usize,
}

impl McpTool {
    /// `None` for a tool whose input is not an object (no provider takes it).
    pub fn new(server: Weak<McpServer>, name: String, remote: rmcp::model::Tool) -> Option<Self> {
        let strong = server.upgrade();
        let trusted = strong
            .as_ref()
            .is_some_and(|s| s.config().trust_annotations);
        let read_only = remote
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        let description = remote
            .description
            .as_deref()
            .or(remote.title.as_deref())
            .unwrap_or_default();
        let mut schema = Value::Object((*remote.input_schema).clone());
        // Providers insist on an object schema: a missing type is taken as one, another is not.
        match schema.get("type") {
            None => schema["type"] = json!("object"),
            Some(kind) if kind != "object" => return None,
            Some(_) => {}
        }
        Some(Self {
            server_name: strong
                .as_ref()
                .map(|s| s.name().to_owned())
                .unwrap_or_default(),
            max_output_bytes: strong.as_ref().map_or(30_000, |s| s.max_output_bytes()),
            server,
            name,
            remote: remote.name.to_string(),
            description: elide_middle(description, MAX_DESCRIPTION),
            input_schema: schema,
            effect: match read_only && trusted {
                true => ToolEffect::ReadOnly,
                false => ToolEffect::Execute,
            },
        })
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
        }
    }

    fn effect(&self) -> ToolEffect {
        self.effect
    }

    fn approval_title(&self, _input: &Value) -> String {
        format!(
            "Call {} on the MCP server {}",
            self.remote, self.server_name
        )
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let Some(server) = self.server.upgrade() else {
            return failure(format!("the MCP server {} is gone", self.server_name));
        };
        let arguments = match input {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        context.say(format!("Calling {} on {}", self.remote, self.server_name));
        let progress = context.progress.clone();
        match server
            .call_tool(&self.remote, arguments, context.trace.as_ref(), progress)
            .await
        {
            Ok(result) => outcome(&result, self.max_output_bytes),
            Err(error) => error.outcome(),
        }
    }
}

/// A `tools/call` result (as the wire's JSON) as a tool outcome.
pub(super) fn outcome(result: &Value, max_output_bytes: usize) -> ToolOutcome {
    let mut parts: Vec<String> = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .map(content_text)
        .collect();
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        parts.push(match structured {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        });
    }
    let (text, _) = truncate(&parts.join("\n"), max_output_bytes);
    let summary = crate::tools::output::shorten_line(text.lines().next().unwrap_or(""), 120);
    match result["isError"] == true {
        true => failed(Value::String(text), summary),
        false => success(Value::String(text), summary),
    }
}

/// One content item as text: text as it is, a placeholder for the rest (the reference's).
fn content_text(item: &Value) -> String {
    let mime = item["mimeType"].as_str().unwrap_or("unknown");
    match item["type"].as_str().unwrap_or_default() {
        "text" => item["text"].as_str().unwrap_or_default().to_owned(),
        "image" => format!("[image: {mime}]"),
        "audio" => format!("[audio: {mime}]"),
        "resource" => format!(
            "[resource: {}]",
            item["resource"]["mimeType"].as_str().unwrap_or("unknown")
        ),
        "resource_link" => format!("[resource: {}]", item["uri"].as_str().unwrap_or_default()),
        other => format!("[{}]", elide_middle(other, 40)),
    }
}

#[cfg(test)]
mod tests {
    use super::outcome;
    use serde_json::json;

    #[test]
    fn results_join_text_and_name_what_they_leave_out() {
        let result = json!({ "content": [
            { "type": "text", "text": "This is a tiny image:" },
            { "type": "image", "data": "iVBOR", "mimeType": "image/png" },
            { "type": "resource", "resource": { "uri": "x", "mimeType": "text/plain", "text": "t" } },
            { "type": "text", "text": "The image above is the MCP logo." },
        ]});
        let done = outcome(&result, 1_000);
        assert!(!done.is_error);
        assert_eq!(
            done.output,
            json!(
                "This is a tiny image:\n[image: image/png]\n[resource: text/plain]\nThe image above is the MCP logo."
            )
        );
    }

    #[test]
    fn is_error_makes_an_error_result_and_output_is_capped() {
        let result =
            json!({ "isError": true, "content": [{ "type": "text", "text": "x".repeat(500) }] });
        let done = outcome(&result, 100);
        assert!(done.is_error);
        assert!(done.output.as_str().unwrap().contains("output truncated"));
        let structured = outcome(
            &json!({ "content": [], "structuredContent": { "t": 1 } }),
            100,
        );
        assert_eq!(structured.output, json!("{\"t\":1}"));
    }
}
