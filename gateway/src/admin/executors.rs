//! The executors of a cluster, and draining one.

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

use super::{AdminError, Target, act, read};
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
