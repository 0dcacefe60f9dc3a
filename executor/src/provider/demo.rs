//! The `demo` provider: deterministic, offline, and labelled as a demo in everything it says.
//!
//! It is steered by the text of the latest user input (documented in the README):
//! - `needs approval` or `demo:approval` asks to run the harmless `demo_approval` tool, which needs
//!   a human's approval; the answer after the tool says `approved` or `denied`;
//! - `demo:slow` streams 40 deltas, one every `slow_delta_interval` (for trying `request.abort`);
//! - `demo:deltas=N` streams N deltas `delta-1 ` … `delta-N ` (N ≤ 100 000) with no pause: the
//!   benchmark mode, in which the server, not a model, is measured. Two optional knobs:
//!   `demo:interval=MS` paces the deltas on a fixed schedule (one every MS milliseconds,
//!   ≤ 10 000; a delta that falls behind is sent at once), and `demo:stamp` makes each delta
//!   `delta-I@T ` where T is the wall clock in microseconds since the Unix epoch when the delta
//!   was produced (its time on the schedule when paced; the benchmark measures live latency
//!   against it);
//! - `demo:fail` fails the model call with `PROVIDER_UNAVAILABLE`;
//! - `demo:tool NAME {json input}` calls the registered tool NAME with that input (through the
//!   whole permission pipeline, like a model's call), then answers with the tool's result:
//!   `[demo] NAME returned: <result>` (or `[demo] NAME failed: <error>`), so any tool can be
//!   driven without a model;
//! - anything else is echoed back.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_runtime::protocol::content::{ContentPart, ModelMessage, Role, UserContent};
use async_trait::async_trait;
use tokio::sync::mpsc;

use super::{
    ModelDelta, ModelProvider, ModelRequest, ModelToolCall, ModelTurn, ModelUsage, ProviderError,
    ProviderErrorCode, ProviderIdentity,
};

/// The tool `demo:approval` calls (`DemoApprovalTool`): the name both sides agree on.
pub const DEMO_APPROVAL_TOOL: &str = "demo_approval";

/// Largest `demo:deltas=N`.
const MAX_DEMO_DELTAS: u64 = 100_000;
const SLOW_DELTAS: usize = 40;
/// Largest `demo:interval=MS`.
const MAX_DEMO_INTERVAL_MS: u64 = 10_000;

#[derive(Clone, Debug)]
pub struct DemoProvider {
    /// Pause between deltas of `demo:slow`.
    pub slow_delta_interval: Duration,
}

impl Default for DemoProvider {
    fn default() -> Self {
        Self {
            slow_delta_interval: Duration::from_millis(250),
        }
    }
}

#[async_trait]
impl ModelProvider for DemoProvider {
    fn identity(&self) -> ProviderIdentity {
        ProviderIdentity {
            provider: "demo".to_owned(),
            api: "demo".to_owned(),
            model: "demo-echo".to_owned(),
        }
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        deltas: mpsc::Sender<ModelDelta>,
    ) -> Result<ModelTurn, ProviderError> {
        let plan = plan(&request.messages);
        let mut stream = Stream {
            content: String::new(),
            deltas,
        };
        let mut tool_calls = Vec::new();
        match plan {
            Plan::Fail => {
                return Err(ProviderError {
                    code: ProviderErrorCode::Unavailable,
                    message: "The demo provider was asked to fail".to_owned(),
                });
            }
            Plan::AfterTool { approved } => {
                let word = if approved { "approved" } else { "denied" };
                for delta in ["[demo] The demo tool was ", word, "."] {
                    stream.send(delta.to_owned()).await;
                }
            }
            Plan::CallTool { name, arguments } => {
                stream.send(format!("[demo] Calling {name}.")).await;
                tool_calls.push(ModelToolCall {
                    id: format!("call-{}", agent_runtime::ids::nanoid()),
                    name,
                    arguments,
                });
            }
            Plan::ToolAnswer { name, result } => {
                let answer = match result.strip_prefix(super::TOOL_ERROR_PREFIX) {
                    Some(error) => format!("[demo] {name} failed: {error}"),
                    None => format!("[demo] {name} returned: {result}"),
                };
                stream.send(answer).await;
            }
            Plan::AskApproval { call_id } => {
                stream
                    .send("[demo] Asking to run the demo tool.".to_owned())
                    .await;
                tool_calls.push(ModelToolCall {
                    id: call_id,
                    name: DEMO_APPROVAL_TOOL.to_owned(),
                    arguments: r#"{"action":"say hello"}"#.to_owned(),
                });
            }
            Plan::Slow => {
                for index in 1..=SLOW_DELTAS {
                    stream.send(format!("slow-{index} ")).await;
                    tokio::time::sleep(self.slow_delta_interval).await;
                }
            }
            Plan::Deltas(plan) => {
                stream.scheduled(&plan).await;
            }
            Plan::Echo(text) => {
                stream.send("[demo] You said: ".to_owned()).await;
                for word in text.split_inclusive(' ') {
                    stream.send(word.to_owned()).await;
                }
            }
        }
        let usage = usage(request, &stream.content);
        Ok(ModelTurn {
            content: stream.content,
            reasoning: None,
            tool_calls,
            usage,
        })
    }
}
/// About four characters a token, as a model would count.
fn usage(request: &ModelRequest, content: &str) -> ModelUsage {
    ModelUsage {
        input_tokens: request
            .messages
            .iter()
            .map(|message| text_of(&message.content).len() as u64 / 4 + 1)
            .sum(),
        output_tokens: content.len() as u64 / 4 + 1,
        max_context_tokens: 128_000,
    }
}

