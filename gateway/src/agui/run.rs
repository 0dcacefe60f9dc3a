//! `POST {base}/ag-ui`: one AG-UI run (docs/protocols.md §1.1). The thread is the session of
//! that id, created on first use; the newest user message becomes an `input.submit`, the
//! answers to an interrupt become `permission.resolve`s, each with a command id made from the
//! `runId`, so a retried run runs nothing twice. Every check answers JSON before the first stream
//! byte. A retry that sends `Last-Event-ID` continues the stream after that event; one without
//! it gets the whole run again.

use std::sync::Arc;

use agent_runtime::protocol::command::{
    CreateSessionData, PermissionScope, ResolvePermissionData, SubmitInputData,
};
use agent_runtime::protocol::content::{Priority, UserContent};
use agent_runtime::protocol::error::pseudo_command_id;
use agent_runtime::protocol::result::{SubmitOutcome, SubmitResult};
use agent_runtime::protocol::{CommandKind, EventType, ProtocolError, Scope};
use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::Value;

use super::input::{self, Action, Answer, RunInput};
use super::projection::{Frame, Projector, RunStart};
use crate::http::commands::client_trace;
use crate::http::events::stream_slot;
use crate::http::{ClientAddr, authenticated_body};
use crate::internal::{Caller, run_command};
use crate::projected::{Cursor, Plan, respond};
use crate::response::{command_response, failure_response};
use crate::state::AppState;
use crate::store_errors::to_protocol;

// Stays whole: the route's steps in order (authenticate, read, parse, slot, thread, commands,
// stream), each answering before the first stream byte.
pub async fn run(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    body: Body,
) -> Response {
    let (principal, bytes) = match authenticated_body(&state, &method, &headers, client, body).await
    {
        Ok(read) => read,
        Err(response) => return *response,
    };
    let fail = |error: ProtocolError| failure_response(pseudo_command_id::INVALID, &error, false);
    let input = match input::parse(&bytes) {
        Ok(input) => input,
        Err(error) => return fail(error),
    };
    if let Err(error) = principal.require_scopes(&[Scope::SessionRead]) {
        return fail(error);
    }
    // The client's cursor: it has every frame up to this event already.
    let cursor = match resume_cursor(&headers) {
        Ok(cursor) => cursor,
        Err(error) => return fail(error),
    };
    if state.lifecycle.is_draining() {
        return fail(ProtocolError::shutting_down());
    }
    let tenant = principal.tenant_id.clone();
    let slot = match stream_slot(&state, &tenant) {
        Ok(slot) => slot,
        Err(error) => return fail(error),
    };
    let runner = Runner {
        state: &state,
        caller: Caller {
            principal,
            trace: client_trace(&headers),
        },
        input: &input,
    };
    // A resume answers an interrupt of an existing thread (checked below), so only a submit
    // may create one.
    if matches!(input.action, Action::Submit(_))
        && let Err(response) = runner.ensure_thread().await
    {
        return *response;
    }
    let head = match state
        .store
        .latest_event_sequence(&tenant, &input.thread_id)
        .await
    {
        Ok(head) => head.unwrap_or(0),
        Err(error) => return fail(to_protocol(&error)),
    };
    let started = match &input.action {
        Action::Submit(content) => runner.submit(content.clone()).await,
        Action::Resume(answers) => runner.resume(answers).await,
    };
    let started = match started {
        Ok(started) => started,
        Err(response) => return *response,
    };
    let now = state.clock.now_ms();
    let (start, replayed) = match started {
        Started::Window { start, replayed } => (start, replayed),
        Started::Queued { input_id } => {
            return respond(
                &state,
                &headers,
                slot,
                queued_plan(&input, &tenant, head, &input_id, now),
            );
        }
    };
    // Where the run's window can begin: after the interrupt it answers; after the head read
    // before a fresh submit; anywhere in the retained log for a retry.
    let scan_from = match (&start, cursor.is_some() || replayed) {
        (RunStart::After(sequence), _) => *sequence,
        (_, false) => head,
        (_, true) => match oldest_retained(&state, &tenant, &input.thread_id).await {
            Ok(oldest) => oldest,
            Err(error) => return fail(error),
        },
    };
    // A retry of a run whose request retention has dropped would wait for it for ever.
    if let RunStart::Request(request)
    | RunStart::Input {
        request_id: request,
        ..
    } = &start
        && scan_from > 0
        && scan_from < head
    {
        match retains_request(&state, &tenant, &input.thread_id, scan_from, request).await {
            Ok(true) => {}
            Ok(false) => {
                let error = ProtocolError::stale_cursor("The run's events are no longer retained");
                return fail(error);
            }
            Err(error) => return fail(error),
        }
    }
    let (projector, run_started) = Projector::single(&input.thread_id, &input.run_id, start, now);
    let first = match cursor {
        Some(_) => Vec::new(),
        None => vec![Frame {
            event: run_started,
            id: Some(Cursor::at(scan_from)),
        }],
    };
    let plan = Plan {
        tenant,
        session: input.thread_id.clone(),
        scan_from,
        resume: cursor.unwrap_or(Cursor::at(scan_from)),
        first,
        projector,
    };
    respond(&state, &headers, slot, plan)
}

