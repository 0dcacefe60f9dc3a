//! docs/tools.md: every tool's input keys in one place, generated from the tools' own schemas.
//! The test fails when the committed file differs from what the tools offer;
//! `AGENT_RUNTIME_UPDATE_DOCS=1` writes it anew.

use std::time::Duration;

use agent_runtime::protocol::stream::PatchScope;
use agent_runtime_executor::tools::mcp::{McpServerConfig, McpTransport};
use agent_runtime_executor::tools::{
    BUILTIN_TOOLS, MemoryConfig, SearchProvider, SkillDefinition, ToolsConfig, WebSearchConfig,
};
use serde_json::Value;

/// A tool set with every built-in tool registered.
async fn every_tool(root: &std::path::Path) -> agent_runtime_executor::tools::ToolRegistry {
    let mut mcp = McpServerConfig::new(
        "docs",
        McpTransport::Http {
            url: "http://127.0.0.1:9/mcp".to_owned(),
        },
    );
    mcp.allow_private_addresses = true;
    mcp.connect_timeout = Duration::from_millis(100);
    ToolsConfig {
        builtin_tools: true,
        roots: vec![root.to_path_buf()],
        web_search: Some(WebSearchConfig {
            provider: SearchProvider::Searxng,
            url: Some("http://127.0.0.1:9".to_owned()),
            api_key_env: None,
            api_key_file: None,
        }),
        skills: vec![SkillDefinition {
            name: "review".to_owned(),
            description: "Reviews a change.".to_owned(),
            instructions: "Review it.".to_owned(),
            allowed_tools: None,
            disallowed_tools: Vec::new(),
            scope: PatchScope::Turn,
            system_prompt_append: None,
            model: None,
        }],
        memory: MemoryConfig {
            enabled: true,
            ..MemoryConfig::default()
        },
        deferred_tools: vec!["WebSearch".to_owned()],
        mcp_servers: vec![mcp],
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .expect("every tool builds")
}

/// One property as the reference shows it: its type, its values when it has a few.
fn kind(schema: &Value) -> String {
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        return format!("one of {}", values.join(", "));
    }
    match &schema["type"] {
        Value::String(kind) if kind == "array" => format!("array of {}", kind_of_items(schema)),
        Value::String(kind) => kind.clone(),
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    }
}

fn kind_of_items(schema: &Value) -> String {
    match schema.get("items") {
        Some(items) if items["type"] == "object" => "objects".to_owned(),
        Some(items) => kind(items),
        None => "any".to_owned(),
    }
}

fn reference(tools: &agent_runtime_executor::tools::ToolRegistry) -> String {
    let mut text = String::from(
        "# Tool inputs\n\n\
         <!-- Generated from the tools' own schemas by executor/tests/tools/reference.rs: \
         AGENT_RUNTIME_UPDATE_DOCS=1 cargo nextest run -p agent-runtime-executor \
         -E 'test(/tool_reference/)' writes it anew. -->\n\n\
         The input each built-in tool takes, as the model is told and as every call is checked \
         (docs/agent.md §3: a call whose input does not match is refused before anything else). \
         **Bold** keys are required. Which tools a session has is configured in `[tools]` \
         (docs/configuration.md); MCP servers' tools take the schemas their servers give.\n\n\
         | Tool | Input |\n|---|---|\n",
    );
    for name in BUILTIN_TOOLS {
        let tool = tools
            .get(name)
            .unwrap_or_else(|| panic!("{name} is registered"));
        let schema = tool.spec().input_schema;
        let required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let keys: Vec<String> = schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, property)| match required.contains(&key.as_str()) {
                true => format!("**`{key}`** {}", kind(property)),
                false => format!("`{key}` {}", kind(property)),
            })
            .collect();
        let keys = match keys.is_empty() {
            true => "none".to_owned(),
            false => keys.join(", "),
        };
        text.push_str(&format!("| `{name}` | {keys} |\n"));
    }
    text
}

#[tokio::test]
async fn tool_reference_lists_every_tools_input_keys() {
    let root = tempfile::tempdir().unwrap();
    let tools = every_tool(root.path()).await;
    let generated = reference(&tools);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/tools.md");
    if std::env::var_os("AGENT_RUNTIME_UPDATE_DOCS").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/tools.md differs from the tools' schemas: run with AGENT_RUNTIME_UPDATE_DOCS=1 and review the change"
    );
}
