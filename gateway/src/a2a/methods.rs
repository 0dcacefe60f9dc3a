//! The A2A methods (docs/protocols.md §2.3): `SendMessage` and `SendStreamingMessage` (context =
//! session, task = request, `messageId` = the idempotency key; a message to a task waiting for
//! input answers its approval), `GetTask`, `CancelTask` (= `request.abort`) and
//! `SubscribeToTask` (the task first, then what happens to it).

use std::sync::Arc;
use std::time::Duration;

use agent_runtime::protocol::command::{
    CreateSessionData, PermissionScope, ResolvePermissionData, SessionRef, SubmitInputData,
};
use agent_runtime::protocol::content::{Priority, UserContent};
use agent_runtime::protocol::result::{SessionResult, SubmitOutcome, SubmitResult};
use agent_runtime::protocol::{CommandKind, ErrorCode, EventEnvelope, ProtocolError, Scope};
use agent_runtime_store::follow::{Followed, follow};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::SEQUENCE_EXTENSION;
use super::content::{approval, history, user_content};
use super::rpc::{self, RpcError};
use super::task::{TaskState, TaskView, agent_message, parse_task_id};
use crate::answer::Answer;
use crate::http::events::{end_with_credential, stream_slot};
use crate::internal::{Caller, run_command};
use crate::projected::{Cursor, Frame, Plan, Projection, frames_of, respond};
use crate::sse::follow_options;
use crate::state::AppState;
use crate::store_errors::to_protocol;
use crate::stream_slots::StreamSlot;

/// The longest `messageId`: the command ids made from it must stay within the identifier rule.
const MAX_MESSAGE_ID_CHARS: usize = 200;

/// What a method answers: a JSON-RPC result, or a stream of them.
pub enum Reply {
    Result(Value),
    Stream(Response),
}

/// One authenticated call.
pub struct Call<'a> {
    pub state: &'a Arc<AppState>,
    pub caller: Caller,
    pub headers: &'a HeaderMap,
    pub id: Value,
    /// The client activated the event-sequence extension: updates carry their sequence and a
    /// stream continues after `Last-Event-ID`.
    pub sequences: bool,
}

