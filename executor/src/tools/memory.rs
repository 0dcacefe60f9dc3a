//! `MemoryRead` and `MemoryWrite` (docs/agent.md §6.8): memories kept by the store (memory, JSONL
//! or PostgreSQL; never the host disk), per tenant and scope. The operator chooses the scope: the
//! whole tenant (what one user teaches the agent, every user of the tenant benefits from), or one
//! user (the session's creator) when users must not see each other's memories. Memory text is
//! untrusted model input: it reaches the model only as a tool result, never the system prompt.

use std::sync::Arc;

use agent_runtime_store::{AgentMemories, MemoryRecord, RuntimeErrorCode, StoreError};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::output::{failure, success};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;
use crate::tools::text;

pub const MEMORY_READ_TOOL: &str = "MemoryRead";
pub const MEMORY_WRITE_TOOL: &str = "MemoryWrite";

/// Whose memories a session reads and writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemoryScope {
    /// One set per tenant.
    #[default]
    Tenant,
    /// One set per user of a tenant: the session's creator.
    User,
}

impl MemoryScope {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "tenant" => Some(MemoryScope::Tenant),
            "user" => Some(MemoryScope::User),
            _ => None,
        }
    }

    /// The store's scope key for a session created by `creator`.
    fn key(self, creator: &str) -> String {
        match self {
            MemoryScope::Tenant => "tenant".to_owned(),
            MemoryScope::User => format!("user:{creator}"),
        }
    }
}

/// The `[memory]` configuration: the tools exist only when it is enabled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    pub enabled: bool,
    pub scope: MemoryScope,
    /// Memories one scope may hold. Default 100.
    pub max_entries: u32,
    /// Longest body, in bytes. Default 64 KiB.
    pub max_body_bytes: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            scope: MemoryScope::Tenant,
            max_entries: 100,
            max_body_bytes: 64 * 1024,
        }
    }
}

/// The store and scope of one call; `None` when the session has no memory store.
fn access(
    context: &ToolContext,
    config: &MemoryConfig,
) -> Option<(Arc<dyn AgentMemories>, String)> {
    let store = context.memories.as_ref()?;
    Some((Arc::clone(store), config.scope.key(&context.creator)))
}

fn no_store() -> ToolOutcome {
    failure("No memory store is available to this session")
}

/// A store failure as the model sees it: a full scope says so, anything else says nothing of the
/// store's internals.
fn store_failure(error: &StoreError, config: &MemoryConfig) -> ToolOutcome {
    if error.runtime_code() == Some(RuntimeErrorCode::QuotaExceeded) {
        let mut outcome = failure(format!(
            "The memory store is full ({} memories); delete one first",
            config.max_entries
        ));
        outcome.output["code"] = Value::from("TOOL_QUOTA_EXCEEDED");
        return outcome;
    }
    if let StoreError::InvalidArgument(message) = error {
        return failure(message.clone());
    }
    tracing::warn!(error = %error, "the memory store failed");
    failure("The memory store is unavailable; try again later")
}

fn summary(record: &MemoryRecord) -> Value {
    json!({
        "name": record.name,
        "description": record.description,
        "type": record.memory_type,
        "updatedAt": agent_runtime::timefmt::format_iso_ms(record.updated_at_ms),
    })
}

fn whole(record: &MemoryRecord) -> Value {
    let mut value = summary(record);
    value["body"] = Value::from(record.body.clone());
    value
}

/// The index text of the reference: one line per memory, or `(no memories saved)`.
fn index(records: &[MemoryRecord]) -> String {
    if records.is_empty() {
        return "(no memories saved)".to_owned();
    }
    records
        .iter()
        .map(|r| format!("- [{}]({}) — {}", r.name, r.name, r.description))
        .collect::<Vec<_>>()
        .join("\n")
}

fn subject(input: &Value) -> ToolCheck {
    ToolCheck {
        subject: input["name"]
            .as_str()
            .or(input["query"].as_str())
            .map(str::to_owned),
        affected_paths: Vec::new(),
    }
}

/// `MemoryRead`: list, get, search or index the session's memories.
#[derive(Debug)]
pub struct MemoryReadTool(pub MemoryConfig);