/// The deltas of one answer, and the answer they add up to.
struct Stream {
    content: String,
    deltas: mpsc::Sender<ModelDelta>,
}

impl Stream {
    async fn send(&mut self, delta: String) {
        self.content.push_str(&delta);
        let _ = self.deltas.send(ModelDelta::Content(delta)).await;
    }

    /// A fixed schedule, like a model streaming at its own pace: a delta that falls behind (a
    /// busy server) goes out at once instead of pushing the rest back. Only a full channel (the
    /// server not taking deltas) slows the stream down.
    async fn scheduled(&mut self, plan: &DeltaPlan) {
        let started = (tokio::time::Instant::now(), unix_micros());
        for index in 1..=plan.count {
            let offset = plan.interval.map_or(Duration::ZERO, |period| {
                period.saturating_mul(u32::try_from(index - 1).unwrap_or(u32::MAX))
            });
            if plan.interval.is_some() {
                tokio::time::sleep_until(started.0 + offset).await;
            }
            let delta = if plan.stamp {
                // When the schedule produced it, so a late send counts as latency.
                let stamp = match plan.interval {
                    Some(_) => started.1 + offset.as_micros(),
                    None => unix_micros(),
                };
                format!("delta-{index}@{stamp} ")
            } else {
                format!("delta-{index} ")
            };
            self.send(delta).await;
        }
    }
}

enum Plan {
    Fail,
    AfterTool { approved: bool },
    CallTool { name: String, arguments: String },
    ToolAnswer { name: String, result: String },
    AskApproval { call_id: String },
    Slow,
    Deltas(DeltaPlan),
    Echo(String),
}

/// `demo:deltas=N` with its optional `demo:interval=MS` and `demo:stamp`.
struct DeltaPlan {
    count: u64,
    interval: Option<Duration>,
    stamp: bool,
}

fn plan(messages: &[Arc<ModelMessage>]) -> Plan {
    // System messages a tool added (a skill's prompt addition) are context, not the turn.
    let Some(last) = messages.iter().rev().find(|m| m.role != Role::System) else {
        return Plan::Echo(String::new());
    };
    if last.role == Role::Tool {
        let result = text_of(&last.content);
        match last.name.as_deref() {
            Some(name) if name != DEMO_APPROVAL_TOOL => {
                return Plan::ToolAnswer {
                    name: name.to_owned(),
                    result,
                };
            }
            _ => {
                let approved = !result.contains("\"denied\"") && !super::is_tool_error(&result);
                return Plan::AfterTool { approved };
            }
        }
    }
    let text = text_of(&last.content);
    if text.contains("demo:fail") {
        return Plan::Fail;
    }
    if let Some((name, arguments)) = tool_call_in(&text) {
        return Plan::CallTool { name, arguments };
    }
    if text.contains("needs approval") || text.contains("demo:approval") {
        let call_id = format!("call-{}", agent_runtime::ids::nanoid());
        return Plan::AskApproval { call_id };
    }
    if text.contains("demo:slow") {
        return Plan::Slow;
    }
    if let Some(count) = number_after(&text, "demo:deltas=") {
        let interval = number_after(&text, "demo:interval=")
            .filter(|&ms| ms > 0)
            .map(|ms| Duration::from_millis(ms.min(MAX_DEMO_INTERVAL_MS)));
        return Plan::Deltas(DeltaPlan {
            count: count.clamp(1, MAX_DEMO_DELTAS),
            interval,
            stamp: text.contains("demo:stamp"),
        });
    }
    Plan::Echo(text)
}

/// `demo:tool NAME {json}`: the tool's name and its input as written (`{}` when none is given).
/// The input is passed on unparsed, as a model's arguments are: the executor validates it.
fn tool_call_in(text: &str) -> Option<(String, String)> {
    let rest = &text[text.find("demo:tool ")? + "demo:tool ".len()..];
    let rest = rest.trim_start();
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (name, input) = rest.split_at(end);
    if name.is_empty() {
        return None;
    }
    let input = input.trim();
    let arguments = if input.is_empty() { "{}" } else { input };
    Some((name.to_owned(), arguments.to_owned()))
}

/// The decimal number right after `key` in `text`.
fn number_after(text: &str, key: &str) -> Option<u64> {
    let start = text.find(key)? + key.len();
    let digits: String = text[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse::<u64>().ok()
}

/// Wall-clock microseconds since the Unix epoch. Wall time on purpose, not an injected clock: a
/// benchmark client on the same machine compares it with its own receive time.
fn unix_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros())
}

