//! Model providers behind one trait. The agent loop streams a provider's deltas out as
//! `content` / `thinking` events while it collects the whole turn (text, tool calls, usage).
//!
//! Providers: `openai` (Chat Completions, any compatible server), `anthropic` (Messages API) and
//! the offline `demo`. Which one runs is the operator's choice ([`ProviderConfig`]).

mod anthropic;
mod config;
mod demo;
mod http;
mod openai;
mod sse;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;

pub use anthropic::{AnthropicProvider, DEFAULT_ANTHROPIC_BASE_URL};
pub use config::{
    DEFAULT_DEMO_SLOW_DELTA_INTERVAL, ProviderConfig, ProviderConfigError, ProviderKind,
    build_provider,
};
pub use demo::{DEMO_APPROVAL_TOOL, DemoProvider};
pub use http::{HttpSettings, client_builder};
pub use openai::{DEFAULT_OPENAI_BASE_URL, OpenAiProvider};

pub(crate) use demo::text_of;

/// How a failed (or denied, or interrupted) tool call's message starts: the tool's output is
/// JSON, whose text never starts with a letter, so this prefix marks a failure unambiguously
/// in the stored transcript, and providers that can say so (Anthropic's `is_error`) tell the model.
pub(crate) const TOOL_ERROR_PREFIX: &str = "Error: ";

/// Whether a `tool` message's text records a failed call (see [`TOOL_ERROR_PREFIX`]).
pub(crate) fn is_tool_error(text: &str) -> bool {
    text.starts_with(TOOL_ERROR_PREFIX)
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the tool's input.
    pub input_schema: Value,
}

/// What the model is asked: the conversation so far and the tools it may call.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    /// Shared with the session's decoded view of its transcript: a turn copies pointers, not
    /// the conversation.
    pub messages: Vec<std::sync::Arc<agent_runtime::protocol::content::ModelMessage>>,
    pub tools: Vec<ToolSpec>,
    /// The model to answer instead of the provider's own (a loaded skill's `model`); the
    /// endpoint and key stay the provider's.
    pub model: Option<String>,
    /// The span of this model call; HTTP providers send it as the `traceparent` header.
    pub trace: Option<agent_runtime::telemetry::TraceContext>,
}

/// A piece of a streaming answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelDelta {
    Content(String),
    Thinking(String),
}

/// A tool call the model made; `arguments` is JSON text as the model wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Token accounting of one model call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub max_context_tokens: u64,
}

/// One complete model step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelTurn {
    pub content: String,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ModelToolCall>,
    pub usage: ModelUsage,
}

/// Stable provider failure codes (docs/agent.md §1, §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderErrorCode {
    Unavailable,
    RateLimited,
    AuthFailed,
    BadResponse,
}

impl ProviderErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderErrorCode::Unavailable => "PROVIDER_UNAVAILABLE",
            ProviderErrorCode::RateLimited => "PROVIDER_RATE_LIMITED",
            ProviderErrorCode::AuthFailed => "PROVIDER_AUTH_FAILED",
            ProviderErrorCode::BadResponse => "PROVIDER_BAD_RESPONSE",
        }
    }
}

/// A provider failure. `message` must never contain keys, prompts or tool arguments.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    pub code: ProviderErrorCode,
    pub message: String,
}

/// Which model answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderIdentity {
    pub provider: String,
    pub api: String,
    pub model: String,
}

#[async_trait]
pub trait ModelProvider: Send + Sync + std::fmt::Debug {
    fn identity(&self) -> ProviderIdentity;

    /// Runs one model step, sending deltas as they arrive. Cancel by dropping the future.
    async fn complete(
        &self,
        request: &ModelRequest,
        deltas: mpsc::Sender<ModelDelta>,
    ) -> Result<ModelTurn, ProviderError>;
}
