//! The `openai` provider: Chat Completions with `stream: true`. Works with any OpenAI-compatible
//! server through `base_url` (vLLM, llama.cpp server, Ollama, LiteLLM, Azure).
//!
//! Tool calls arrive in pieces keyed by `index` (the first piece carries `id` and `name`, later
//! ones append to `arguments`); usage arrives in a last chunk without choices because we ask for
//! `stream_options.include_usage`. `reasoning_content` (DeepSeek, vLLM) or `reasoning` (some
//! proxies) deltas are streamed as `thinking`.

use std::collections::BTreeMap;

use agent_runtime::protocol::content::{ContentPart, ModelMessage, Role, UserContent};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::http::{
    Failure, Flow, HttpSettings, StreamDecoder, StreamingApi, empty_turn, stream_with_retries,
};
use super::sse::SseEvent;
use super::{
    ModelDelta, ModelProvider, ModelRequest, ModelToolCall, ModelTurn, ProviderError,
    ProviderIdentity,
};
use agent_runtime::secret::Secret;

pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

#[derive(Debug)]
pub struct OpenAiProvider {
    model: String,
    endpoint: String,
    key: Option<Secret>,
    max_output_tokens: Option<u32>,
    context_window: u64,
    settings: HttpSettings,
    client: reqwest::Client,
}

impl OpenAiProvider {
    /// `base_url` is the API root (`…/v1`); requests go to `{base_url}/chat/completions`.
    pub fn new(
        model: String,
        base_url: &str,
        key: Option<Secret>,
        max_output_tokens: Option<u32>,
        context_window: u64,
        settings: HttpSettings,
    ) -> Result<Self, ProviderError> {
        let client = settings.client()?;
        Ok(Self {
            model,
            endpoint: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            key,
            max_output_tokens,
            context_window,
            settings,
            client,
        })
    }

    fn body(&self, request: &ModelRequest) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(|m| message(m)).collect();
        let mut body = json!({
            "model": request.model.as_deref().unwrap_or(&self.model),
            "messages": messages,
            "stream": true,
            "stream_options": { "include_usage": true },
        });
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({ "type": "function", "function": {
                        "name": tool.name, "description": tool.description, "parameters": tool.input_schema,
                    }})
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        if let Some(max) = self.max_output_tokens {
            body["max_tokens"] = json!(max);
        }
        body
    }
}

fn content(content: &UserContent) -> Value {
    match content {
        UserContent::Text(text) => Value::String(text.clone()),
        UserContent::Parts(parts) => parts
            .iter()
            .map(|part| match part {
                ContentPart::Text { text, .. } => json!({ "type": "text", "text": text }),
                ContentPart::ImageUrl { image_url } => {
                    json!({ "type": "image_url", "image_url": { "url": image_url.url } })
                }
            })
            .collect(),
    }
}

fn message(message: &ModelMessage) -> Value {
    match message.role {
        Role::System => json!({ "role": "system", "content": content(&message.content) }),
        Role::User => json!({ "role": "user", "content": content(&message.content) }),
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": message.tool_call_id.clone().unwrap_or_default(),
            "content": super::text_of(&message.content),
        }),
        Role::Assistant => {
            let text = super::text_of(&message.content);
            let mut value = json!({ "role": "assistant", "content": text });
            if let Some(calls) = message.tool_calls.as_ref().filter(|c| !c.is_empty()) {
                value["tool_calls"] = serde_json::to_value(calls).unwrap_or(Value::Null);
                if text.is_empty() {
                    // Some compatible servers reject an empty string next to tool calls.
                    value["content"] = Value::Null;
                }
            }
            value
        }
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn identity(&self) -> ProviderIdentity {
        ProviderIdentity {
            provider: "openai".to_owned(),
            api: "chat.completions".to_owned(),
            model: self.model.clone(),
        }
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        deltas: mpsc::Sender<ModelDelta>,
    ) -> Result<ModelTurn, ProviderError> {
        stream_with_retries(self, &self.client, &self.settings, request, &deltas).await
    }
}