/// The plain text of message content (image parts are ignored).
pub(crate) fn text_of(content: &UserContent) -> String {
    match content {
        UserContent::Text(text) => text.clone(),
        UserContent::Parts(parts) => parts
            .iter()
            .filter_map(|part| match part {
                ContentPart::Text { text, .. } => Some(text.as_str()),
                ContentPart::ImageUrl { .. } => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> ModelMessage {
        serde_json::from_value(serde_json::json!({"role": "user", "content": text})).unwrap()
    }

    async fn run(messages: Vec<ModelMessage>) -> (Result<ModelTurn, ProviderError>, Vec<String>) {
        let provider = DemoProvider {
            slow_delta_interval: Duration::from_millis(1),
        };
        let (sender, mut receiver) = mpsc::channel(1024);
        let request = ModelRequest {
            trace: None,
            messages: messages.into_iter().map(Arc::new).collect(),
            tools: Vec::new(),
            model: None,
        };
        let turn = provider.complete(&request, sender).await;
        let mut deltas = Vec::new();
        while let Ok(ModelDelta::Content(delta)) = receiver.try_recv() {
            deltas.push(delta);
        }
        (turn, deltas)
    }

    #[tokio::test]
    async fn echoes_the_input_and_says_it_is_a_demo() {
        let (turn, deltas) = run(vec![user("hello there")]).await;
        let turn = turn.unwrap();
        assert_eq!(turn.content, "[demo] You said: hello there");
        assert_eq!(deltas.concat(), turn.content);
        assert!(turn.tool_calls.is_empty());
    }

    #[tokio::test]
    async fn asks_for_the_demo_tool_when_told_to() {
        let (turn, _) = run(vec![user("this needs approval")]).await;
        let turn = turn.unwrap();
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.tool_calls[0].name, DEMO_APPROVAL_TOOL);
    }

    #[tokio::test]
    async fn calls_the_named_tool_with_the_given_input_then_answers_with_its_result() {
        let (turn, _) = run(vec![user(
            r#"demo:tool Read {"file_path": "/srv/a b.txt"}"#,
        )])
        .await;
        let turn = turn.unwrap();
        assert_eq!(turn.tool_calls.len(), 1);
        assert_eq!(turn.tool_calls[0].name, "Read");
        assert_eq!(
            turn.tool_calls[0].arguments,
            r#"{"file_path": "/srv/a b.txt"}"#
        );
        let (turn, _) = run(vec![user("demo:tool TaskList")]).await;
        assert_eq!(turn.unwrap().tool_calls[0].arguments, "{}");

        let result = |text: &str| ModelMessage {
            tool_call_id: Some("call-1".into()),
            name: Some("Read".into()),
            ..ModelMessage::new(Role::Tool, text)
        };
        let (turn, _) = run(vec![user("demo:tool Read {}"), result("\"hi\"")]).await;
        assert_eq!(turn.unwrap().content, "[demo] Read returned: \"hi\"");
        let (turn, _) = run(vec![
            user("demo:tool Read {}"),
            result("Error: {\"error\":\"x\"}"),
        ])
        .await;
        assert_eq!(
            turn.unwrap().content,
            "[demo] Read failed: {\"error\":\"x\"}"
        );
    }

    #[tokio::test]
    async fn streams_the_requested_number_of_deltas() {
        let (_, deltas) = run(vec![user("demo:deltas=5")]).await;
        assert_eq!(
            deltas,
            ["delta-1 ", "delta-2 ", "delta-3 ", "delta-4 ", "delta-5 "]
        );
    }

    #[tokio::test]
    async fn paces_and_stamps_deltas_when_told_to() {
        let before = unix_micros();
        let started = std::time::Instant::now();
        let (_, deltas) = run(vec![user("demo:deltas=3 demo:interval=20 demo:stamp")]).await;
        // Three ticks of a 20 ms interval: the first is immediate, the others 20 ms apart.
        assert!(started.elapsed() >= Duration::from_millis(40));
        assert_eq!(deltas.len(), 3);
        let mut previous = before;
        for (index, delta) in deltas.iter().enumerate() {
            let (label, stamp) = delta.trim_end().split_once('@').unwrap();
            assert_eq!(label, format!("delta-{}", index + 1));
            let stamp: u128 = stamp.parse().unwrap();
            assert!(stamp >= previous, "stamps never go back");
            if index > 0 {
                // Stamped with the schedule: exactly one interval apart.
                assert_eq!(stamp - previous, 20_000);
            }
            previous = stamp;
        }
    }

    #[tokio::test]
    async fn fails_with_a_stable_code_when_told_to() {
        let (turn, _) = run(vec![user("demo:fail")]).await;
        assert_eq!(turn.unwrap_err().code, ProviderErrorCode::Unavailable);
    }
}
