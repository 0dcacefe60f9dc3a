//! The `anthropic` provider: the Messages API with `stream: true`.
//!
//! The answer arrives as content blocks (`content_block_start` / `_delta` / `_stop`): text
//! (`text_delta`), tool use (`input_json_delta` pieces of the input JSON) and thinking
//! (`thinking_delta`). Input tokens come with `message_start` (and, cumulative, with
//! `message_delta` from some servers), output tokens with `message_delta`. A failed tool call's
//! result is sent with `is_error: true`.
//!
//! The conversation is mapped to Anthropic's shape: system messages go to `system`, tool results
//! become `tool_result` blocks of a user message, and consecutive messages of one role are merged
//! because the API wants user and assistant turns to alternate.

use std::collections::BTreeMap;
use std::sync::Arc;

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

pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
const API_VERSION: &str = "2023-06-01";

#[derive(Debug)]
pub struct AnthropicProvider {
    model: String,
    endpoint: String,
    key: Secret,
    max_output_tokens: u32,
    context_window: u64,
    settings: HttpSettings,
    client: reqwest::Client,
}

impl AnthropicProvider {
    /// Requests go to `{base_url}/v1/messages`.
    pub fn new(
        model: String,
        base_url: &str,
        key: Secret,
        max_output_tokens: u32,
        context_window: u64,
        settings: HttpSettings,
    ) -> Result<Self, ProviderError> {
        let client = settings.client()?;
        Ok(Self {
            model,
            endpoint: format!("{}/v1/messages", base_url.trim_end_matches('/')),
            key,
            max_output_tokens,
            context_window,
            settings,
            client,
        })
    }

    fn body(&self, request: &ModelRequest) -> Value {
        let (system, messages) = conversation(&request.messages);
        let mut body = json!({
            "model": request.model.as_deref().unwrap_or(&self.model),
            "max_tokens": self.max_output_tokens,
            "messages": messages,
            "stream": true,
        });
        if !system.is_empty() {
            body["system"] = Value::String(system);
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| json!({ "name": tool.name, "description": tool.description, "input_schema": tool.input_schema }))
                .collect();
            body["tools"] = Value::Array(tools);
        }
        body
    }
}

/// The `system` text and the alternating `messages`.
fn conversation(messages: &[Arc<ModelMessage>]) -> (String, Vec<Value>) {
    let mut system = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message.role {
            Role::System => {
                system.push(super::text_of(&message.content));
                continue;
            }
            Role::User => ("user", user_blocks(&message.content)),
            Role::Tool => {
                let text = super::text_of(&message.content);
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.clone().unwrap_or_default(),
                });
                if super::is_tool_error(&text) {
                    block["is_error"] = Value::Bool(true);
                }
                block["content"] = Value::String(text);
                ("user", vec![block])
            }
            Role::Assistant => ("assistant", assistant_blocks(message)),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages = turns
        .into_iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect();
    (system.join("\n\n"), messages)
}

fn user_blocks(content: &UserContent) -> Vec<Value> {
    match content {
        UserContent::Text(text) => vec![json!({ "type": "text", "text": text })],
        UserContent::Parts(parts) => parts
            .iter()
            .map(|part| match part {
                ContentPart::Text { text, .. } => json!({ "type": "text", "text": text }),
                ContentPart::ImageUrl { image_url } => image_block(&image_url.url),
            })
            .collect(),
    }
}

/// `data:` URLs become base64 sources; anything else is passed as a URL source.
fn image_block(url: &str) -> Value {
    let inline = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"));
    match inline {
        Some((media_type, data)) => json!({ "type": "image", "source": {
            "type": "base64", "media_type": media_type, "data": data,
        }}),
        None => json!({ "type": "image", "source": { "type": "url", "url": url } }),
    }
}

