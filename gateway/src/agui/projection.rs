//! The event log as AG-UI 1.0 events (docs/protocols.md §1.3): a function of the log alone, so
//! a stream resumed after any sequence continues with exactly the frames the first one would
//! have sent next. Every frame made from one stored event carries no `id:` but the last, which
//! carries the event's sequence: a client's `Last-Event-ID` then says that every frame of that
//! event arrived.
//!
//! A run is one stretch of one request: from its first event, or from the first event after an
//! approval interrupted it, to its `result`, the next approval (an interrupt), or the session's
//! close. Everything a run opens (steps, text and reasoning messages) is closed before its
//! terminal event, as AG-UI's verifier requires; a closer of something the run never opened
//! (a turn that began in the previous run) is left out.

use agent_runtime::protocol::{EventEnvelope, EventType};
use agent_runtime::timefmt::parse_iso_ms;
use serde_json::{Map, Value, json};

pub use crate::projected::Frame;
use crate::projected::{Projection, frames_of};

/// The `name` prefix of the `CUSTOM` events that carry our stream messages AG-UI has no event
/// for (tool progress, patches, applied inputs): `blade.<type>`, the message as the value.
pub const CUSTOM_PREFIX: &str = "blade.";

/// Where a projector's one run begins, for a stream that shows a single run (the run route).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunStart {
    /// A request this run's input started: from the request's first event.
    Request(String),
    /// The running request took this run's input: from the `input_applied` of that input.
    Input {
        request_id: String,
        input_id: String,
    },
    /// This run answered an interrupt: from the event after the `permission.requested` at
    /// `sequence`.
    After(u64),
    /// The request that was to take this run's input ended first: from the next request's first
    /// event (the one the input starts).
    Next(String),
}

#[derive(Debug)]
enum Mode {
    /// Every request of the session, one run after another (the re-attach route).
    Thread,
    /// One run, opened before the first event; it starts showing the log at `start`.
    Single { start: RunStart, started: bool },
}

/// What one open run holds open.
#[derive(Debug, Default)]
struct OpenRun {
    run_id: String,
    request_id: Option<String>,
    steps: Vec<String>,
    text: Option<String>,
    reasoning: Option<String>,
    /// The last call of each tool name: the call an approval of that tool is for.
    last_call: Vec<(String, String)>,
    usage: Usage,
    error: Option<(String, Option<String>)>,
}

/// Token counts summed over a run's model calls; absent counts stay absent (AG-UI: never a zero
/// for a count there is no data for).
#[derive(Debug, Default)]
struct Usage {
    seen: bool,
    input: u64,
    output: u64,
    total: u64,
    cached: Option<u64>,
    reasoning: Option<u64>,
}

/// Turns stored events into AG-UI events for one thread.
#[derive(Debug)]
pub struct Projector {
    thread_id: String,
    mode: Mode,
    run: Option<OpenRun>,
    /// A single run's terminal event was made: nothing more belongs to it.
    finished: bool,
    /// The request whose run an approval ended, and where: the rest of it is a run of its own,
    /// named after both.
    interrupted: Option<(String, u64)>,
}

impl Projector {
    /// A projector of every request of the thread, each its own run.
    pub fn thread(thread_id: &str) -> Projector {
        Projector {
            thread_id: thread_id.to_owned(),
            mode: Mode::Thread,
            run: None,
            finished: false,
            interrupted: None,
        }
    }

    /// A projector of one run: `RUN_STARTED` now (the caller sends it, or not when the client
    /// has it already), then the log from `start` to the run's end.
    pub fn single(
        thread_id: &str,
        run_id: &str,
        start: RunStart,
        now_ms: u64,
    ) -> (Projector, Value) {
        let request_id = match &start {
            RunStart::Request(request)
            | RunStart::Input {
                request_id: request,
                ..
            } => Some(request.clone()),
            RunStart::After(_) | RunStart::Next(_) => None,
        };
        let projector = Projector {
            thread_id: thread_id.to_owned(),
            mode: Mode::Single {
                start,
                started: false,
            },
            run: Some(OpenRun {
                run_id: run_id.to_owned(),
                request_id,
                ..OpenRun::default()
            }),
            finished: false,
            interrupted: None,
        };
        let started = projector.run_started(run_id, now_ms);
        (projector, started)
    }