/// What the run's commands started.
enum Started {
    /// The run shows the log from `start`; `replayed`: its command had run before (a retry).
    Window { start: RunStart, replayed: bool },
    /// The input waits behind a request that is ending: it runs as a request of its own later.
    Queued { input_id: String },
}

struct Runner<'a> {
    state: &'a Arc<AppState>,
    caller: Caller,
    input: &'a RunInput,
}

impl Runner<'_> {
    /// Runs one command of this run through the pipeline; a failure is the response.
    async fn command(
        &self,
        suffix: &str,
        kind: CommandKind,
        chosen_session_id: Option<String>,
    ) -> Result<(Value, bool), Box<Response>> {
        let command_id = format!("ag-ui.{suffix}.{}", self.input.run_id);
        run_command(
            self.state,
            &self.caller,
            command_id,
            kind,
            chosen_session_id,
        )
        .await
        .map(|ran| (ran.data, ran.replayed))
        .map_err(|answer| Box::new(command_response(*answer)))
    }

    /// The thread's session, created with the thread's id if there is none.
    async fn ensure_thread(&self) -> Result<(), Box<Response>> {
        let tenant = &self.caller.principal.tenant_id;
        let thread = &self.input.thread_id;
        match self.state.store.get_session(tenant, thread).await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {}
            Err(error) => {
                let error = to_protocol(&error);
                return Err(Box::new(failure_response(
                    pseudo_command_id::INVALID,
                    &error,
                    false,
                )));
            }
        }
        let create = CommandKind::CreateSession(CreateSessionData::default());
        self.command("thread", create, Some(thread.clone()))
            .await
            .map(|_| ())
    }

    async fn submit(&self, content: UserContent) -> Result<Started, Box<Response>> {
        let data = SubmitInputData {
            session_id: self.input.thread_id.clone(),
            input: content,
            priority: Some(Priority::Next),
            expected_request_id: None,
            max_turns: None,
        };
        let (data, replayed) = self
            .command("input", CommandKind::SubmitInput(data), None)
            .await?;
        let submitted: SubmitResult = serde_json::from_value(data).map_err(|_| {
            Box::new(failure_response(
                pseudo_command_id::INTERNAL,
                &ProtocolError::internal(),
                false,
            ))
        })?;
        let start = match submitted.outcome {
            SubmitOutcome::Started { request_id } => RunStart::Request(request_id),
            SubmitOutcome::Steered { request_id, .. } => RunStart::Input {
                request_id,
                input_id: submitted.input_id,
            },
            SubmitOutcome::Queued => {
                return Ok(Started::Queued {
                    input_id: submitted.input_id,
                });
            }
        };
        Ok(Started::Window { start, replayed })
    }

    /// Resolves the approvals the entries answer; the run shows the log after the earliest.
    async fn resume(&self, answers: &[Answer]) -> Result<Started, Box<Response>> {
        let mut replayed = false;
        for (index, answer) in answers.iter().enumerate() {
            self.check_interrupt(answer).await?;
            let scope = match answer.scope.as_deref() {
                None => None,
                Some("once") => Some(PermissionScope::Once),
                Some("session") => Some(PermissionScope::Session),
                Some(_) => {
                    let error = ProtocolError::new(
                        agent_runtime::protocol::ErrorCode::InvalidCommand,
                        "A resume payload's scope must be once or session",
                    );
                    return Err(Box::new(failure_response(
                        pseudo_command_id::INVALID,
                        &error,
                        false,
                    )));
                }
            };
            let data = ResolvePermissionData {
                session_id: self.input.thread_id.clone(),
                permission_request_id: answer.permission_request_id.clone(),
                approved: answer.approved,
                reason: answer.reason.clone(),
                scope,
            };
            let suffix = format!("resume.{index}");
            let (_, again) = self
                .command(&suffix, CommandKind::ResolvePermission(data), None)
                .await?;
            replayed |= again;
        }
        let earliest = answers
            .iter()
            .map(|answer| answer.sequence)
            .min()
            .unwrap_or(0);
        Ok(Started::Window {
            start: RunStart::After(earliest),
            replayed,
        })
    }

    /// An interrupt id names a `permission.requested` of this thread, with that request id.
    async fn check_interrupt(&self, answer: &Answer) -> Result<(), Box<Response>> {
        let unknown = || {
            let error = ProtocolError::new(
                agent_runtime::protocol::ErrorCode::InvalidCommand,
                "A resume entry's interruptId names no interrupt of this thread",
            );
            Box::new(failure_response(pseudo_command_id::INVALID, &error, false))
        };
        let page = self
            .state
            .store
            .read_events(
                &self.caller.principal.tenant_id,
                &self.input.thread_id,
                answer.sequence - 1,
                1,
            )
            .await
            .map_err(|_| unknown())?;
        let found = page.events.first().is_some_and(|event| {
            event.sequence == answer.sequence
                && event.event_type == EventType::PermissionRequested
                && event
                    .data
                    .get("permissionRequestId")
                    .and_then(Value::as_str)
                    == Some(answer.permission_request_id.as_str())
        });
        if found { Ok(()) } else { Err(unknown()) }
    }
}

