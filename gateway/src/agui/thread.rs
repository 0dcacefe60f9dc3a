//! `GET {base}/ag-ui/threads/{threadId}/events`: a thread's runs as AG-UI events, one run per
//! stretch of a request (docs/protocols.md §1.4). With a cursor (`Last-Event-ID`, or `after`) the
//! stream continues exactly after that event; without one, or with one older than the retained
//! log, it opens with a snapshot run (`MESSAGES_SNAPSHOT` of the transcript) and then shows what
//! happens from there, the run in progress reopened first.

use std::sync::Arc;

use agent_runtime::ids::is_valid_identifier;
use agent_runtime::protocol::error::pseudo_command_id;
use agent_runtime::protocol::{ProtocolError, Scope};
use axum::Extension;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::json;

use super::projection::{Frame, Projector};
use super::run::oldest_retained;
use super::snapshot;
use crate::http::events::stream_slot;
use crate::http::{ClientAddr, Route, authenticate, not_found};
use crate::projected::{Cursor, Plan, Projection, respond};
use crate::response::failure_response;
use crate::state::AppState;
use crate::store_errors::to_protocol;

// Stays whole: the route's checks in the order of the v1 event route (authenticate, scope,
// cursor, slot, session), then the plan.
pub async fn events(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let client = ClientAddr::of(client);
    if method != Method::GET {
        return not_found(&state, &headers, client);
    }
    let principal = match authenticate(&state, &headers, client, Route::Other) {
        Ok(principal) => principal,
        Err(response) => return *response,
    };
    let fail = |error: ProtocolError| failure_response(pseudo_command_id::EVENTS, &error, false);
    let thread = match path {
        Ok(Path(thread)) if is_valid_identifier(&thread) => thread,
        Ok(_) => return fail(ProtocolError::invalid_session_route_id()),
        Err(_) => return fail(ProtocolError::invalid_session_route_encoding()),
    };
    if let Err(error) = principal.require_scopes(&[Scope::SessionRead]) {
        return fail(error);
    }
    let asked = asked_cursor(query, &headers);
    let Some(asked) = asked else {
        return fail(ProtocolError::invalid_event_cursor());
    };
    if state.lifecycle.is_draining() {
        return fail(ProtocolError::shutting_down());
    }
    let tenant = principal.tenant_id.clone();
    let slot = match stream_slot(&state, &tenant) {
        Ok(slot) => slot,
        Err(error) => return fail(error),
    };
    match state.store.get_session(&tenant, &thread).await {
        Ok(Some(_)) => {}
        Ok(None) => return fail(ProtocolError::session_not_found(&thread)),
        Err(error) => return fail(to_protocol(&error)),
    }
    let oldest = match oldest_retained(&state, &tenant, &thread).await {
        Ok(oldest) => oldest,
        Err(error) => return fail(error),
    };
    let head = match state.store.latest_event_sequence(&tenant, &thread).await {
        Ok(head) => head.unwrap_or(0),
        Err(error) => return fail(to_protocol(&error)),
    };
    let plan = match asked {
        Some(cursor) if cursor.after > head => return fail(ProtocolError::event_cursor_ahead()),
        Some(cursor) if cursor.after >= oldest => Plan {
            tenant,
            session: thread.clone(),
            scan_from: oldest,
            resume: cursor,
            first: Vec::new(),
            projector: Projector::thread(&thread),
        },
        _ => match snapshot_plan(&state, tenant, &thread, oldest, head).await {
            Ok(plan) => plan,
            Err(error) => return fail(error),
        },
    };
    respond(&state, &headers, slot, plan)
}

/// The cursor the client asked for (`after`, else `Last-Event-ID`, either `SEQ` or `SEQ:K`):
/// `None` inside for none (a snapshot), `None` outside for a malformed or repeated one.
fn asked_cursor(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: &HeaderMap,
) -> Option<Option<Cursor>> {
    let Ok(Query(query)) = query else {
        return None;
    };
    let mut afters = query.iter().filter(|(name, _)| name == "after");
    let mut ids = headers.get_all("last-event-id").iter();
    let raw = match (afters.next(), afters.next()) {
        (Some(_), Some(_)) => return None,
        (Some((_, after)), None) => after.as_str(),
        (None, _) => match (ids.next(), ids.next()) {
            (None, _) => return Some(None),
            (Some(id), None) => id.to_str().ok()?,
            (Some(_), Some(_)) => return None,
        },
    };
    Cursor::parse(raw).map(Some)
}

/// A snapshot run at `head`, then the log after it; what is open at `head` is reopened.
async fn snapshot_plan(
    state: &AppState,
    tenant: String,
    thread: &str,
    oldest: u64,
    head: u64,
) -> Result<Plan<Projector>, ProtocolError> {
    let transcript = state
        .store
        .load_transcript(&tenant, thread)
        .await
        .map_err(|error| to_protocol(&error))?;
    let messages = transcript
        .map(|transcript| snapshot::messages(&transcript.entries))
        .unwrap_or_default();
    let now = state.clock.now_ms();
    let run_id = format!("snapshot-{head}");
    let at = |event: serde_json::Value| Frame { event, id: None };
    let mut first = vec![
        at(
            json!({"type": "RUN_STARTED", "threadId": thread, "runId": run_id,
                  "protocolVersion": super::PROTOCOL_VERSION, "timestamp": now}),
        ),
        at(json!({"type": "MESSAGES_SNAPSHOT", "messages": messages, "timestamp": now})),
        at(
            json!({"type": "RUN_FINISHED", "threadId": thread, "runId": run_id,
                  "outcome": {"type": "success"}, "timestamp": now}),
        ),
    ];
    // The projector catches up with the log up to `head` without sending anything, so that what
    // follows continues the run in progress.
    let mut projector = Projector::thread(thread);
    let mut after = oldest;
    while after < head {
        let page = state
            .store
            .read_events(&tenant, thread, after, agent_runtime_store::MAX_EVENT_PAGE)
            .await
            .map_err(|error| to_protocol(&error))?;
        let Some(last) = page.events.last() else {
            break;
        };
        after = last.sequence;
        for event in page.events.iter().filter(|event| event.sequence <= head) {
            projector.feed(event);
        }
    }
    first.extend(projector.reopen(now).into_iter().map(at));
    if let Some(last) = first.last_mut() {
        last.id = Some(Cursor::at(head));
    }
    Ok(Plan {
        tenant,
        session: thread.to_owned(),
        scan_from: head,
        resume: Cursor::at(head),
        first,
        projector,
    })
}
