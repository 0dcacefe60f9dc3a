//! How session events look in the terminal: assistant text streams as it arrives, tool activity
//! and request ends get one short bracketed line each.

use agent_runtime::protocol::stream::ResultSubtype;
use agent_runtime::protocol::{EventPayload, PermissionRequestedData, StreamMessage};
use agent_runtime_client::{ClientError, SessionEvent};
use serde_json::Value;

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
                let plan = request.input.get("plan").and_then(Value::as_str);
                let text = match questions_of(request) {
                    Some(questions) => {
                        let title = self.line(&format!("[question] {}", request.title));
                        format!("{title}{}", question_lines(questions))
                    }
                    None if is_plan(request) => {
                        let title =
                            self.line(&format!("[plan] {}: {}", request.title, request.message));
                        let body: String = plan
                            .into_iter()
                            .flat_map(str::lines)
                            .map(|line| format!("  {line}\n"))
                            .collect();
                        format!("{title}{body}")
                    }
                    None => self.line(&format!(
                        "[permission] {}: {}",
                        request.title, request.message
                    )),
                };
                (text, Shown::Permission(request.clone()))
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
            StreamMessage::ToolUse { name, input, .. } => {
                self.line(&format!("[tool] {} ...", tool_label(name, input)))
            }
            StreamMessage::ToolProgress { name, progress, .. } => match &progress.message {
                Some(note) => self.line(&format!("[tool] {name}: {note}")),
                None => String::new(),
            },
            StreamMessage::ToolResult {
                name,
                is_error,
                display,
                ..
            } => {
                let outcome = if *is_error == Some(true) {
                    "failed"
                } else {
                    "done"
                };
                // A subagent's summary carries its stats.
                let stats = match (name.as_str(), display) {
                    ("Task", Some(display)) => format!(": {}", display.summary),
                    _ => String::new(),
                };
                self.line(&format!("[tool] {name} {outcome}{stats}"))
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

/// How a tool call is named on a line: an MCP tool as `<tool> (MCP server <server>)`, a
/// subagent as `Task (subagent <type>)`.
pub fn tool_label(name: &str, input: &Value) -> String {
    if let Some((server, tool)) = name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
    {
        return format!("{tool} (MCP server {server})");
    }
    match input["subagent_type"].as_str() {
        Some(kind) if name == "Task" => format!("Task (subagent {kind})"),
        _ => name.to_owned(),
    }
}

/// The approval question, or for a question from the agent (`kind: "question"`) how to answer.
pub fn permission_prompt(request: &PermissionRequestedData) -> String {
    if is_plan(request) {
        return "Approve the plan? [y]es, or [n]o, or type feedback to reject it: ".to_owned();
    }
    if questions_of(request).is_some() {
        return "Answer with option numbers, one group per question separated by ';' \
                (e.g. 1; 1,2), or type your answer, or /skip: "
            .to_owned();
    }
    format!(
        "Allow {}? [y]es / [n]o / [a]lways for this session: ",
        request.tool_name
    )
}

/// Whether the prompt is a plan to approve (`kind: "plan"`).
pub fn is_plan(request: &PermissionRequestedData) -> bool {
    request.kind.as_deref() == Some("plan")
}

/// The questions of an `AskUserQuestion` prompt.
pub fn questions_of(request: &PermissionRequestedData) -> Option<&Vec<Value>> {
    if request.kind.as_deref() != Some("question") {
        return None;
    }
    request.input.get("questions")?.as_array()
}

/// Each question with its numbered options.
pub fn question_lines(questions: &[Value]) -> String {
    let mut text = String::new();
    for question in questions {
        let several = match question["multiSelect"].as_bool() {
            Some(true) => " (one or more)",
            _ => "",
        };
        text.push_str(&format!(
            "[question] {}: {}{several}\n",
            question["header"].as_str().unwrap_or_default(),
            question["question"].as_str().unwrap_or_default()
        ));
        for (index, option) in question["options"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let label = option["label"].as_str().unwrap_or_default();
            match option["description"].as_str().filter(|d| !d.is_empty()) {
                Some(description) => {
                    text.push_str(&format!("  {}) {label} - {description}\n", index + 1))
                }
                None => text.push_str(&format!("  {}) {label}\n", index + 1)),
            }
        }
    }
    text
}

/// The `reason` that answers `questions` with `line`: option numbers per question become
/// `{"answers": {header: label | [labels]}}`; anything else is sent as free text.
pub fn question_answer(questions: &[Value], line: &str) -> String {
    let groups: Vec<&str> = line.split(';').map(str::trim).collect();
    let mut answers = serde_json::Map::new();
    let numeric = groups.len() <= questions.len()
        && groups.iter().all(|group| {
            group
                .split(',')
                .all(|n| n.trim().parse::<usize>().is_ok_and(|n| n >= 1))
        });
    if numeric {
        for (question, group) in questions.iter().zip(&groups) {
            let options = question["options"].as_array().cloned().unwrap_or_default();
            let chosen: Option<Vec<Value>> = group
                .split(',')
                .map(|n| {
                    let index = n.trim().parse::<usize>().ok()? - 1;
                    options.get(index)?.get("label").cloned()
                })
                .collect();
            let Some(chosen) = chosen else {
                return line.to_owned();
            };
            let header = question["header"].as_str().unwrap_or_default().to_owned();
            let value = match question["multiSelect"].as_bool() {
                Some(true) => Value::Array(chosen),
                _ => chosen.into_iter().next().unwrap_or_default(),
            };
            answers.insert(header, value);
        }
        return serde_json::json!({ "answers": answers }).to_string();
    }
    line.to_owned()
}
