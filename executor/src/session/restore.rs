//! Loading a session that a previous process ran (resume, or a command for an active session
//! after a restart, decision P12).
//!
//! A request that had started when its executor died is never blindly replayed: the journal shows
//! it accepted and not finished, so it is closed with an `error` (`EXECUTOR_LOST`) and a `result`
//! (docs/agent.md §5). Inputs that were accepted but not yet applied are not lost: they run as
//! requests. A request whose `result` was stored but whose journal end was not (the two are
//! separate writes, and the process can stop between them) already ended for its followers: only
//! its journal is completed, from that `result`.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use agent_runtime::protocol::content::PendingSessionInput;
use agent_runtime_store::{DurableEvent, MAX_EVENT_PAGE, Store, StoreError};
use serde_json::{Value, json};

use super::store_failure::JournalEnd;
use super::{Input, LiveSession, emit};

const LOST_MESSAGE: &str =
    "The executor running this request stopped before it finished; the request was not completed";

/// Closes interrupted requests and re-queues pending inputs. Returns how many requests it closed.
pub(crate) async fn restore_interrupted_requests(
    session: &Arc<LiveSession>,
) -> Result<usize, StoreError> {
    let store = session.deps.store.as_ref();
    let unfinished = unfinished_requests(store, &session.tenant_id, &session.session_id).await?;
    let sid = session.session_id.clone();
    let mut lost = 0;
    for request_id in &unfinished {
        if let Some(end) = stored_end(store, &session.tenant_id, &sid, request_id).await? {
            end.write(session, request_id).await?;
            continue;
        }
        lost += 1;
        session
            .publish_stream(request_id, emit::error(&sid, LOST_MESSAGE, "EXECUTOR_LOST"))
            .await?;
        session
            .publish_stream(request_id, emit::result_error(&sid, LOST_MESSAGE))
            .await?;
        session
            .journal(
                "request_interrupted",
                request_id,
                json!({ "reason": "process_restart" }),
            )
            .await?;
    }
    requeue_pending_inputs(session).await?;
    Ok(lost)
}

/// How far back from the head the `result` of an unfinished request is looked for: it is among
/// the last events a session got before its process stopped.
const RESULT_LOOKBACK: u64 = MAX_EVENT_PAGE as u64;

/// The journal end matching `request_id`'s stored `result`, if the event log holds one.
async fn stored_end(
    store: &dyn Store,
    tenant_id: &str,
    session_id: &str,
    request_id: &str,
) -> Result<Option<JournalEnd>, StoreError> {
    let Some(range) = store.event_stream_range(tenant_id, session_id).await? else {
        return Ok(None);
    };
    let after = range
        .head_sequence
        .saturating_sub(RESULT_LOOKBACK)
        .max(range.first_sequence.saturating_sub(1));
    let page = store
        .read_events(tenant_id, session_id, after, MAX_EVENT_PAGE)
        .await?;
    let of_request = |kind: &str| {
        page.events
            .iter()
            .rev()
            .filter(|event| event.request_id.as_deref() == Some(request_id))
            .find(|event| event.data.get("type").and_then(Value::as_str) == Some(kind))
    };
    let Some(result) = of_request("result") else {
        return Ok(None);
    };
    if result.data.get("subtype").and_then(Value::as_str) == Some("success") {
        return Ok(Some(JournalEnd::new("request_completed", json!({}))));
    }
    // A failed request's `error` event (appended with its `result`) says why.
    let error = of_request("error");
    let field = |name: &str| error.and_then(|event| event.data.get(name).cloned());
    Ok(Some(JournalEnd::new(
        "request_failed",
        json!({ "error": {
            "message": field("message").or_else(|| result.data.get("error").cloned()),
            "code": field("code").unwrap_or_else(|| Value::from("INTERNAL_ERROR")),
        } }),
    )))
}

/// Whether a session a previous process ran has something to recover: a request it accepted and
/// never ended, or inputs waiting to run.
pub(crate) async fn left_open(
    store: &dyn Store,
    tenant_id: &str,
    session_id: &str,
) -> Result<bool, StoreError> {
    if !unfinished_requests(store, tenant_id, session_id)
        .await?
        .is_empty()
    {
        return Ok(true);
    }
    let transcript = store.load_transcript(tenant_id, session_id).await?;
    Ok(transcript.is_some_and(|transcript| !transcript.pending_inputs.is_empty()))
}

/// Requests with `request_accepted` and no terminal journal event, oldest first.
async fn unfinished_requests(
    store: &dyn Store,
    tenant_id: &str,
    session_id: &str,
) -> Result<Vec<String>, StoreError> {
    let mut open: BTreeMap<u64, String> = BTreeMap::new();
    scan_journal(store, tenant_id, session_id, |event| {
        track(&mut open, event);
        ControlFlow::Continue(())
    })
    .await?;
    Ok(open.into_values().collect())
}

/// Visits the session's durable journal in order, page by page, until `visit` breaks.
pub(crate) async fn scan_journal(
    store: &dyn Store,
    tenant_id: &str,
    session_id: &str,
    mut visit: impl FnMut(&DurableEvent) -> ControlFlow<()>,
) -> Result<(), StoreError> {
    let mut after = 0;
    loop {
        let page = store
            .read_durable(tenant_id, session_id, after, MAX_EVENT_PAGE)
            .await?;
        for event in &page.events {
            if visit(event).is_break() {
                return Ok(());
            }
            after = event.sequence;
        }
        if !page.has_more {
            return Ok(());
        }
    }
}

fn track(open: &mut BTreeMap<u64, String>, event: &DurableEvent) {
    let Some(request_id) = event.correlation.request_id.clone() else {
        return;
    };
    match event.event_type.as_str() {
        "request_accepted" => {
            open.insert(event.sequence, request_id);
        }
        "request_completed" | "request_failed" | "request_interrupted" => {
            open.retain(|_, open_id| *open_id != request_id);
        }
        _ => {}
    }
}

async fn requeue_pending_inputs(session: &Arc<LiveSession>) -> Result<(), StoreError> {
    let transcript = session
        .deps
        .store
        .load_transcript(&session.tenant_id, &session.session_id)
        .await?;
    let pending: Vec<(PendingSessionInput, Option<String>)> = transcript
        .map(|t| t.pending_inputs)
        .unwrap_or_default()
        .iter()
        .filter_map(super::stored_pending)
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    let first = {
        let mut state = session.lock();
        for (input, submitted_by) in pending {
            state.queued.push_back(Input {
                priority: agent_runtime::protocol::content::Priority::Later,
                target_request_id: None,
                ..Input::from_pending(input, submitted_by)
            });
        }
        if state.active.is_some() {
            None
        } else {
            let input = state.queued.pop_front();
            input.map(|input| {
                let request = super::new_request(input);
                state.active = Some(super::active_for(&request));
                request
            })
        }
    };
    if let Some(request) = first {
        session.spawn_driver(request);
    }
    Ok(())
}
