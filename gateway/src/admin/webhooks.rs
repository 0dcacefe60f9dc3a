//! Webhook endpoints with their outbox counts; enabling, disabling, deliveries and redelivery.

use std::collections::HashMap;
use std::sync::Arc;

use agent_runtime_store::DeliveryStatus;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::HeaderMap;

use crate::http::ClientAddr;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::{AdminError, Reply, Target, act, limit, param, read, tenant_id};
use crate::state::AppState;

/// `GET admin/webhooks`: every endpoint, its state and its outbox counts.
pub async fn endpoints(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    query: Query<HashMap<String, String>>,
) -> Response {
    read(state, headers, client, query, |state, _| async move {
        let endpoints = state.store.list_webhook_endpoints().await?;
        let stats = state.store.webhook_outbox_stats().await?;
        let listed: Vec<_> = endpoints
            .into_iter()
            .map(|endpoint| {
                let counts = stats.iter().find(|s| {
                    s.tenant_id == endpoint.tenant_id && s.endpoint_id == endpoint.endpoint_id
                });
                json!({
                    "tenantId": endpoint.tenant_id,
                    "endpointId": endpoint.endpoint_id,
                    "events": endpoint.event_types,
                    "enabled": endpoint.disabled_at_ms.is_none(),
                    "disabledAtMs": endpoint.disabled_at_ms,
                    "disabledReason": endpoint.disabled_reason,
                    "failingSinceMs": endpoint.failing_since_ms,
                    "pending": counts.map_or(0, |c| c.pending),
                    "failed": counts.map_or(0, |c| c.failed),
                    "oldestPendingAtMs": counts.and_then(|c| c.oldest_pending_at_ms),
                })
            })
            .collect();
        Ok(json!({"endpoints": listed}))
    })
    .await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointRef {
    tenant_id: String,
    endpoint_id: String,
    #[serde(default)]
    reason: Option<String>,
}

async fn set_enabled(state: &AppState, r: &EndpointRef, enabled: bool) -> Reply {
    let tenant = tenant_id(&r.tenant_id)?;
    let reason = r.reason.as_deref().unwrap_or("disabled by an operator");
    match state
        .store
        .set_webhook_endpoint_enabled(tenant, &r.endpoint_id, enabled, reason)
        .await?
    {
        Some(changed) => Ok(json!({"changed": changed, "enabled": enabled})),
        None => Err(AdminError::not_found(format!(
            "Tenant {tenant} has no webhook endpoint {}",
            r.endpoint_id
        ))),
    }
}

/// Enables or disables the endpoint the body names, audited as `action`.
async fn toggle(
    state: Arc<AppState>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
    enabled: bool,
    action: &'static str,
) -> Response {
    let target = |r: &EndpointRef| Target::tenant(&r.tenant_id);
    let run = move |state: Arc<AppState>, _, r: EndpointRef| async move {
        set_enabled(&state, &r, enabled).await
    };
    act(state, headers, client, bytes, action, target, run).await
}

/// `POST admin/webhooks/enable {tenantId, endpointId}`: its pending deliveries go out again.
pub async fn enable(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
) -> Response {
    toggle(state, headers, client, bytes, true, "admin.webhook.enable").await
}

/// `POST admin/webhooks/disable {tenantId, endpointId, reason?}`: it gets no new deliveries.
pub async fn disable(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
) -> Response {
    toggle(
        state,
        headers,
        client,
        bytes,
        false,
        "admin.webhook.disable",
    )
    .await
}

/// `GET admin/webhooks/deliveries?tenantId&endpointId[&status][&after][&limit]`: oldest first.
pub async fn deliveries(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    query: Query<HashMap<String, String>>,
) -> Response {
    read(state, headers, client, query, |state, query| async move {
        let tenant = tenant_id(param(&query, "tenantId")?)?;
        let endpoint = param(&query, "endpointId")?;
        let status = match query.get("status") {
            Some(text) => Some(DeliveryStatus::parse(text).ok_or_else(|| {
                AdminError::invalid("status must be one of: pending, delivered, failed")
            })?),
            None => None,
        };
        let after = match query.get("after") {
            Some(text) => text
                .parse()
                .map_err(|_| AdminError::invalid("after must be a delivery position"))?,
            None => 0,
        };
        let listed = state
            .store
            .list_webhook_deliveries(tenant, endpoint, status, after, limit(&query)?)
            .await?;
        let deliveries: Vec<_> = listed
            .into_iter()
            .map(|d| {
                json!({
                    "deliveryId": d.delivery_id,
                    "position": d.position,
                    "sessionId": d.session_id,
                    "eventType": d.event_type,
                    "status": d.status,
                    "attempts": d.attempts,
                    "createdAtMs": d.created_at_ms,
                    "nextAttemptAtMs": d.next_attempt_at_ms,
                    "lastError": d.last_error,
                    "finishedAtMs": d.finished_at_ms,
                })
            })
            .collect();
        Ok(json!({"deliveries": deliveries}))
    })
    .await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryRef {
    tenant_id: String,
    delivery_id: String,
}

/// `POST admin/webhooks/redeliver {tenantId, deliveryId}`: a delivered or failed delivery goes
/// out again, with the same `webhook-id`.
pub async fn redeliver(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
) -> Response {
    let target = |r: &DeliveryRef| Target::tenant(&r.tenant_id);
    act(
        state,
        headers,
        client,
        bytes,
        "admin.webhook.redeliver",
        target,
        |state, _, r: DeliveryRef| async move {
            let tenant = tenant_id(&r.tenant_id)?;
            match state
                .store
                .redeliver_webhook(tenant, &r.delivery_id)
                .await?
            {
                Some(changed) => Ok(json!({"redelivered": changed})),
                None => Err(AdminError::not_found(format!(
                    "Tenant {tenant} has no webhook delivery {}",
                    r.delivery_id
                ))),
            }
        },
    )
    .await
}
