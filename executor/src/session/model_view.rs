//! The model's view of a session's conversation, kept decoded while the session holds its lease.
//!
//! Every model turn sends the whole conversation. Decoding every transcript entry from JSON on
//! every turn would make a long session's turns cost in proportion to its history; each entry is
//! decoded once here, when it is written or first loaded, and a turn only copies the decoded
//! messages.

use std::collections::HashSet;
use std::sync::Arc;

use agent_runtime::protocol::content::{ModelMessage, Role, UserContent};
use agent_runtime_store::model::TranscriptEntry;

/// The transcript's messages in stored order, each decoded once.
#[derive(Debug, Default)]
pub(crate) struct ModelView {
    messages: Vec<Arc<ModelMessage>>,
}

impl ModelView {
    pub(crate) fn from_entries(entries: Vec<TranscriptEntry>) -> Self {
        let mut view = Self::default();
        view.extend(&entries);
        view
    }

    /// Follows entries appended to the transcript.
    pub(crate) fn extend(&mut self, appended: &[TranscriptEntry]) {
        self.messages.extend(
            appended
                .iter()
                .cloned()
                .filter_map(super::entry_message)
                .map(Arc::new),
        );
    }

    /// The readable conversation (the store's readable view, on decoded messages): every tool
    /// call no later `tool` message answers is dropped from its assistant message, and an
    /// assistant message left with neither calls nor content is dropped, so the provider never
    /// sees a dangling tool call.
    pub(crate) fn readable(&self) -> Vec<Arc<ModelMessage>> {
        let mut answered: HashSet<&str> = HashSet::new();
        let mut kept: Vec<Arc<ModelMessage>> = Vec::with_capacity(self.messages.len());
        // Backwards, so `answered` holds exactly the results that come later.
        for message in self.messages.iter().rev() {
            if message.role == Role::Tool {
                if let Some(id) = message.tool_call_id.as_deref() {
                    answered.insert(id);
                }
                kept.push(Arc::clone(message));
                continue;
            }
            let calls = match &message.tool_calls {
                Some(calls) if message.role == Role::Assistant => calls,
                _ => {
                    kept.push(Arc::clone(message));
                    continue;
                }
            };
            if calls.iter().all(|call| answered.contains(call.id.as_str())) {
                kept.push(Arc::clone(message));
                continue;
            }
            let settled: Vec<_> = calls
                .iter()
                .filter(|call| answered.contains(call.id.as_str()))
                .cloned()
                .collect();
            if settled.is_empty() && !has_content(&message.content) {
                continue;
            }
            let mut stripped = ModelMessage::clone(message);
            stripped.tool_calls = (!settled.is_empty()).then_some(settled);
            kept.push(Arc::new(stripped));
        }
        kept.reverse();
        kept
    }
}

fn has_content(content: &UserContent) -> bool {
    match content {
        UserContent::Text(text) => !text.is_empty(),
        UserContent::Parts(parts) => !parts.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_runtime::protocol::content::{FunctionCall, FunctionType, ToolCall};

    fn message(role: Role, content: &str) -> ModelMessage {
        serde_json::from_value(serde_json::json!({ "role": role, "content": content }))
            .expect("a valid message")
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.to_owned(),
            call_type: FunctionType::Function,
            function: FunctionCall {
                name: "Read".to_owned(),
                arguments: "{}".to_owned(),
            },
        }
    }

    fn assistant_calling(content: &str, ids: &[&str]) -> ModelMessage {
        ModelMessage {
            tool_calls: Some(ids.iter().map(|id| call(id)).collect()),
            ..message(Role::Assistant, content)
        }
    }

    fn result_of(id: &str) -> ModelMessage {
        ModelMessage {
            tool_call_id: Some(id.to_owned()),
            ..message(Role::Tool, "done")
        }
    }

    fn view(messages: Vec<ModelMessage>) -> ModelView {
        ModelView {
            messages: messages.into_iter().map(Arc::new).collect(),
        }
    }

    #[test]
    fn answered_calls_stay_and_unanswered_ones_are_dropped() {
        let readable = view(vec![
            message(Role::User, "hi"),
            assistant_calling("", &["a", "b"]),
            result_of("a"),
        ])
        .readable();
        let calls = readable[1]
            .tool_calls
            .as_ref()
            .expect("the answered call stays");
        assert_eq!(
            calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(readable.len(), 3);
    }

    #[test]
    fn an_assistant_message_left_with_nothing_is_dropped_and_one_with_text_keeps_its_text() {
        let readable = view(vec![
            message(Role::User, "hi"),
            assistant_calling("", &["a"]),
            assistant_calling("thinking aloud", &["b"]),
        ])
        .readable();
        assert_eq!(readable.len(), 2);
        assert_eq!(readable[1].role, Role::Assistant);
        assert_eq!(readable[1].tool_calls, None);
        assert_eq!(
            readable[1].content,
            UserContent::Text("thinking aloud".into())
        );
    }

    #[test]
    fn a_result_before_its_call_does_not_answer_it() {
        let readable = view(vec![result_of("a"), assistant_calling("", &["a"])]).readable();
        assert_eq!(readable.len(), 1);
        assert_eq!(readable[0].role, Role::Tool);
    }
}
