//! The webhook outbox of the memory engine (docs/storage.md §11): deliveries enqueued under the
//! state lock by the change that causes them, so they are journaled on the same line.

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::state::{Scope, State, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::StoreResult;
use crate::journal::{CommandLease, JournalEntry};
use crate::outbox::*;
use crate::ports::WebhookOutbox;

impl State {
    /// Enqueues one delivery of `event_type` to every enabled endpoint of the tenant that wants it.
    pub(super) fn enqueue_webhooks(
        &mut self,
        cx: &mut Ctx<'_>,
        tenant_id: &str,
        session_id: &str,
        event_type: &str,
        source: impl FnOnce() -> Value,
    ) {
        let endpoints: Vec<String> = self
            .webhook_endpoints
            .range(scope(tenant_id, "")..)
            .take_while(|((tenant, _), _)| tenant == tenant_id)
            .filter(|(_, endpoint)| endpoint.wants(event_type))
            .map(|((_, id), _)| id.clone())
            .collect();
        if endpoints.is_empty() {
            return;
        }
        let source = source();
        for endpoint_id in endpoints {
            let position = self.next_webhook_position();
            let delivery = WebhookDelivery {
                delivery_id: new_delivery_id(),
                position,
                tenant_id: tenant_id.to_owned(),
                endpoint_id,
                session_id: session_id.to_owned(),
                event_type: event_type.to_owned(),
                source: source.clone(),
                created_at_ms: cx.now,
                attempts: 0,
                next_attempt_at_ms: 0,
                status: DeliveryStatus::Pending,
                last_error: None,
                finished_at_ms: None,
            };
            self.put_delivery(cx, delivery);
        }
    }

    /// `command.uncertain` for a command abandoned without a result.
    pub(super) fn enqueue_command_uncertain(
        &mut self,
        cx: &mut Ctx<'_>,
        tenant_id: &str,
        command_id: &str,
        lease: &CommandLease,
    ) {
        let target = lease.target.as_deref();
        let session_id = target
            .and_then(|t| t.session_id.clone())
            .unwrap_or_default();
        self.enqueue_webhooks(cx, tenant_id, &session_id, COMMAND_UNCERTAIN, || {
            json!({"command": {
                "commandId": command_id,
                "commandType": target.map(|t| t.command_type.clone()),
                "sessionId": target.and_then(|t| t.session_id.clone()),
                "sealedAtMs": lease.sealed_at,
                "reason": lease.abandon_reason,
            }})
        });
    }

    fn next_webhook_position(&self) -> u64 {
        self.webhook_deliveries
            .last_key_value()
            .map_or(1, |(position, _)| position + 1)
            .max(self.webhook_positions_used + 1)
    }

    fn put_delivery(&mut self, cx: &mut Ctx<'_>, delivery: WebhookDelivery) {
        cx.record(JournalEntry::WebhookDelivery {
            position: delivery.position,
            delivery: Some(Box::new(delivery.clone())),
        });
        self.webhook_positions_used = self.webhook_positions_used.max(delivery.position);
        self.webhook_deliveries.insert(delivery.position, delivery);
    }

    fn delete_delivery(&mut self, cx: &mut Ctx<'_>, position: u64) {
        if self.webhook_deliveries.remove(&position).is_some() {
            self.webhook_claims.remove(&position);
            cx.record(JournalEntry::WebhookDelivery {
                position,
                delivery: None,
            });
        }
    }

    fn put_endpoint(&mut self, cx: &mut Ctx<'_>, endpoint: WebhookEndpoint) {
        cx.record(JournalEntry::WebhookEndpoint {
            tenant_id: endpoint.tenant_id.clone(),
            endpoint_id: endpoint.endpoint_id.clone(),
            endpoint: Some(endpoint.clone()),
        });
        let key = scope(&endpoint.tenant_id, &endpoint.endpoint_id);
        self.webhook_endpoints.insert(key, endpoint);
    }

    /// The delivery at the head of each `(tenant, endpoint, session)`: the oldest pending one.
    fn delivery_heads(&self) -> Vec<u64> {
        let mut seen = HashSet::new();
        self.webhook_deliveries
            .values()
            .filter(|d| d.status == DeliveryStatus::Pending)
            .filter(|d| seen.insert((&d.tenant_id, &d.endpoint_id, &d.session_id)))
            .map(|d| d.position)
            .collect()
    }
}

#[async_trait]
impl<B: Backend> WebhookOutbox for StoreEngine<B> {
    async fn sync_webhook_endpoints(
        &self,
        subscriptions: &[WebhookSubscription],
    ) -> StoreResult<()> {
        let wanted: BTreeMap<Scope, &WebhookSubscription> = subscriptions
            .iter()
            .map(|s| (scope(&s.tenant_id, &s.endpoint_id), s))
            .collect();
        self.write(|state, cx| {
            let gone: Vec<Scope> = state
                .webhook_endpoints
                .keys()
                .filter(|key| !wanted.contains_key(*key))
                .cloned()
                .collect();
            for key in gone {
                state.webhook_endpoints.remove(&key);
                cx.record(JournalEntry::WebhookEndpoint {
                    tenant_id: key.0.clone(),
                    endpoint_id: key.1.clone(),
                    endpoint: None,
                });
                let deliveries: Vec<u64> = state
                    .webhook_deliveries
                    .values()
                    .filter(|d| d.tenant_id == key.0 && d.endpoint_id == key.1)
                    .map(|d| d.position)
                    .collect();
                for position in deliveries {
                    state.delete_delivery(cx, position);
                }
            }
            for (key, subscription) in wanted {
                let endpoint = match state.webhook_endpoints.get(&key) {
                    Some(kept) if kept.event_types == subscription.event_types => continue,
                    Some(kept) => WebhookEndpoint {
                        event_types: subscription.event_types.clone(),
                        ..kept.clone()
                    },
                    None => WebhookEndpoint {
                        tenant_id: key.0,
                        endpoint_id: key.1,
                        event_types: subscription.event_types.clone(),
                        disabled_at_ms: None,
                        disabled_reason: None,
                        failing_since_ms: None,
                    },
                };
                state.put_endpoint(cx, endpoint);
            }
            Ok(())
        })
    }

    async fn list_webhook_endpoints(&self) -> StoreResult<Vec<WebhookEndpoint>> {
        self.read(|state, _| Ok(state.webhook_endpoints.values().cloned().collect()))
    }

    async fn set_webhook_endpoint_enabled(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        enabled: bool,
        reason: &str,
    ) -> StoreResult<Option<bool>> {
        self.write(|state, cx| {
            let Some(endpoint) = state.webhook_endpoints.get(&scope(tenant_id, endpoint_id)) else {
                return Ok(None);
            };
            if endpoint.disabled_at_ms.is_none() == enabled {
                return Ok(Some(false));
            }
            let mut endpoint = endpoint.clone();
            if enabled {
                endpoint.disabled_at_ms = None;
                endpoint.disabled_reason = None;
                endpoint.failing_since_ms = None;
            } else {
                endpoint.disabled_at_ms = Some(cx.now);
                endpoint.disabled_reason = Some(reason.to_owned());
            }
            state.put_endpoint(cx, endpoint);
            Ok(Some(true))
        })
    }

    async fn claim_webhook_deliveries(
        &self,
        limit: u32,
        claim_ttl_ms: u64,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        // Claims are not journaled: one process holds this store, and a restart voids them.
        self.with_state_mut(|state, now| {
            let mut claimed = Vec::new();
            for position in state.delivery_heads() {
                if claimed.len() >= limit as usize {
                    break;
                }
                let delivery = &state.webhook_deliveries[&position];
                let enabled = state
                    .webhook_endpoints
                    .get(&scope(&delivery.tenant_id, &delivery.endpoint_id))
                    .is_some_and(|e| e.disabled_at_ms.is_none());
                let held = state
                    .webhook_claims
                    .get(&position)
                    .is_some_and(|(_, expires)| *expires > now);
                if !enabled || held || delivery.next_attempt_at_ms > now {
                    continue;
                }
                let claim_id = agent_runtime::ids::nanoid();
                state
                    .webhook_claims
                    .insert(position, (claim_id.clone(), now + claim_ttl_ms));
                claimed.push(ClaimedDelivery {
                    delivery: delivery.clone(),
                    claim_id,
                });
            }
            Ok(claimed)
        })
    }

    async fn record_webhook_attempt(
        &self,
        claim: &ClaimedDelivery,
        outcome: &AttemptOutcome,
        disable_after_ms: u64,
    ) -> StoreResult<bool> {
        let position = claim.delivery.position;
        self.write(|state, cx| {
            let held = state
                .webhook_claims
                .get(&position)
                .is_some_and(|(id, _)| *id == claim.claim_id);
            let Some(delivery) = state.webhook_deliveries.get(&position) else {
                return Ok(false);
            };
            if !held || delivery.status != DeliveryStatus::Pending {
                return Ok(false);
            }
            state.webhook_claims.remove(&position);
            let mut delivery = delivery.clone();
            delivery.attempts += 1;
            let failed = match outcome {
                AttemptOutcome::Delivered => {
                    delivery.status = DeliveryStatus::Delivered;
                    delivery.finished_at_ms = Some(cx.now);
                    delivery.last_error = None;
                    false
                }
                AttemptOutcome::Retry { error, at_ms } => {
                    delivery.next_attempt_at_ms = *at_ms;
                    delivery.last_error = Some(error.clone());
                    true
                }
                AttemptOutcome::GiveUp { error } => {
                    delivery.status = DeliveryStatus::Failed;
                    delivery.finished_at_ms = Some(cx.now);
                    delivery.last_error = Some(error.clone());
                    true
                }
            };
            let key = scope(&delivery.tenant_id, &delivery.endpoint_id);
            state.put_delivery(cx, delivery);
            if let Some(endpoint) = state.webhook_endpoints.get(&key) {
                let mut endpoint = endpoint.clone();
                let before = endpoint.clone();
                failure_clock(&mut endpoint, failed, cx.now, disable_after_ms);
                if endpoint != before {
                    state.put_endpoint(cx, endpoint);
                }
            }
            Ok(true)
        })
    }

    async fn list_webhook_deliveries(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        status: Option<DeliveryStatus>,
        after_position: u64,
        limit: u32,
    ) -> StoreResult<Vec<WebhookDelivery>> {
        self.read(|state, _| {
            Ok(state
                .webhook_deliveries
                .range(after_position + 1..)
                .map(|(_, d)| d)
                .filter(|d| d.tenant_id == tenant_id && d.endpoint_id == endpoint_id)
                .filter(|d| status.is_none_or(|s| d.status == s))
                .take(limit as usize)
                .cloned()
                .collect())
        })
    }

    async fn redeliver_webhook(
        &self,
        tenant_id: &str,
        delivery_id: &str,
    ) -> StoreResult<Option<bool>> {
        self.write(|state, cx| {
            let Some(delivery) = state
                .webhook_deliveries
                .values()
                .find(|d| d.tenant_id == tenant_id && d.delivery_id == delivery_id)
            else {
                return Ok(None);
            };
            if delivery.status == DeliveryStatus::Pending {
                return Ok(Some(false));
            }
            let mut delivery = delivery.clone();
            delivery.status = DeliveryStatus::Pending;
            delivery.next_attempt_at_ms = 0;
            delivery.finished_at_ms = None;
            state.put_delivery(cx, delivery);
            Ok(Some(true))
        })
    }

    async fn webhook_outbox_stats(&self) -> StoreResult<Vec<WebhookEndpointStats>> {
        self.read(|state, _| {
            let mut stats: BTreeMap<&Scope, WebhookEndpointStats> = state
                .webhook_endpoints
                .iter()
                .map(|(key, endpoint)| {
                    let stats = WebhookEndpointStats {
                        tenant_id: key.0.clone(),
                        endpoint_id: key.1.clone(),
                        disabled: endpoint.disabled_at_ms.is_some(),
                        pending: 0,
                        failed: 0,
                        oldest_pending_at_ms: None,
                    };
                    (key, stats)
                })
                .collect();
            for delivery in state.webhook_deliveries.values() {
                let key = scope(&delivery.tenant_id, &delivery.endpoint_id);
                let Some(stats) = stats.get_mut(&key) else {
                    continue;
                };
                match delivery.status {
                    DeliveryStatus::Pending => {
                        stats.pending += 1;
                        let oldest = stats.oldest_pending_at_ms.get_or_insert(u64::MAX);
                        *oldest = (*oldest).min(delivery.created_at_ms);
                    }
                    DeliveryStatus::Failed => stats.failed += 1,
                    DeliveryStatus::Delivered => {}
                }
            }
            Ok(stats.into_values().collect())
        })
    }

    async fn reap_webhook_deliveries(
        &self,
        finished_before_ms: u64,
        max_pending_per_tenant: u64,
        limit: u32,
    ) -> StoreResult<ReapedDeliveries> {
        self.write(|state, cx| {
            let finished: Vec<u64> = state
                .webhook_deliveries
                .values()
                .filter(|d| d.finished_at_ms.is_some_and(|at| at <= finished_before_ms))
                .take(limit as usize)
                .map(|d| d.position)
                .collect();
            let mut pending: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
            for delivery in state.webhook_deliveries.values().rev() {
                if delivery.status == DeliveryStatus::Pending {
                    pending
                        .entry(&delivery.tenant_id)
                        .or_default()
                        .push(delivery.position);
                }
            }
            // Newest first: a tenant keeps its newest `max_pending_per_tenant`.
            let dropped: Vec<u64> = pending
                .into_values()
                .flat_map(|positions| positions.into_iter().skip(max_pending_per_tenant as usize))
                .take(limit as usize)
                .collect();
            let reaped = ReapedDeliveries {
                finished: finished.len() as u64,
                dropped: dropped.len() as u64,
            };
            for position in finished.into_iter().chain(dropped) {
                state.delete_delivery(cx, position);
            }
            Ok(reaped)
        })
    }
}

/// Moves an endpoint's failure clock after one attempt: a delivered attempt stops it, a failed
/// one starts it, and one that leaves the endpoint failing for `disable_after_ms` disables it.
pub(crate) fn failure_clock(
    endpoint: &mut WebhookEndpoint,
    failed: bool,
    now: u64,
    disable_after_ms: u64,
) {
    if !failed {
        endpoint.failing_since_ms = None;
        return;
    }
    let since = *endpoint.failing_since_ms.get_or_insert(now);
    if endpoint.disabled_at_ms.is_none() && now.saturating_sub(since) >= disable_after_ms {
        endpoint.disabled_at_ms = Some(now);
        endpoint.disabled_reason = Some(format!(
            "every attempt failed for {} s",
            now.saturating_sub(since) / 1000
        ));
    }
}