impl StreamingApi for OpenAiProvider {
    type Decoder = ChunkDecoder;

    fn build(&self, client: &reqwest::Client, request: &ModelRequest) -> reqwest::RequestBuilder {
        let builder = client
            .post(&self.endpoint)
            .header("accept", "text/event-stream")
            .json(&self.body(request));
        match &self.key {
            Some(key) => builder.bearer_auth(key.expose()),
            None => builder,
        }
    }

    fn decoder(&self) -> ChunkDecoder {
        ChunkDecoder {
            turn: empty_turn(self.context_window),
            calls: BTreeMap::new(),
            finished: false,
        }
    }
}

/// Assembles a turn from `chat.completion.chunk`s.
#[derive(Debug)]
pub(super) struct ChunkDecoder {
    turn: ModelTurn,
    /// Tool calls by their stream `index`.
    calls: BTreeMap<u64, ModelToolCall>,
    /// A choice reported its `finish_reason`.
    finished: bool,
}

impl StreamDecoder for ChunkDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelDelta>) -> Result<Flow, Failure> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|_| Failure::malformed("a chunk is not JSON"))?;
        if let Some(error) = chunk.get("error") {
            let kind = error
                .get("type")
                .or_else(|| error.get("code"))
                .and_then(Value::as_str)
                .unwrap_or("error");
            return Err(Failure::in_stream(
                kind,
                kind.contains("overload") || kind.contains("server"),
            ));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.turn.usage.input_tokens = count("prompt_tokens");
            self.turn.usage.output_tokens = count("completion_tokens");
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return Ok(Flow::More);
        };
        for choice in choices {
            self.choice(choice, out)?;
        }
        Ok(Flow::More)
    }

    fn finish(mut self, ended_cleanly: bool) -> Result<ModelTurn, Failure> {
        // A server that closes the body right after the finishing chunk (no `[DONE]`) still
        // gave a whole answer; one that closes before it did not.
        if !ended_cleanly && !self.finished {
            return Err(Failure::truncated());
        }
        self.turn.tool_calls = std::mem::take(&mut self.calls).into_values().collect();
        for call in &mut self.turn.tool_calls {
            // A call without parameters may stream no argument text at all.
            if call.arguments.trim().is_empty() {
                call.arguments = "{}".to_owned();
            }
        }
        if self
            .turn
            .tool_calls
            .iter()
            .any(|call| call.id.is_empty() || call.name.is_empty())
        {
            return Err(Failure::malformed("a tool call has no id or name"));
        }
        Ok(self.turn)
    }
}

impl ChunkDecoder {
    fn choice(&mut self, choice: &Value, out: &mut Vec<ModelDelta>) -> Result<(), Failure> {
        if choice.get("finish_reason").is_some_and(|r| !r.is_null()) {
            self.finished = true;
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(());
        };
        let reasoning = ["reasoning_content", "reasoning"]
            .iter()
            .find_map(|key| delta.get(*key).and_then(Value::as_str));
        if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
            self.turn
                .reasoning
                .get_or_insert_with(String::new)
                .push_str(text);
            out.push(ModelDelta::Thinking(text.to_owned()));
        }
        if let Some(text) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.turn.content.push_str(text);
            out.push(ModelDelta::Content(text.to_owned()));
        }
        let Some(pieces) = delta.get("tool_calls").and_then(Value::as_array) else {
            return Ok(());
        };
        for piece in pieces {
            let index = piece
                .get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| Failure::malformed("a tool call piece has no index"))?;
            let call = self.calls.entry(index).or_insert_with(|| ModelToolCall {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            });
            if let Some(id) = piece.get("id").and_then(Value::as_str) {
                call.id = id.to_owned();
            }
            let function = piece.get("function");
            if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
                call.name.push_str(name);
            }
            if let Some(args) = function
                .and_then(|f| f.get("arguments"))
                .and_then(Value::as_str)
            {
                call.arguments.push_str(args);
            }
        }
        Ok(())
    }
}