impl Call<'_> {
    fn tenant(&self) -> &str {
        &self.caller.principal.tenant_id
    }

    async fn command(
        &self,
        command_id: String,
        kind: CommandKind,
        chosen: Option<String>,
    ) -> Result<(Value, bool), RpcError> {
        run_command(self.state, &self.caller, command_id, kind, chosen)
            .await
            .map(|ran| (ran.data, ran.replayed))
            .map_err(|answer| command_failure(*answer))
    }

    async fn head(&self, context: &str) -> Result<u64, RpcError> {
        let head = self
            .state
            .store
            .latest_event_sequence(self.tenant(), context)
            .await
            .map_err(|error| RpcError::from_protocol(&to_protocol(&error)))?;
        Ok(head.unwrap_or(0))
    }

    /// The task as the log tells it up to `up_to`; not found when the session is not this
    /// tenant's or the log holds nothing of the request.
    async fn view(&self, task_id: &str, up_to: u64) -> Result<TaskView, RpcError> {
        let (context, request) = parse_task_id(task_id).ok_or_else(RpcError::task_not_found)?;
        let store = &self.state.store;
        let found = store.get_session(self.tenant(), context).await;
        if !matches!(found, Ok(Some(_))) {
            return Err(RpcError::task_not_found());
        }
        let mut view = TaskView::new(context, request);
        let range = store
            .event_stream_range(self.tenant(), context)
            .await
            .map_err(|error| RpcError::from_protocol(&to_protocol(&error)))?;
        let mut after = range.map_or(0, |range| range.first_sequence.saturating_sub(1));
        while after < up_to {
            let page = store
                .read_events(
                    self.tenant(),
                    context,
                    after,
                    agent_runtime_store::MAX_EVENT_PAGE,
                )
                .await
                .map_err(|error| RpcError::from_protocol(&to_protocol(&error)))?;
            let Some(last) = page.events.last() else {
                break;
            };
            after = last.sequence;
            for event in page.events.iter().filter(|event| event.sequence <= up_to) {
                view.apply(event);
            }
        }
        if !view.seen() {
            return Err(RpcError::task_not_found());
        }
        Ok(view)
    }

    async fn history(&self, view: &TaskView, limit: Option<usize>) -> Vec<Value> {
        match self
            .state
            .store
            .load_transcript(self.tenant(), &view.context_id)
            .await
        {
            Ok(Some(transcript)) => history(&transcript.entries, &view.request_id, limit),
            _ => Vec::new(),
        }
    }

    /// Follows the log after `after` until `done` holds for the task. The wait holds one of
    /// the tenant's stream slots (it is a stream the client does not see) and ends with the
    /// caller's credential, as a stream does; a closed session answers the task as it stands.
    async fn wait(
        &self,
        view: &mut TaskView,
        after: u64,
        done: fn(&TaskView) -> bool,
    ) -> Result<(), RpcError> {
        let state = self.state;
        let _slot = self.slot()?;
        state.tails.0.follow(self.tenant(), &view.context_id);
        let stop = state.lifecycle.streams_ending().child_token();
        let _stop_on_return = stop.clone().drop_guard();
        if let Some(expiry_ms) = state.auth.credential_expiry_ms(self.headers) {
            let remaining = Duration::from_millis(expiry_ms.saturating_sub(state.clock.now_ms()));
            end_with_credential(
                &stop,
                remaining,
                Arc::clone(&state.auth),
                self.headers.clone(),
            );
        }
        let options = follow_options(
            state.config.heartbeat_interval,
            stop,
            state.lifecycle.streams_ending().clone(),
        );
        let mut events = Box::pin(follow(
            state.tails.clone(),
            state.tails.clone(),
            self.tenant().to_owned(),
            view.context_id.clone(),
            after,
            options,
        ));
        while !done(view) {
            match events.next().await {
                Some(Ok(Followed::Event(event))) => {
                    view.apply(&event);
                }
                Some(Ok(Followed::Idle)) => {}
                Some(Err(error)) => return Err(RpcError::from_protocol(&to_protocol(&error))),
                // The follower ends after `session.closed`, or when the server or the
                // credential stops it.
                None if state.lifecycle.is_draining() => {
                    return Err(RpcError::from_protocol(&ProtocolError::shutting_down()));
                }
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// One of the tenant's stream slots, or the refusal of a tenant at its cap.
    fn slot(&self) -> Result<StreamSlot, RpcError> {
        stream_slot(self.state, self.tenant()).map_err(|error| RpcError::from_protocol(&error))
    }

    /// A stream: the task as it is at `at` first, then its updates after `at` (after the
    /// client's `Last-Event-ID` instead, with the extension) until it ends or waits for input.
    async fn stream(
        &self,
        slot: StreamSlot,
        mut view: TaskView,
        at: u64,
    ) -> Result<Reply, RpcError> {
        let cursor = if self.sequences {
            last_event_id(self.headers)?
        } else {
            None
        };
        let resume = cursor.unwrap_or(Cursor::at(at));
        let scan_from = at.min(resume.after);
        if resume.after < at {
            // The client has less than the snapshot shows: the snapshot is taken at its cursor.
            view = self.view(&view.id(), resume.after).await?;
        }
        let mut task = view.task(None);
        if self.sequences {
            task["metadata"] = json!({SEQUENCE_EXTENSION: {"cursor": resume.to_string()}});
        }
        let first = vec![Frame {
            event: rpc::result(&self.id, json!({"task": task})),
            id: Some(resume),
        }];
        let stream = TaskStream {
            id: self.id.clone(),
            view,
            sequences: self.sequences,
            current_at: at,
            fed: resume.after,
        };
        let plan = Plan {
            tenant: self.tenant().to_owned(),
            session: stream.view.context_id.clone(),
            scan_from,
            resume,
            first,
            projector: stream,
        };
        Ok(Reply::Stream(respond(self.state, self.headers, slot, plan)))
    }

    /// `SendMessage` and `SendStreamingMessage`.
    pub async fn send(&self, params: &Value, streaming: bool) -> Result<Reply, RpcError> {
        // The answer shows the task's output: reading it needs what reading a session needs.
        self.require_read()?;
        let message = SendParams::read(params)?;
        // Taken before anything runs: a tenant at its stream cap is refused with nothing done.
        let slot = if streaming { Some(self.slot()?) } else { None };
        let (mut view, at) = match &message.task_id {
            Some(task_id) => self.answer(task_id, &message).await?,
            None => {
                let context = match &message.context_id {
                    Some(context) => self.ensure_context(context, &message.message_id).await?,
                    None => self.new_context(&message.message_id).await?,
                };
                match self.submit(&context, &message).await? {
                    Submitted::Task(view, at) => (*view, at),
                    Submitted::Queued(input_id) => {
                        let text = "The message waits behind the task that is ending; it starts as a task of its own when that has ended";
                        let mut reply = agent_message(&input_id, vec![json!({"text": text})]);
                        reply["contextId"] = Value::String(context);
                        return Ok(Reply::Result(json!({"message": reply})));
                    }
                }
            }
        };
        if let Some(slot) = slot {
            return self.stream(slot, view, at).await;
        }
        if !message.return_immediately {
            self.wait(&mut view, at, |view| view.state.ends_stream())
                .await?;
        }
        let history = self.history(&view, message.history_length).await;
        Ok(Reply::Result(json!({"task": view.task(Some(history))})))
    }

    /// The session a message's `contextId` names, created with that id on first use.
    async fn ensure_context(&self, context: &str, message_id: &str) -> Result<String, RpcError> {
        if let Ok(Some(_)) = self.state.store.get_session(self.tenant(), context).await {
            return Ok(context.to_owned());
        }
        let kind = CommandKind::CreateSession(CreateSessionData::default());
        self.command(
            format!("a2a.context.{message_id}"),
            kind,
            Some(context.to_owned()),
        )
        .await?;
        Ok(context.to_owned())
    }

    /// A new session for a message without a context.
    async fn new_context(&self, message_id: &str) -> Result<String, RpcError> {
        let kind = CommandKind::CreateSession(CreateSessionData::default());
        let (data, _) = self
            .command(format!("a2a.context.{message_id}"), kind, None)
            .await?;
        let created: SessionResult = serde_json::from_value(data).map_err(|_| internal())?;
        Ok(created.session.session_id)
    }

    async fn submit(&self, context: &str, message: &SendParams) -> Result<Submitted, RpcError> {
        let head = self.head(context).await?;
        let data = SubmitInputData {
            session_id: context.to_owned(),
            input: message.content.clone(),
            priority: Some(Priority::Next),
            expected_request_id: None,
            max_turns: None,
        };
        let command_id = format!("a2a.message.{}", message.message_id);
        let (data, replayed) = self
            .command(command_id, CommandKind::SubmitInput(data), None)
            .await?;
        let submitted: SubmitResult = serde_json::from_value(data).map_err(|_| internal())?;
        let request = match submitted.outcome {
            SubmitOutcome::Started { request_id } | SubmitOutcome::Steered { request_id, .. } => {
                request_id
            }
            SubmitOutcome::Queued => return Ok(Submitted::Queued(submitted.input_id)),
        };
        let task_id = super::task::task_id(context, &request);
        if replayed {
            // A retried message: the task as it is now, then what follows.
            let now = self.head(context).await?;
            return Ok(Submitted::Task(
                Box::new(self.view(&task_id, now).await?),
                now,
            ));
        }
        Ok(Submitted::Task(
            Box::new(TaskView::new(context, &request)),
            head,
        ))
    }

    /// A message to a task: the answer to the approval it waits for. A retried answer (the same
    /// `messageId`) replays, also once the approval is answered and the task has moved on.
    async fn answer(
        &self,
        task_id: &str,
        message: &SendParams,
    ) -> Result<(TaskView, u64), RpcError> {
        let (context, _) = parse_task_id(task_id).ok_or_else(RpcError::task_not_found)?;
        if message
            .context_id
            .as_deref()
            .is_some_and(|named| named != context)
        {
            return Err(RpcError::invalid_params(
                "The message's taskId belongs to another contextId",
            ));
        }
        let now = self.head(context).await?;
        let mut view = self.view(task_id, now).await?;
        let Some((_, permission)) = view.last_approval.clone() else {
            return Err(not_waiting(&view));
        };
        let (approved, reason, scope) = approval(&message.parts);
        let scope = match scope.as_deref() {
            None => None,
            Some("once") => Some(PermissionScope::Once),
            Some("session") => Some(PermissionScope::Session),
            Some(_) => return Err(RpcError::invalid_params("scope must be once or session")),
        };
        let data = ResolvePermissionData {
            session_id: context.to_owned(),
            permission_request_id: permission,
            approved,
            reason,
            scope,
        };
        let command_id = format!("a2a.message.{}", message.message_id);
        let kind = CommandKind::ResolvePermission(data);
        let waiting = view.state == TaskState::InputRequired;
        match run_command(self.state, &self.caller, command_id, kind, None).await {
            Ok(ran) if ran.replayed => {}
            Ok(_) => view.answered(),
            // Not pending: answered already, or the task moved on (the owner's own view says
            // so), or not the caller's to answer (indistinguishable from a missing task).
            Err(answer)
                if answer.error_code() == Some(ErrorCode::PermissionNotFound) && !waiting =>
            {
                return Err(not_waiting(&view));
            }
            Err(answer) => return Err(command_failure(*answer)),
        }
        Ok((view, now))
    }

    /// `GetTask`.
    pub async fn get_task(&self, params: &Value) -> Result<Reply, RpcError> {
        let (view, _) = self.current(params).await?;
        let limit = params
            .get("historyLength")
            .and_then(Value::as_u64)
            .map(|n| n as usize);
        let history = self.history(&view, limit).await;
        Ok(Reply::Result(view.task(Some(history))))
    }

    /// The task `params.id` names, as the log tells it now, and the log's head.
    async fn current(&self, params: &Value) -> Result<(TaskView, u64), RpcError> {
        self.require_read()?;
        let id = params
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("params.id is required"))?;
        let (context, _) = parse_task_id(id).ok_or_else(RpcError::task_not_found)?;
        let head = self.head(context).await?;
        Ok((self.view(id, head).await?, head))
    }

    /// `CancelTask`: aborts the request and answers once it has ended. Canceling a canceled task
    /// answers it again; one that completed or failed cannot be canceled.
    pub async fn cancel(&self, params: &Value) -> Result<Reply, RpcError> {
        let (mut view, now) = self.current(params).await?;
        match view.state {
            TaskState::Canceled => return Ok(Reply::Result(view.task(None))),
            TaskState::Completed | TaskState::Failed => return Err(RpcError::task_not_cancelable()),
            _ => {}
        }
        let command_id = format!("a2a.cancel.{}", agent_runtime::ids::nanoid());
        let kind = CommandKind::AbortRequest(SessionRef::new(view.context_id.clone()));
        self.command(command_id, kind, None).await?;
        self.wait(&mut view, now, |view| view.state.is_terminal())
            .await?;
        Ok(Reply::Result(view.task(None)))
    }

    /// `SubscribeToTask`: the task first, then its updates; an ended task is refused.
    pub async fn subscribe(&self, params: &Value) -> Result<Reply, RpcError> {
        let slot = self.slot()?;
        let (view, now) = self.current(params).await?;
        if view.state.is_terminal() {
            return Err(RpcError::unsupported(
                "The task has ended: read it with GetTask",
            ));
        }
        self.stream(slot, view, now).await
    }

    fn require_read(&self) -> Result<(), RpcError> {
        self.caller
            .principal
            .require_scopes(&[Scope::SessionRead])
            .map_err(|error| RpcError::from_protocol(&error))
    }
}

/// What a submitted message became.
enum Submitted {
    /// A task (a request started, or the running one took the message), from this sequence.
    Task(Box<TaskView>, u64),
    /// The message waits behind a request that is ending (its input id).
    Queued(String),
}

/// Why a message cannot answer a task: it has ended, or it waits for nothing.
fn not_waiting(view: &TaskView) -> RpcError {
    if view.state.is_terminal() {
        RpcError::unsupported("The task has ended: send a message without taskId to start another")
    } else {
        RpcError::unsupported("The task is not waiting for input")
    }
}

/// `SendMessageRequest`, the parts this server reads.
struct SendParams {
    message_id: String,
    context_id: Option<String>,
    task_id: Option<String>,
    parts: Vec<Value>,
    content: UserContent,
    return_immediately: bool,
    history_length: Option<usize>,
}

impl SendParams {
    fn read(params: &Value) -> Result<SendParams, RpcError> {
        let message = params
            .get("message")
            .filter(|message| message.is_object())
            .ok_or_else(|| RpcError::invalid_params("params.message is required"))?;
        let text = |name: &str| {
            message
                .get(name)
                .and_then(Value::as_str)
                .filter(|text| !text.is_empty())
        };
        let message_id = text("messageId")
            .filter(|id| id.len() <= MAX_MESSAGE_ID_CHARS && agent_runtime::ids::is_valid_identifier(id))
            .ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "message.messageId must be 1 to {MAX_MESSAGE_ID_CHARS} characters of letters, digits, '_', '-', '.' and ':'"
                ))
            })?
            .to_owned();
        if text("role") == Some("ROLE_AGENT") {
            return Err(RpcError::invalid_params(
                "A client's message has the role ROLE_USER",
            ));
        }
        let context_id = text("contextId").map(str::to_owned);
        if context_id
            .as_deref()
            .is_some_and(|id| !agent_runtime::ids::is_valid_identifier(id))
        {
            return Err(RpcError::invalid_params(
                "message.contextId must be letters, digits, '_', '-', '.' and ':'",
            ));
        }
        let parts = message
            .get("parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let task_id = text("taskId").map(str::to_owned);
        let content = match user_content(&parts) {
            Some(content) => content,
            // An answer to an approval may be a bare data part; an input needs content.
            None if task_id.is_some() && !parts.is_empty() => UserContent::Text(String::new()),
            None => return Err(RpcError::content_not_supported()),
        };
        let configuration = params.get("configuration");
        let option = |name: &str| configuration.and_then(|configuration| configuration.get(name));
        Ok(SendParams {
            message_id,
            context_id,
            task_id,
            parts,
            content,
            return_immediately: option("returnImmediately")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            history_length: option("historyLength")
                .and_then(Value::as_u64)
                .map(|n| n as usize),
        })
    }
}