/// The `Last-Event-ID` of a retried run: `None` when absent; a malformed one is refused.
fn resume_cursor(headers: &HeaderMap) -> Result<Option<Cursor>, ProtocolError> {
    let mut values = headers.get_all("last-event-id").iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(value), None) => value
            .to_str()
            .ok()
            .and_then(Cursor::parse)
            .map(Some)
            .ok_or_else(ProtocolError::invalid_event_cursor),
        (Some(_), Some(_)) => Err(ProtocolError::invalid_event_cursor()),
    }
}

/// The sequence before the oldest retained event (0 when nothing was trimmed).
pub(super) async fn oldest_retained(
    state: &AppState,
    tenant: &str,
    session: &str,
) -> Result<u64, ProtocolError> {
    let range = state
        .store
        .event_stream_range(tenant, session)
        .await
        .map_err(|error| to_protocol(&error))?;
    Ok(range.map_or(0, |range| range.first_sequence.saturating_sub(1)))
}

/// Whether the log after `after` still holds an event of `request`.
async fn retains_request(
    state: &AppState,
    tenant: &str,
    session: &str,
    mut after: u64,
    request: &str,
) -> Result<bool, ProtocolError> {
    loop {
        let page = state
            .store
            .read_events(tenant, session, after, agent_runtime_store::MAX_EVENT_PAGE)
            .await
            .map_err(|error| to_protocol(&error))?;
        if page
            .events
            .iter()
            .any(|event| event.request_id.as_deref() == Some(request))
        {
            return Ok(true);
        }
        match page.events.last() {
            Some(last) if page.has_more => after = last.sequence,
            _ => return Ok(false),
        }
    }
}

/// A run whose input was queued: it starts and finishes at once, its result saying so; the
/// request the input becomes is seen on the thread's stream.
fn queued_plan(
    input: &RunInput,
    tenant: &str,
    head: u64,
    input_id: &str,
    now: u64,
) -> Plan<Projector> {
    let (projector, started) = Projector::single(
        &input.thread_id,
        &input.run_id,
        RunStart::After(u64::MAX),
        now,
    );
    let finished = serde_json::json!({
        "type": "RUN_FINISHED",
        "threadId": input.thread_id,
        "runId": input.run_id,
        "outcome": {"type": "success"},
        "result": {"queued": true, "inputId": input_id},
        "timestamp": now,
    });
    Plan {
        tenant: tenant.to_owned(),
        session: input.thread_id.clone(),
        scan_from: head,
        resume: Cursor::at(head),
        first: vec![
            Frame {
                event: started,
                id: None,
            },
            Frame {
                event: finished,
                id: None,
            },
        ],
        projector: projector.finished_now(),
    }
}
