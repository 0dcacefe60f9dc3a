//! The executors of a cluster: draining one, and moving a session off the one running it.

use std::collections::HashMap;
use std::sync::Arc;

use agent_runtime_store::{RuntimeErrorCode, StoreError};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::HeaderMap;

use crate::http::ClientAddr;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::{AdminError, Target, act, read, tenant_id};
use crate::cluster::moves::MoveError;
use crate::state::AppState;

/// `GET admin/executors`: every registered executor, its state and the sessions it holds.
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    query: Query<HashMap<String, String>>,
) -> Response {
    read(state, headers, client, query, |state, _| async move {
        let workers = state.store.list_workers().await?;
        let held = state.store.count_worker_sessions().await?;
        let listed: Vec<_> = workers
            .into_iter()
            .map(|w| {
                json!({
                    "workerId": w.worker_id,
                    "status": w.status,
                    "capacity": w.capacity,
                    "sessions": held.get(&w.worker_id).copied().unwrap_or(0),
                    "lastHeartbeatAtMs": w.last_heartbeat_at_ms,
                    "drainingAtMs": w.draining_at_ms,
                })
            })
            .collect();
        Ok(json!({"executors": listed}))
    })
    .await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerRef {
    worker_id: String,
}

/// `POST admin/executors/drain {workerId}`: the executor takes no new sessions; at its next
/// heartbeat it drains as on `SIGTERM` (running requests end with `EXECUTOR_SHUTDOWN`, sessions
/// are handed off, the process exits), and the other executors take its sessions over.
pub async fn drain(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
) -> Response {
    let target = |_: &WorkerRef| Target::tenant("*");
    act(
        state,
        headers,
        client,
        bytes,
        "admin.executor.drain",
        target,
        |state, _, r: WorkerRef| async move {
            match state.store.drain_worker(&r.worker_id).await {
                Ok(worker) => Ok(json!({"workerId": worker.worker_id, "status": worker.status})),
                Err(StoreError::Runtime {
                    code: RuntimeErrorCode::WorkerNotFound,
                    ..
                }) => Err(AdminError::not_found(format!(
                    "No executor is registered as {}",
                    r.worker_id
                ))),
                Err(other) => Err(AdminError::internal(other)),
            }
        },
    )
    .await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MoveRequest {
    tenant_id: String,
    session_id: String,
    /// The executor to move to; default: the live one with the fewest sessions.
    #[serde(default)]
    to_worker_id: Option<String>,
}

/// `POST admin/sessions/move {tenantId, sessionId, toWorkerId?}`: the executor running the
/// session stops (its running request ends with `EXECUTOR_SHUTDOWN`, as on a drain) and hands it
/// off; the target takes it at once and runs its waiting inputs. Answers where it runs now.
pub async fn move_session(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
) -> Response {
    let target = |r: &MoveRequest| Target::session(&r.tenant_id, &r.session_id);
    act(
        state,
        headers,
        client,
        bytes,
        "admin.session.move",
        target,
        |state, _, r: MoveRequest| async move {
            let tenant = tenant_id(&r.tenant_id)?;
            let Some(router) = &state.cluster else {
                return Err(AdminError::conflict(
                    "This server runs every session in its own process: there is no other executor to move one to",
                ));
            };
            let moved = router
                .move_session(tenant, &r.session_id, r.to_worker_id.as_deref())
                .await
                .map_err(|error| move_refused(error, tenant, &r.session_id))?;
            Ok(json!({
                "tenantId": tenant,
                "sessionId": r.session_id,
                "fromWorkerId": moved.from,
                "workerId": moved.to,
                "fencingToken": moved.fencing_token,
            }))
        },
    )
    .await
}

fn move_refused(error: MoveError, tenant: &str, session: &str) -> AdminError {
    match error {
        MoveError::NotRunning => AdminError::conflict(format!(
            "No live executor runs session {session} of tenant {tenant}: its next command places it"
        )),
        MoveError::NoTarget(why) => AdminError::conflict(why),
        MoveError::Unreachable(worker) => AdminError::unavailable(format!(
            "Executor {worker} did not answer; if the session was handed off, another executor adopts it"
        )),
        MoveError::Refused(refusal) => AdminError::conflict(format!(
            "The session was handed off but not taken ({}); its next command or another executor's adoption places it",
            refusal.message
        )),
        MoveError::Unsettled => AdminError::conflict(format!(
            "Session {session} went back to the executor it left; try again"
        )),
        MoveError::Store(error) => AdminError::internal(error),
    }
}
