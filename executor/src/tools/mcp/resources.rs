//! `ListMcpResources` and `ReadMcpResource`: the resources of the tool set's MCP servers.

use crate::tools::output::elide_middle;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::McpServer;
use crate::provider::ToolSpec;
use crate::tools::output::{failure, success, truncate};
use crate::tools::text;
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutcome};

pub const LIST_MCP_RESOURCES_TOOL: &str = "ListMcpResources";
pub const READ_MCP_RESOURCE_TOOL: &str = "ReadMcpResource";

/// Most resources listed in one answer.
const MAX_LISTED: usize = 500;

#[derive(Debug)]
pub(crate) struct ListMcpResourcesTool {
    pub servers: Vec<Arc<McpServer>>,
    pub max_output_bytes: usize,
}

#[derive(Debug)]
pub(crate) struct ReadMcpResourceTool {
    pub servers: Vec<Arc<McpServer>>,
    pub max_output_bytes: usize,
}

fn find<'a>(servers: &'a [Arc<McpServer>], name: &str) -> Result<&'a Arc<McpServer>, String> {
    servers.iter().find(|s| s.name() == name).ok_or_else(|| {
        let known: Vec<&str> = servers.iter().map(|s| s.name()).collect();
        format!(
            "no MCP server is named {:?} (servers: {})",
            elide_middle(name, 80),
            known.join(", ")
        )
    })
}

#[async_trait]
impl Tool for ListMcpResourcesTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: LIST_MCP_RESOURCES_TOOL.to_owned(),
            description: "Lists the resources of the connected MCP servers (or of one server)."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": { "server": { "type": "string", "minLength": 1 } },
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn approval_title(&self, _input: &Value) -> String {
        "List MCP resources".to_owned()
    }

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        let servers: Vec<&Arc<McpServer>> = match input["server"].as_str() {
            Some(name) => match find(&self.servers, name) {
                Ok(server) => vec![server],
                Err(error) => return failure(error),
            },
            None => self.servers.iter().collect(),
        };
        let mut listed = Vec::new();
        let mut errors = Vec::new();
        for server in servers {
            match server.list_resources().await {
                Ok(Value::Array(resources)) => {
                    listed.extend(resources.into_iter().map(|mut resource| {
                        resource["server"] = json!(server.name());
                        resource
                    }))
                }
                Ok(_) => {}
                Err(error) => errors.push(error),
            }
        }
        if listed.is_empty() && !errors.is_empty() {
            if let [error] = errors.as_slice() {
                return error.outcome();
            }
            let messages: Vec<String> = errors.iter().map(|error| error.message.clone()).collect();
            return failure(messages.join("; "));
        }
        let total = listed.len();
        listed.truncate(MAX_LISTED);
        let text = serde_json::to_string(&listed).unwrap_or_default();
        let (text, _) = truncate(&text, self.max_output_bytes);
        let mut summary = format!("{total} MCP resources");
        if !errors.is_empty() {
            summary.push_str(&format!(" ({} servers failed)", errors.len()));
        }
        success(Value::String(text), summary)
    }
}

#[async_trait]
impl Tool for ReadMcpResourceTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: READ_MCP_RESOURCE_TOOL.to_owned(),
            description: "Reads one resource of an MCP server by its URI.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "server": { "type": "string", "minLength": 1 },
                    "uri": { "type": "string", "minLength": 1, "maxLength": 8192 },
                },
                "required": ["server", "uri"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn approval_title(&self, input: &Value) -> String {
        format!(
            "Read {} from the MCP server {}",
            elide_middle(text(input, "uri"), 200),
            text(input, "server")
        )
    }

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        let server = match find(&self.servers, text(&input, "server")) {
            Ok(server) => server,
            Err(error) => return failure(error),
        };
        let uri = text(&input, "uri");
        let read = match server.read_resource(uri).await {
            Ok(read) => read,
            Err(error) => return error.outcome(),
        };
        let parts: Vec<String> = read["contents"]
            .as_array()
            .into_iter()
            .flatten()
            .map(
                |item| match (item["text"].as_str(), item["blob"].as_str()) {
                    (Some(text), _) => text.to_owned(),
                    (None, Some(blob)) => format!(
                        "[blob: {}, {} base64 characters]",
                        item["mimeType"].as_str().unwrap_or("unknown"),
                        blob.len()
                    ),
                    (None, None) => String::new(),
                },
            )
            .collect();
        let (text, _) = truncate(&parts.join("\n"), self.max_output_bytes);
        success(
            Value::String(text),
            format!("Read {}", elide_middle(uri, 120)),
        )
    }
}