    /// This projector with its run over already: it shows nothing more.
    pub fn finished_now(mut self) -> Projector {
        self.run = None;
        self.finished = true;
        self
    }

    /// The frames that open again, for a client that joins now (after a snapshot), what the
    /// open run holds open: the run itself, its steps, its text and reasoning messages.
    pub fn reopen(&self, now_ms: u64) -> Vec<Value> {
        let Some(run) = &self.run else {
            return Vec::new();
        };
        let mut out = vec![self.run_started(&run.run_id, now_ms)];
        for step in &run.steps {
            out.push(with_time(
                json!({"type": "STEP_STARTED", "stepName": step}),
                now_ms,
            ));
        }
        if let Some(id) = &run.reasoning {
            out.push(with_time(
                json!({"type": "REASONING_START", "messageId": id}),
                now_ms,
            ));
            out.push(with_time(
                json!({"type": "REASONING_MESSAGE_START", "messageId": id, "role": "reasoning"}),
                now_ms,
            ));
        }
        if let Some(id) = &run.text {
            out.push(with_time(
                json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}),
                now_ms,
            ));
        }
        out
    }

    fn project(&mut self, event: &EventEnvelope, at: u64) -> Vec<Value> {
        if self.finished {
            return Vec::new();
        }
        // A close ends the run wherever its window stands.
        if !self.in_window(event) && event.event_type != EventType::SessionClosed {
            return Vec::new();
        }
        let mut out = Vec::new();
        match event.event_type {
            EventType::PermissionRequested => {
                if self.run.is_some() {
                    self.interrupt(event, at, &mut out);
                }
            }
            EventType::SessionClosed => {
                if self.run.is_some() {
                    self.close_all(at, &mut out);
                    out.push(with_time(
                        json!({
                            "type": "RUN_ERROR",
                            "message": "The session was closed",
                            "code": "SESSION_CLOSED",
                        }),
                        at,
                    ));
                    self.end_run();
                }
                // Nothing follows a session's close.
                self.finished = true;
            }
            EventType::SessionStream => {
                if self.run.is_none() {
                    let request = event.request_id.clone();
                    let run_id = match (&request, &self.interrupted) {
                        (Some(request), Some((stopped, at))) if request == stopped => {
                            format!("{request}:{at}")
                        }
                        (Some(request), _) => request.clone(),
                        (None, _) => format!("run-{}", event.sequence),
                    };
                    out.push(self.run_started(&run_id, at));
                    self.run = Some(OpenRun {
                        run_id,
                        request_id: request,
                        ..OpenRun::default()
                    });
                }
                self.stream_message(event, at, &mut out);
            }
        }
        out
    }

    /// Whether a single run shows this event: from its start on (always, for a thread).
    fn in_window(&mut self, event: &EventEnvelope) -> bool {
        let Mode::Single { start, started } = &mut self.mode else {
            return true;
        };
        if *started {
            return true;
        }
        let begins = match start {
            RunStart::Request(request) => event.request_id.as_deref() == Some(request.as_str()),
            RunStart::Input {
                request_id,
                input_id,
            } => {
                let of_request = event.event_type == EventType::SessionStream
                    && event.request_id.as_deref() == Some(request_id.as_str());
                let kind = event.data.get("type").and_then(Value::as_str);
                if of_request && kind == Some("result") {
                    // The request ended before it took the input (an abort): the input starts
                    // the next request, and the run shows that one.
                    *start = RunStart::Next(request_id.clone());
                    return false;
                }
                of_request
                    && kind == Some("input_applied")
                    && event.data.get("inputId").and_then(Value::as_str) == Some(input_id.as_str())
            }
            RunStart::Next(ended) => {
                event.event_type == EventType::SessionStream
                    && event
                        .request_id
                        .as_deref()
                        .is_some_and(|request| request != ended.as_str())
            }
            RunStart::After(sequence) => event.sequence > *sequence,
        };
        *started = begins;
        if begins && let Some(run) = self.run.as_mut() {
            run.request_id = event.request_id.clone();
        }
        begins
    }

    fn stream_message(&mut self, event: &EventEnvelope, at: u64, out: &mut Vec<Value>) {
        let data = &event.data;
        let kind = data.get("type").and_then(Value::as_str).unwrap_or_default();
        let text = |name: &str| data.get(name).and_then(Value::as_str).unwrap_or_default();
        let Some(run) = self.run.as_mut() else {
            return;
        };
        if run.request_id.is_none() {
            run.request_id = event.request_id.clone();
        }
        match kind {
            "turn_start" => {
                close_messages(run, at, out);
                let step = turn_name(data);
                if !run.steps.contains(&step) {
                    out.push(with_time(
                        json!({"type": "STEP_STARTED", "stepName": step}),
                        at,
                    ));
                    run.steps.push(step);
                }
            }
            "turn_end" => {
                close_messages(run, at, out);
                let step = turn_name(data);
                if let Some(index) = run.steps.iter().position(|open| *open == step) {
                    run.steps.remove(index);
                    out.push(with_time(
                        json!({"type": "STEP_FINISHED", "stepName": step}),
                        at,
                    ));
                }
            }
            "content" => {
                close_reasoning(run, at, out);
                let id = match &run.text {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("msg-{}", event.sequence);
                        out.push(with_time(
                            json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}),
                            at,
                        ));
                        run.text = Some(id.clone());
                        id
                    }
                };
                out.push(with_time(
                    json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text("delta")}),
                    at,
                ));
            }
            "thinking" => {
                close_text(run, at, out);
                let id = match &run.reasoning {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("reasoning-{}", event.sequence);
                        out.push(with_time(
                            json!({"type": "REASONING_START", "messageId": id}),
                            at,
                        ));
                        out.push(with_time(
                            json!({"type": "REASONING_MESSAGE_START", "messageId": id, "role": "reasoning"}),
                            at,
                        ));
                        run.reasoning = Some(id.clone());
                        id
                    }
                };
                out.push(with_time(
                    json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": id, "delta": text("delta")}),
                    at,
                ));
            }
            "tool_use" => {
                let parent = run.text.clone();
                close_messages(run, at, out);
                let call = text("id").to_owned();
                let name = text("name").to_owned();
                let mut start =
                    json!({"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": name});
                if let Some(parent) = parent {
                    start["parentMessageId"] = Value::String(parent);
                }
                out.push(with_time(start, at));
                let arguments = data
                    .get("input")
                    .map(Value::to_string)
                    .unwrap_or_else(|| "{}".to_owned());
                out.push(with_time(
                    json!({"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": arguments}),
                    at,
                ));
                out.push(with_time(
                    json!({"type": "TOOL_CALL_END", "toolCallId": call}),
                    at,
                ));
                run.last_call.retain(|(tool, _)| *tool != name);
                run.last_call.push((name, call));
            }
            "tool_result" => {
                close_messages(run, at, out);
                let content = match data.get("output") {
                    Some(Value::String(output)) => output.clone(),
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                out.push(with_time(
                    json!({
                        "type": "TOOL_CALL_RESULT",
                        "messageId": format!("tool-result-{}", event.sequence),
                        "toolCallId": text("id"),
                        "content": content,
                        "role": "tool",
                    }),
                    at,
                ));
            }
            "usage" => {
                if let Some(usage) = data.get("usage") {
                    run.usage.add(usage);
                }
            }
            "error" => {
                let code = data.get("code").and_then(Value::as_str).map(str::to_owned);
                run.error = Some((text("message").to_owned(), code));
            }
            "result" => {
                let failed = text("subtype") == "error";
                self.finish(failed, data, at, out);
            }
            other => {
                let name = format!("{CUSTOM_PREFIX}{other}");
                out.push(with_time(
                    json!({"type": "CUSTOM", "name": name, "value": Value::Object(agent_runtime::protocol::JsonObject::clone(data))}),
                    at,
                ));
            }
        }
    }

    /// The request's `result`: `RUN_FINISHED` (success; `cancelled` for an abort) or `RUN_ERROR`.
    fn finish(&mut self, failed: bool, data: &Map<String, Value>, at: u64, out: &mut Vec<Value>) {
        self.close_all(at, out);
        let Some(run) = self.run.as_mut() else {
            return;
        };
        let usage = run.usage.to_json();
        let error = run.error.take();
        let code = error.as_ref().and_then(|(_, code)| code.clone());
        let terminal = if failed && code.as_deref() != Some("REQUEST_ABORTED") {
            let message = error
                .map(|(message, _)| message)
                .or_else(|| data.get("error").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| "The request failed".to_owned());
            let mut event = json!({"type": "RUN_ERROR", "message": message});
            if let Some(code) = code {
                event["code"] = Value::String(code);
            }
            if let Some(usage) = usage {
                event["usage"] = usage;
            }
            event
        } else {
            let outcome = if failed { "cancelled" } else { "success" };
            let mut event = self.run_finished(json!({"type": outcome}));
            if let Some(usage) = usage {
                event["usage"] = usage;
            }
            event
        };
        out.push(with_time(terminal, at));
        self.end_run();
    }

    /// An approval the run waits for: `RUN_FINISHED` with an interrupt outcome.
    fn interrupt(&mut self, event: &EventEnvelope, at: u64, out: &mut Vec<Value>) {
        self.close_all(at, out);
        let data = &event.data;
        let text = |name: &str| data.get(name).and_then(Value::as_str).unwrap_or_default();
        let permission = text("permissionRequestId");
        let tool = text("toolName");
        let kind = data.get("kind").and_then(Value::as_str);
        let reason = match kind {
            Some("question") => "input_required",
            Some("plan") => "confirmation",
            _ => "tool_call",
        };
        let mut interrupt = json!({
            "id": interrupt_id(event.sequence, permission),
            "reason": reason,
            "message": text("message"),
            "responseSchema": response_schema(),
            "metadata": {
                "permissionRequestId": permission,
                "toolName": tool,
                "title": text("title"),
                "affectedPaths": data.get("affectedPaths").cloned().unwrap_or_else(|| json!([])),
                "risks": data.get("risks").cloned().unwrap_or_else(|| json!([])),
            },
        });
        if let Some(kind) = kind {
            interrupt["metadata"]["kind"] = Value::String(kind.to_owned());
        }
        if let Some(run) = &self.run {
            let call = run.last_call.iter().find(|(name, _)| name == tool);
            if let Some((_, call)) = call {
                interrupt["toolCallId"] = Value::String(call.clone());
            }
        }
        if let Some(request) = self.run.as_ref().and_then(|run| run.request_id.clone()) {
            self.interrupted = Some((request, event.sequence));
        }
        let mut finished =
            self.run_finished(json!({"type": "interrupt", "interrupts": [interrupt]}));
        if let Some(usage) = self.run.as_ref().and_then(|run| run.usage.to_json()) {
            finished["usage"] = usage;
        }
        out.push(with_time(finished, at));
        self.end_run();
    }

    fn end_run(&mut self) {
        self.run = None;
        if matches!(self.mode, Mode::Single { .. }) {
            self.finished = true;
        }
    }

    fn close_all(&mut self, at: u64, out: &mut Vec<Value>) {
        if let Some(run) = self.run.as_mut() {
            close_messages(run, at, out);
            while let Some(step) = run.steps.pop() {
                out.push(with_time(
                    json!({"type": "STEP_FINISHED", "stepName": step}),
                    at,
                ));
            }
        }
    }

    fn run_started(&self, run_id: &str, at: u64) -> Value {
        with_time(
            json!({
                "type": "RUN_STARTED",
                "threadId": self.thread_id,
                "runId": run_id,
                "protocolVersion": super::PROTOCOL_VERSION,
            }),
            at,
        )
    }

    fn run_finished(&self, outcome: Value) -> Value {
        let run_id = self
            .run
            .as_ref()
            .map(|run| run.run_id.clone())
            .unwrap_or_default();
        json!({
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": run_id,
            "outcome": outcome,
        })
    }
}