/// The `Last-Event-ID` of a resumed stream (with the extension).
fn last_event_id(headers: &HeaderMap) -> Result<Option<Cursor>, RpcError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(Cursor::parse)
        .map(Some)
        .ok_or_else(|| RpcError::invalid_params("Last-Event-ID must be a cursor of this stream"))
}

fn internal() -> RpcError {
    RpcError::from_protocol(&ProtocolError::internal())
}

/// The JSON-RPC error of a refused command: its code and message, as the command answered.
fn command_failure(answer: Answer) -> RpcError {
    let body = answer.into_body();
    let error = &body["error"];
    let code = error["code"]
        .as_str()
        .and_then(ErrorCode::parse)
        .unwrap_or(ErrorCode::InternalError);
    let mut protocol = ProtocolError::new(code, error["message"].as_str().unwrap_or_default());
    protocol.retryable = error["retryable"].as_bool().unwrap_or(false);
    protocol.retry_after_ms = error["retryAfterMs"].as_u64();
    RpcError::from_protocol(&protocol)
}

/// A task's updates as JSON-RPC responses of one stream.
struct TaskStream {
    id: Value,
    view: TaskView,
    sequences: bool,
    /// The log's head when the stream was asked for: a task that waits or has ended is over only
    /// once the stream has been fed that far (a resumed stream's view starts at its cursor).
    current_at: u64,
    fed: u64,
}

impl Projection for TaskStream {
    fn feed(&mut self, event: &EventEnvelope) -> Vec<Frame> {
        self.fed = event.sequence;
        let updates = self.view.apply(event);
        let responses = updates
            .into_iter()
            .map(|update| rpc::result(&self.id, update))
            .collect();
        let mut frames = frames_of(responses, event.sequence);
        if self.sequences {
            for frame in &mut frames {
                let cursor = frame.id.map(|cursor| cursor.to_string());
                let inner = frame.event["result"]
                    .as_object_mut()
                    .and_then(|update| update.values_mut().next());
                if let (Some(inner), Some(cursor)) = (inner, cursor) {
                    inner["metadata"] = json!({SEQUENCE_EXTENSION: {"cursor": cursor}});
                }
            }
        }
        frames
    }

    fn is_finished(&self) -> bool {
        self.view.state.ends_stream() && self.fed >= self.current_at
    }
}