fn assistant_blocks(message: &ModelMessage) -> Vec<Value> {
    let mut blocks = Vec::new();
    let text = super::text_of(&message.content);
    if !text.is_empty() {
        blocks.push(json!({ "type": "text", "text": text }));
    }
    for call in message.tool_calls.iter().flatten() {
        // The transcript keeps arguments as text; the API wants the object back.
        let input: Value = serde_json::from_str(&call.function.arguments).unwrap_or(json!({}));
        blocks.push(json!({ "type": "tool_use", "id": call.id, "name": call.function.name, "input": input }));
    }
    blocks
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    fn identity(&self) -> ProviderIdentity {
        ProviderIdentity {
            provider: "anthropic".to_owned(),
            api: "messages".to_owned(),
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

impl StreamingApi for AnthropicProvider {
    type Decoder = EventDecoder;

    fn build(&self, client: &reqwest::Client, request: &ModelRequest) -> reqwest::RequestBuilder {
        client
            .post(&self.endpoint)
            .header("x-api-key", self.key.expose())
            .header("anthropic-version", API_VERSION)
            .header("accept", "text/event-stream")
            .json(&self.body(request))
    }

    fn decoder(&self) -> EventDecoder {
        EventDecoder {
            turn: empty_turn(self.context_window),
            tools: BTreeMap::new(),
            stopped: false,
        }
    }
}

/// Assembles a turn from Messages API stream events.
#[derive(Debug)]
pub(super) struct EventDecoder {
    turn: ModelTurn,
    /// Tool-use blocks by content-block index.
    tools: BTreeMap<u64, ModelToolCall>,
    stopped: bool,
}

impl StreamDecoder for EventDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelDelta>) -> Result<Flow, Failure> {
        if event.data.trim().is_empty() {
            return Ok(Flow::More);
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|_| Failure::malformed("an event is not JSON"))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(&event.event);
        match kind {
            "message_start" => {
                let usage = data.pointer("/message/usage");
                self.turn.usage.input_tokens = tokens(usage, "input_tokens");
                self.turn.usage.output_tokens = tokens(usage, "output_tokens");
            }
            "content_block_start" => {
                let index = block_index(&data)?;
                let block = data.get("content_block");
                if block.and_then(|b| b.get("type")).and_then(Value::as_str) == Some("tool_use") {
                    let field = |key: &str| {
                        block
                            .and_then(|b| b.get(key))
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    self.tools.insert(
                        index,
                        ModelToolCall {
                            id: field("id"),
                            name: field("name"),
                            arguments: String::new(),
                        },
                    );
                }
            }
            "content_block_delta" => self.delta(&data, out)?,
            // Its counts are cumulative for the whole message: `output_tokens` always, and
            // `input_tokens` where the server sends it (OpenAI-compatible proxies in front of
            // Anthropic-format servers report 0 in `message_start` and the real count here).
            "message_delta" => {
                let usage = data.get("usage");
                let (input, output) = (
                    tokens(usage, "input_tokens"),
                    tokens(usage, "output_tokens"),
                );
                self.turn.usage.input_tokens = self.turn.usage.input_tokens.max(input);
                self.turn.usage.output_tokens = self.turn.usage.output_tokens.max(output);
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Flow::Done);
            }
            "error" => {
                let error_kind = data
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                let overloaded = matches!(error_kind, "overloaded_error" | "api_error");
                return Err(Failure::in_stream(error_kind, overloaded));
            }
            // `ping`, `content_block_stop` and event types added later carry nothing we need.
            _ => {}
        }
        Ok(Flow::More)
    }

    fn finish(mut self, _ended_cleanly: bool) -> Result<ModelTurn, Failure> {
        if !self.stopped {
            return Err(Failure::truncated());
        }
        let mut calls: Vec<ModelToolCall> = std::mem::take(&mut self.tools).into_values().collect();
        for call in &mut calls {
            if call.id.is_empty() || call.name.is_empty() {
                return Err(Failure::malformed("a tool_use block has no id or name"));
            }
            if call.arguments.trim().is_empty() {
                call.arguments = "{}".to_owned();
            }
        }
        self.turn.tool_calls = calls;
        Ok(self.turn)
    }
}

impl EventDecoder {
    fn delta(&mut self, data: &Value, out: &mut Vec<ModelDelta>) -> Result<(), Failure> {
        let index = block_index(data)?;
        let delta = data
            .get("delta")
            .ok_or_else(|| Failure::malformed("a delta without delta"))?;
        let text = |key: &str| {
            delta
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => {
                let text = text("text");
                if text.is_empty() {
                    return Ok(());
                }
                self.turn.content.push_str(&text);
                out.push(ModelDelta::Content(text));
            }
            Some("thinking_delta") => {
                let text = text("thinking");
                if text.is_empty() {
                    return Ok(());
                }
                self.turn
                    .reasoning
                    .get_or_insert_with(String::new)
                    .push_str(&text);
                out.push(ModelDelta::Thinking(text));
            }
            Some("input_json_delta") => {
                let call = self.tools.get_mut(&index).ok_or_else(|| {
                    Failure::malformed("input_json_delta outside a tool_use block")
                })?;
                call.arguments.push_str(&text("partial_json"));
            }
            // `signature_delta` and future delta types are not shown to the user.
            _ => {}
        }
        Ok(())
    }
}

fn block_index(data: &Value) -> Result<u64, Failure> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| Failure::malformed("a content block event has no index"))
}

fn tokens(usage: Option<&Value>, key: &str) -> u64 {
    usage
        .and_then(|u| u.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}
