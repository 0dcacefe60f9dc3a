//! Sessions across tenants, force-closing one, and deleting a tenant.

use std::collections::HashMap;
use std::sync::Arc;

use agent_runtime::executor_port::CommandContext;
use agent_runtime::ids::nanoid;
use agent_runtime::protocol::{ErrorCode, Principal, Scope, SessionStatus, parse_command};
use agent_runtime_store::SessionRecord;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::HeaderMap;

use crate::http::ClientAddr;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AdminError, Operator, Reply, Target, act, key_after, limit, read, tenant_id};
use crate::pipeline;
use crate::state::AppState;

/// `GET admin/sessions`: with `tenantId`, that tenant's sessions newest first (`cursor` pages);
/// without, every tenant's open sessions in key order (`after` = `tenant/session` pages). Each with
/// its route (where it runs in a cluster).
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    query: Query<HashMap<String, String>>,
) -> Response {
    read(state, headers, client, query, list_sessions).await
}

async fn list_sessions(state: Arc<AppState>, query: HashMap<String, String>) -> Reply {
    let limit = limit(&query)?;
    let store = &state.store;
    let (records, next) = match query.get("tenantId") {
        Some(tenant) => {
            let page = store
                .list_sessions(
                    tenant_id(tenant)?,
                    query.get("cursor").map(String::as_str),
                    Some(limit.min(100)),
                )
                .await
                .map_err(|error| match error {
                    agent_runtime_store::StoreError::InvalidArgument(message) => {
                        AdminError::invalid(message)
                    }
                    other => AdminError::internal(other),
                })?;
            (page.sessions, page.next_cursor)
        }
        None => {
            let after = key_after(&query, "tenant/session")?;
            let keys = store.list_active_sessions(after, limit).await?;
            let next = (keys.len() == limit as usize)
                .then(|| keys.last().map(|(t, s)| format!("{t}/{s}")))
                .flatten();
            let mut records = Vec::new();
            for (tenant, session) in keys {
                if let Some(record) = store.get_session(&tenant, &session).await? {
                    records.push(record);
                }
            }
            (records, next)
        }
    };
    let mut sessions = Vec::new();
    for record in records {
        sessions.push(with_route(&state, record).await?);
    }
    Ok(json!({"sessions": sessions, "next": next}))
}

async fn with_route(state: &AppState, record: SessionRecord) -> Result<Value, AdminError> {
    let route = state
        .store
        .get_session_route(&record.tenant_id, &record.session_id)
        .await?;
    Ok(json!({
        "tenantId": record.tenant_id,
        "sessionId": record.session_id,
        "status": record.status,
        "createdBy": record.created_by,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
        "route": route,
    }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRef {
    tenant_id: String,
    session_id: String,
}

/// `POST admin/sessions/close {tenantId, sessionId}`: closes the session through the command
/// pipeline (`session.close` as the operator, so it is routed, fenced and idempotent like any
/// other close); answers what the command answered.
pub async fn close(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
) -> Response {
    let target = |r: &SessionRef| Target::session(&r.tenant_id, &r.session_id);
    act(
        state,
        headers,
        client,
        bytes,
        "admin.session.close",
        target,
        |state, operator, r: SessionRef| async move {
            close_session(&state, &operator, tenant_id(&r.tenant_id)?, &r.session_id).await
        },
    )
    .await
}

/// Runs `session.close` for `session` of `tenant` as the operator.
async fn close_session(
    state: &Arc<AppState>,
    operator: &Operator,
    tenant: &str,
    session: &str,
) -> Reply {
    let command_id = format!("admin-close-{}", nanoid());
    let text = json!({
        "protocolVersion": 1,
        "commandId": command_id,
        "type": "session.close",
        "data": {"sessionId": session},
    });
    let bytes = serde_json::to_vec(&text).expect("a JSON value always serialises");
    let command = parse_command(&bytes).map_err(|error| AdminError::invalid(error.message))?;
    let context = CommandContext {
        principal: Principal::new(tenant, &operator.subject, &[Scope::SessionAdmin]),
        command_id,
        trace: None,
        execution_id: None,
        chosen_session_id: None,
    };
    let answer = pipeline::execute(state, context, command).await;
    let code = answer.error_code();
    let body = answer.into_body();
    match code {
        None => Ok(body["data"].clone()),
        Some(ErrorCode::SessionNotFound) => Err(AdminError::not_found(format!(
            "Tenant {tenant} has no session {session}"
        ))),
        Some(_) => Err(AdminError::conflict(
            body["error"]["message"]
                .as_str()
                .unwrap_or("The close failed")
                .to_owned(),
        )),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantRef {
    tenant_id: String,
}

/// `POST admin/tenants/delete {tenantId}`: closes the tenant's open sessions (their executors
/// stop them), then deletes everything the tenant owns from the store. Revoke its credentials
/// first: deleting is not barring.
pub async fn delete_tenant(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
) -> Response {
    let target = |r: &TenantRef| Target::tenant(&r.tenant_id);
    act(
        state,
        headers,
        client,
        bytes,
        "admin.tenant.delete",
        target,
        |state, operator, r: TenantRef| async move {
            let tenant = tenant_id(&r.tenant_id)?;
            // Listed whole first: closing moves a session in the newest-first order pages follow.
            let mut open = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let page = state
                    .store
                    .list_sessions(tenant, cursor.as_deref(), Some(100))
                    .await?;
                open.extend(
                    page.sessions
                        .into_iter()
                        .filter(|r| r.status != SessionStatus::Closed)
                        .map(|r| r.session_id),
                );
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            for session in &open {
                close_session(&state, &operator, tenant, session).await?;
            }
            let closed = open.len();
            let deleted = state.store.delete_tenant(tenant).await?;
            Ok(json!({"closedSessions": closed, "deletedRecords": deleted}))
        },
    )
    .await
}
