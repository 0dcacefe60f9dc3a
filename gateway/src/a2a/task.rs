//! An A2A task read from the event log (docs/protocols.md §2.3): the task is one request of the
//! session its context names, and its state, its answer (the `answer` artifact) and its status
//! message follow from the request's events alone, so a task is the same whichever gateway reads
//! it and however often. A `permission.requested` while the request runs is the task's
//! `input-required` state.

use agent_runtime::protocol::{EventEnvelope, EventType};
use serde_json::{Value, json};

/// The id of the artifact that carries the agent's answer.
pub const ANSWER_ARTIFACT: &str = "answer";

/// A task's state, by its A2A 1.0 enum name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled
        )
    }

    /// A stream of the task ends here: a terminal state, or one that waits for the client.
    pub fn ends_stream(self) -> bool {
        self.is_terminal() || self == TaskState::InputRequired
    }
}

/// The id of a task: its context (the session) and its request, `~` between them (neither
/// identifier can hold one).
pub fn task_id(context_id: &str, request_id: &str) -> String {
    format!("{context_id}~{request_id}")
}

/// The context and request a task id names.
pub fn parse_task_id(task_id: &str) -> Option<(&str, &str)> {
    let (context, request) = task_id.split_once('~')?;
    let valid = agent_runtime::ids::is_valid_identifier(context)
        && agent_runtime::ids::is_valid_identifier(request);
    valid.then_some((context, request))
}

/// One task as the log tells it.
#[derive(Debug)]
pub struct TaskView {
    pub context_id: String,
    pub request_id: String,
    pub state: TaskState,
    /// When the state was last set (the event's `occurredAt`).
    pub timestamp: Option<String>,
    /// The status message: what the approval asks, or why the task failed.
    pub message: Option<Value>,
    /// The agent's answer so far.
    pub answer: String,
    /// The approval the task waits for: its `permission.requested` sequence and id.
    pub pending: Option<(u64, String)>,
    /// The task's latest approval, answered or not (a retried answer names it again).
    pub last_approval: Option<(u64, String)>,
    /// Whether the request's events have started (a permission without a request id is the
    /// task's only while its request runs).
    running: bool,
    /// Whether an answer chunk was streamed yet (the first has `append: false`).
    chunked: bool,
    /// The request's `error` message and code, for its failure.
    error: Option<(String, Option<String>)>,
}

impl TaskView {
    pub fn new(context_id: &str, request_id: &str) -> TaskView {
        TaskView {
            context_id: context_id.to_owned(),
            request_id: request_id.to_owned(),
            state: TaskState::Submitted,
            timestamp: None,
            message: None,
            answer: String::new(),
            pending: None,
            last_approval: None,
            running: false,
            chunked: false,
            error: None,
        }
    }

    pub fn id(&self) -> String {
        task_id(&self.context_id, &self.request_id)
    }

    /// Whether the log has shown anything of the task.
    pub fn seen(&self) -> bool {
        self.running || self.state != TaskState::Submitted
    }

    /// The client answered the approval: the task works again.
    pub fn answered(&mut self) {
        if self.state == TaskState::InputRequired {
            self.state = TaskState::Working;
            self.message = None;
            self.pending = None;
        }
    }

    /// Applies one event; returns the `StreamResponse` members it makes (status and artifact
    /// updates), in order.
    pub fn apply(&mut self, event: &EventEnvelope) -> Vec<Value> {
        if self.state.is_terminal() {
            return Vec::new();
        }
        let mine = event.request_id.as_deref() == Some(self.request_id.as_str());
        let mut out = Vec::new();
        match event.event_type {
            EventType::SessionStream if mine => {
                self.running = true;
                self.stream_message(event, &mut out);
            }
            EventType::PermissionRequested if self.running => {
                let data = &event.data;
                let text = |name: &str| data.get(name).and_then(Value::as_str).unwrap_or_default();
                let permission = text("permissionRequestId").to_owned();
                let details = json!({
                    "permissionRequestId": permission,
                    "toolName": text("toolName"),
                    "title": text("title"),
                    "input": data.get("input").cloned().unwrap_or_else(|| json!({})),
                    "kind": data.get("kind").cloned().unwrap_or(Value::Null),
                });
                self.pending = Some((event.sequence, permission.clone()));
                self.last_approval = Some((event.sequence, permission));
                let message = agent_message(
                    &format!("{}-{}", self.request_id, event.sequence),
                    vec![json!({"text": text("message")}), json!({"data": details})],
                );
                self.set(TaskState::InputRequired, Some(message), event, &mut out);
            }
            EventType::SessionClosed if self.running => {
                let message = self.text_message(event, "The session was closed");
                self.set(TaskState::Canceled, Some(message), event, &mut out);
            }
            _ => {}
        }
        out
    }