#[async_trait]
impl Tool for MemoryReadTool {
    fn belongs_to_creator(&self) -> bool {
        self.0.scope == MemoryScope::User
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: MEMORY_READ_TOOL.to_owned(),
            description: "Reads saved memories: list them, get one by name, search their text, or read the index.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "operation": { "enum": ["list", "get", "search", "index"] },
                    "name": { "type": "string", "minLength": 1, "maxLength": 128 },
                    "query": { "type": "string", "minLength": 1, "maxLength": 1000 },
                },
                "required": ["operation"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        match input["operation"].as_str() {
            Some("get") if input["name"].as_str().is_none() => {
                Err("operation \"get\" needs a name".to_owned())
            }
            Some("search") if input["query"].as_str().is_none() => {
                Err("operation \"search\" needs a query".to_owned())
            }
            _ => Ok(subject(input)),
        }
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Read memories ({})", text(input, "operation"))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let Some((store, scope)) = access(&context, &self.0) else {
            return no_store();
        };
        let tenant = context.tenant_id.as_str();
        if input["operation"] == "get" {
            let name = text(&input, "name");
            return match store.get_memory(tenant, &scope, name).await {
                Ok(Some(record)) => success(whole(&record), format!("Memory {name}")),
                Ok(None) => failure(format!("Memory not found: {name}")),
                Err(error) => store_failure(&error, &self.0),
            };
        }
        let records = match store.list_memories(tenant, &scope).await {
            Ok(records) => records,
            Err(error) => return store_failure(&error, &self.0),
        };
        match input["operation"].as_str() {
            Some("index") => success(Value::from(index(&records)), "Memory index"),
            Some("search") => {
                let query = text(&input, "query").to_lowercase();
                let found: Vec<Value> = records
                    .iter()
                    .filter(|r| {
                        [&r.name, &r.description, &r.body]
                            .iter()
                            .any(|text| text.to_lowercase().contains(&query))
                    })
                    .map(summary)
                    .collect();
                let count = found.len();
                success(Value::from(found), format!("{count} memories match"))
            }
            _ => {
                let count = records.len();
                let list: Vec<Value> = records.iter().map(summary).collect();
                success(Value::from(list), format!("{count} memories"))
            }
        }
    }
}

/// `MemoryWrite`: save (insert or replace) or delete one memory.
#[derive(Debug)]
pub struct MemoryWriteTool(pub MemoryConfig);

#[async_trait]
impl Tool for MemoryWriteTool {
    fn belongs_to_creator(&self) -> bool {
        self.0.scope == MemoryScope::User
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: MEMORY_WRITE_TOOL.to_owned(),
            description: "Saves a memory (name: lowercase words joined by hyphens) or deletes one."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "operation": { "enum": ["save", "delete"] },
                    "name": { "type": "string", "minLength": 1, "maxLength": 128 },
                    "description": { "type": "string", "minLength": 1, "maxLength": 1000 },
                    "type": { "enum": ["user", "feedback", "project", "reference"] },
                    "body": { "type": "string" },
                },
                "required": ["operation", "name"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Edit
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        if input["operation"] == "save" {
            for field in ["description", "type", "body"] {
                if input[field].as_str().is_none() {
                    return Err(format!("operation \"save\" needs {field}"));
                }
            }
            let body = text(input, "body").len();
            if body > self.0.max_body_bytes {
                return Err(format!(
                    "the body has {body} bytes; a memory holds at most {}",
                    self.0.max_body_bytes
                ));
            }
        }
        Ok(subject(input))
    }

    fn approval_title(&self, input: &Value) -> String {
        format!(
            "{} the memory {}",
            match input["operation"].as_str() {
                Some("delete") => "Delete",
                _ => "Save",
            },
            text(input, "name")
        )
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        if let Err(error) = self.check(&input) {
            return failure(error);
        }
        let Some((store, scope)) = access(&context, &self.0) else {
            return no_store();
        };
        let tenant = context.tenant_id.as_str();
        let name = text(&input, "name");
        if input["operation"] == "delete" {
            return match store.delete_memory(tenant, &scope, name).await {
                Ok(true) => success(
                    json!({ "name": name, "deleteRequested": true }),
                    format!("Deleted memory {name}"),
                ),
                Ok(false) => failure(format!("Memory not found: {name}")),
                Err(error) => store_failure(&error, &self.0),
            };
        }
        let text = |field: &str| input[field].as_str().unwrap_or_default().to_owned();
        let record = MemoryRecord {
            scope,
            name: name.to_owned(),
            description: text("description"),
            memory_type: text("type"),
            body: text("body"),
            updated_at_ms: 0,
        };
        match store.save_memory(tenant, record, self.0.max_entries).await {
            Ok(saved) => success(whole(&saved), format!("Saved memory {name}")),
            Err(error) => store_failure(&error, &self.0),
        }
    }
}
