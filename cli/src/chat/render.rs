//! How session events look in the terminal: assistant text streams as it arrives, tool activity
//! and request ends get one short bracketed line each.

use agent_runtime::protocol::stream::ResultSubtype;
use agent_runtime::protocol::{EventPayload, PermissionRequestedData, StreamMessage};
use agent_runtime_client::{ClientError, SessionEvent};

/// What the chat loop must do after an event was shown.
#[derive(Debug, PartialEq)]
pub enum Shown {
    Nothing,
    /// A request ended (`result`); the id is the event's request.
    RequestEnded(Option<String>),
    /// A tool asks for approval.
    Permission(PermissionRequestedData),
    SessionClosed,
}

/// Turns events into terminal text, remembering whether the cursor is at the start of a line.
#[derive(Debug)]
pub struct Renderer {
    at_line_start: bool,
}

impl Default for Renderer {
    fn default() -> Self {
        Renderer {
            at_line_start: true,
        }
    }
}

impl Renderer {
    /// The text for `event` (possibly empty) and what it means for the loop.
    pub fn event(&mut self, event: &SessionEvent) -> (String, Shown) {
        match &event.payload {
            EventPayload::Stream(message) => self.stream(message, event),
            EventPayload::PermissionRequested(request) => {
                let line = format!("[permission] {}: {}", request.title, request.message);
                (self.line(&line), Shown::Permission(request.clone()))
            }
            EventPayload::SessionClosed(_) => (self.line("[session closed]"), Shown::SessionClosed),
        }
    }

    fn stream(&mut self, message: &StreamMessage, event: &SessionEvent) -> (String, Shown) {
        let text = match message {
            StreamMessage::Content { delta, .. } => {
                if delta.is_empty() {
                    return (String::new(), Shown::Nothing);
                }
                self.at_line_start = delta.ends_with('\n');
                delta.clone()
            }
            StreamMessage::ToolUse { name, .. } => self.line(&format!("[tool] {name} ...")),
            StreamMessage::ToolProgress { name, progress, .. } => match &progress.message {
                Some(note) => self.line(&format!("[tool] {name}: {note}")),
                None => String::new(),
            },
            StreamMessage::ToolResult { name, is_error, .. } => {
                let outcome = if *is_error == Some(true) {
                    "failed"
                } else {
                    "done"
                };
                self.line(&format!("[tool] {name} {outcome}"))
            }
            StreamMessage::Error { message, code, .. } => {
                let code = code.as_deref().unwrap_or("ERROR");
                self.line(&format!("[error {code}] {message}"))
            }
            StreamMessage::Result { subtype, error, .. } => {
                let line = match (subtype, error) {
                    (ResultSubtype::Success, _) => "[done]".to_owned(),
                    (ResultSubtype::Error, Some(error)) => format!("[request failed] {error}"),
                    (ResultSubtype::Error, None) => "[request failed]".to_owned(),
                };
                let request = event.envelope.request_id.clone();
                return (self.line(&line), Shown::RequestEnded(request));
            }
            StreamMessage::TurnInterrupted { .. } => self.line("[interrupted by new input]"),
            StreamMessage::TurnStart { .. }
            | StreamMessage::TurnEnd { .. }
            | StreamMessage::InputApplied { .. }
            | StreamMessage::Thinking { .. }
            | StreamMessage::ToolMessage { .. }
            | StreamMessage::ToolRuntimePatch { .. }
            | StreamMessage::ToolContextPatch { .. }
            | StreamMessage::ToolNewMessages { .. }
            | StreamMessage::ToolPermissionUpdates { .. }
            | StreamMessage::Usage { .. } => String::new(),
        };
        (text, Shown::Nothing)
    }

    /// A whole line of its own, starting on a fresh line.
    pub fn line(&mut self, text: &str) -> String {
        let lead = if self.at_line_start { "" } else { "\n" };
        self.at_line_start = true;
        format!("{lead}{text}\n")
    }

    /// A prompt on a fresh line; the user's answer follows it on the same line.
    pub fn prompt(&mut self, text: &str) -> String {
        let lead = if self.at_line_start { "" } else { "\n" };
        self.at_line_start = false;
        format!("{lead}{text}")
    }

    /// Text typed by the user ended a line (the terminal echoed the newline).
    pub fn user_newline(&mut self) {
        self.at_line_start = true;
    }

    /// A failed command, as one line.
    pub fn error(&mut self, what: &str, error: &ClientError) -> String {
        self.line(&format!(
            "[{what} failed] {}: {}",
            error.code, error.message
        ))
    }
}

/// The approval question.
pub fn permission_prompt(request: &PermissionRequestedData) -> String {
    format!(
        "Allow {}? [y]es / [n]o / [a]lways for this session: ",
        request.tool_name
    )
}