    fn stream_message(&mut self, event: &EventEnvelope, out: &mut Vec<Value>) {
        let data = &event.data;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
        if matches!(self.state, TaskState::Submitted | TaskState::InputRequired) {
            self.pending = None;
            self.set(TaskState::Working, None, event, out);
        }
        match kind {
            "content" => {
                let delta = data
                    .get("delta")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.answer.push_str(delta);
                out.push(self.chunk(delta, false));
            }
            "error" => {
                let text = |name: &str| data.get(name).and_then(Value::as_str).map(str::to_owned);
                self.error = Some((text("message").unwrap_or_default(), text("code")));
            }
            "result" => {
                let failed = data.get("subtype").and_then(Value::as_str) == Some("error");
                if self.chunked {
                    out.push(self.chunk("", true));
                }
                let (state, message) = match (failed, self.error.take()) {
                    (false, _) => (TaskState::Completed, None),
                    (true, error) => {
                        let (why, code) =
                            error.unwrap_or_else(|| ("The request failed".to_owned(), None));
                        let message = self.text_message(event, &why);
                        let canceled =
                            matches!(code.as_deref(), Some("REQUEST_ABORTED" | "SESSION_CLOSED"));
                        let state = if canceled {
                            TaskState::Canceled
                        } else {
                            TaskState::Failed
                        };
                        (state, Some(message))
                    }
                };
                self.set(state, message, event, out);
            }
            _ => {}
        }
    }

    fn text_message(&self, event: &EventEnvelope, text: &str) -> Value {
        agent_message(
            &format!("{}-{}", self.request_id, event.sequence),
            vec![json!({"text": text})],
        )
    }

    fn set(
        &mut self,
        state: TaskState,
        message: Option<Value>,
        event: &EventEnvelope,
        out: &mut Vec<Value>,
    ) {
        self.state = state;
        self.message = message;
        self.timestamp = Some(event.occurred_at.clone());
        out.push(json!({"statusUpdate": {
            "taskId": self.id(),
            "contextId": self.context_id,
            "status": self.status(),
        }}));
    }

    fn chunk(&mut self, text: &str, last: bool) -> Value {
        let append = self.chunked;
        self.chunked = true;
        json!({"artifactUpdate": {
            "taskId": self.id(),
            "contextId": self.context_id,
            "artifact": {"artifactId": ANSWER_ARTIFACT, "parts": [{"text": text}]},
            "append": append,
            "lastChunk": last,
        }})
    }

    pub fn status(&self) -> Value {
        let mut status = json!({"state": self.state.as_str()});
        if let Some(message) = &self.message {
            status["message"] = message.clone();
        }
        if let Some(timestamp) = &self.timestamp {
            status["timestamp"] = Value::String(timestamp.clone());
        }
        status
    }

    /// The `Task` object: status, the answer artifact, and `history` when given.
    pub fn task(&self, history: Option<Vec<Value>>) -> Value {
        let mut task = json!({
            "id": self.id(),
            "contextId": self.context_id,
            "status": self.status(),
        });
        if !self.answer.is_empty() {
            task["artifacts"] =
                json!([{"artifactId": ANSWER_ARTIFACT, "parts": [{"text": self.answer}]}]);
        }
        if let Some(history) = history.filter(|history| !history.is_empty()) {
            task["history"] = Value::Array(history);
        }
        task
    }
}

/// A message of the agent.
pub fn agent_message(message_id: &str, parts: Vec<Value>) -> Value {
    json!({"messageId": message_id, "role": "ROLE_AGENT", "parts": parts})
}
