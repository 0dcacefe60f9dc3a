//! `session.read`: the executor's snapshot plus the recovery object (docs/protocol.md §7).

use std::sync::Arc;

use agent_runtime::executor_port::{CommandContext, SessionCommands, SessionSnapshot};
use agent_runtime::protocol::command::SessionRef;
use agent_runtime::protocol::result::ReadSessionResult;
use agent_runtime::protocol::{ProtocolError, RecoveryObject};
use agent_runtime_store::SessionRoute;

use crate::recovery::{self, RecoveryCursor};
use crate::state::AppState;

pub async fn read_session(
    state: &Arc<AppState>,
    context: &CommandContext,
    data: SessionRef,
) -> Result<ReadSessionResult, ProtocolError> {
    let tenant = &context.principal.tenant_id;
    let session_id = data.session_id.clone();
    // The head must be read before the snapshot (§7.2): anything appended while the snapshot
    // loads is then replayed rather than assumed to be in it.
    let head = recovery::head_before_read(state.store.as_ref(), tenant, &session_id).await;
    let snapshot = state.executor.read(context, data).await?;

    let cursor = recovery::resolve(
        state.store.as_ref(),
        tenant,
        &session_id,
        head,
        snapshot.history.as_ref(),
    )
    .await;

    // The route only adds to the recovery object: a session read without it is still answered.
    let route = state
        .store
        .get_session_route(tenant, &session_id)
        .await
        .ok()
        .flatten();
    let recovery = recovery_object(&snapshot, route, cursor);
    Ok(ReadSessionResult {
        session: snapshot.session,
        messages: snapshot.messages,
        pending_inputs: snapshot.pending_inputs,
        loaded: snapshot.loaded,
        recovery,
        history_progress: snapshot.history,
    })
}

/// Where the client resumes (docs/protocol.md §7.1). What is unknown is left out: the route of a
/// session without one, the pending inputs of a session not loaded here.
fn recovery_object(
    snapshot: &SessionSnapshot,
    route: Option<SessionRoute>,
    cursor: RecoveryCursor,
) -> RecoveryObject {
    RecoveryObject {
        session_loaded: snapshot.loaded,
        route_state: route.as_ref().map(|route| route.state),
        attempt: route.as_ref().map(|route| route.attempt),
        fencing_token: route.as_ref().map(|route| route.fencing_token),
        worker_id: route.and_then(|route| route.worker_id),
        pending_input_count: snapshot
            .loaded
            .then_some(snapshot.pending_inputs.len() as u64),
        last_event_sequence: cursor.last_event_sequence,
        recovery_incomplete: cursor.incomplete,
    }
}