impl Projection for Projector {
    fn feed(&mut self, event: &EventEnvelope) -> Vec<Frame> {
        let at = parse_iso_ms(&event.occurred_at)
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or_default();
        let events = self.project(event, at);
        frames_of(events, event.sequence)
    }

    fn is_finished(&self) -> bool {
        self.finished
    }
}

/// The id of the interrupt an approval becomes: the sequence of its `permission.requested`, then
/// its `permissionRequestId`, so that the resuming run knows where it starts showing the log.
pub fn interrupt_id(sequence: u64, permission_request_id: &str) -> String {
    format!("{sequence}:{permission_request_id}")
}

/// The sequence and `permissionRequestId` an interrupt id names; `None` if it names none.
pub fn parse_interrupt_id(id: &str) -> Option<(u64, &str)> {
    let (sequence, permission) = id.split_once(':')?;
    let sequence = crate::sse::parse_cursor(sequence).filter(|&sequence| sequence > 0)?;
    (!permission.is_empty()).then_some((sequence, permission))
}

/// What a resume entry's `payload` may carry: our `permission.resolve` fields.
fn response_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "reason": {"type": "string", "maxLength": 4096},
            "scope": {"enum": ["once", "session"]},
        },
        "required": ["approved"],
    })
}

fn turn_name(data: &Map<String, Value>) -> String {
    let turn = data.get("turn").and_then(Value::as_u64).unwrap_or_default();
    format!("turn {turn}")
}

