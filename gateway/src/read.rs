//! `session.read`: the executor's snapshot plus the recovery object (docs/protocol.md §7).

use std::sync::Arc;

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::command::SessionRef;
use agent_runtime::protocol::{JsonObject, ProtocolError};
use agent_runtime_store::{HistoryProgress, HistoryState};
use serde_json::{Value, json};

use crate::recovery;
use crate::result_json::{object, to_value};
use crate::state::AppState;

pub async fn read_session(
    state: &Arc<AppState>,
    context: &CommandContext,
    data: SessionRef,
) -> Result<JsonObject, ProtocolError> {
    let tenant = &context.principal.tenant_id;
    let session_id = data.session_id.clone();
    // The head must be read before the snapshot (§7.2): anything appended while the snapshot
    // loads is then replayed rather than assumed to be in it.
    let head = recovery::head_before_read(state.store.as_ref(), tenant, &session_id).await;
    let snapshot = state.executor.read(context, data).await?;

    let progress = snapshot.history.as_ref().map(|history| HistoryProgress {
        state: if history.has_gap {
            HistoryState::Failed
        } else {
            HistoryState::InProgress
        },
        request_id: None,
        turn_id: None,
        message_id: None,
        covered_request_id: history.covered_request_id.clone(),
        updated_at_ms: 0,
        detail: None,
        repaired_messages: None,
    });
    let cursor = recovery::resolve(
        state.store.as_ref(),
        tenant,
        &session_id,
        head,
        progress.as_ref(),
    )
    .await;

    let mut recovery_object = JsonObject::new();
    recovery_object.insert("sessionLoaded".to_owned(), Value::Bool(snapshot.loaded));
    if let Ok(Some(route)) = state.store.get_session_route(tenant, &session_id).await {
        recovery_object.insert("routeState".to_owned(), json!(route.state.as_str()));
        recovery_object.insert("attempt".to_owned(), json!(route.attempt));
        recovery_object.insert("fencingToken".to_owned(), json!(route.fencing_token));
        if let Some(worker_id) = route.worker_id {
            recovery_object.insert("workerId".to_owned(), json!(worker_id));
        }
    }
    if snapshot.loaded {
        recovery_object.insert(
            "pendingInputCount".to_owned(),
            json!(snapshot.pending_inputs.len()),
        );
    }
    if let Some(sequence) = cursor.last_event_sequence {
        recovery_object.insert("lastEventSequence".to_owned(), json!(sequence));
    }
    if cursor.incomplete {
        recovery_object.insert("recoveryIncomplete".to_owned(), Value::Bool(true));
    }

    object(json!({
        "session": to_value(&snapshot.session)?,
        "messages": to_value(&snapshot.messages)?,
        "pendingInputs": to_value(&snapshot.pending_inputs)?,
        "loaded": snapshot.loaded,
        "recovery": Value::Object(recovery_object),
    }))
}