fn close_messages(run: &mut OpenRun, at: u64, out: &mut Vec<Value>) {
    close_reasoning(run, at, out);
    close_text(run, at, out);
}

fn close_text(run: &mut OpenRun, at: u64, out: &mut Vec<Value>) {
    if let Some(id) = run.text.take() {
        out.push(with_time(
            json!({"type": "TEXT_MESSAGE_END", "messageId": id}),
            at,
        ));
    }
}

fn close_reasoning(run: &mut OpenRun, at: u64, out: &mut Vec<Value>) {
    if let Some(id) = run.reasoning.take() {
        out.push(with_time(
            json!({"type": "REASONING_MESSAGE_END", "messageId": id}),
            at,
        ));
        out.push(with_time(
            json!({"type": "REASONING_END", "messageId": id}),
            at,
        ));
    }
}

fn with_time(mut event: Value, at: u64) -> Value {
    if at > 0 {
        event["timestamp"] = Value::from(at);
    }
    event
}

impl Usage {
    fn add(&mut self, usage: &Value) {
        let count = |name: &str| usage.get(name).and_then(Value::as_u64);
        self.seen = true;
        self.input += count("inputTokens").unwrap_or_default();
        self.output += count("outputTokens").unwrap_or_default();
        self.total += count("totalTokens").unwrap_or_default();
        if let Some(cached) = count("cacheReadInputTokens") {
            *self.cached.get_or_insert(0) += cached;
        }
        if let Some(reasoning) = count("reasoningTokens") {
            *self.reasoning.get_or_insert(0) += reasoning;
        }
    }

    fn to_json(&self) -> Option<Value> {
        if !self.seen {
            return None;
        }
        let mut usage = json!({
            "inputTokens": self.input,
            "outputTokens": self.output,
            "totalTokens": self.total,
        });
        if let Some(cached) = self.cached {
            usage["cachedInputTokens"] = Value::from(cached);
        }
        if let Some(reasoning) = self.reasoning {
            usage["reasoningTokens"] = Value::from(reasoning);
        }
        Some(json!([usage]))
    }
}
