//! The webhook outbox of the memory engine (docs/storage.md §11): deliveries enqueued under the
//! state lock by the change that causes them, so they are journaled on the same line.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::state::{Scope, State, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::StoreResult;
use crate::journal::{CommandLease, JournalEntry};
use crate::outbox::*;
use crate::ports::WebhookOutbox;

/// The deliveries of the outbox, by position, with what claims and reaps look up: the pending
/// queue of each `(tenant, endpoint, session)` and the finished deliveries by when they finished.
/// The indexes are derived (rebuilt by replay), never journaled.
#[derive(Debug, Default)]
pub(crate) struct Deliveries {
    by_position: BTreeMap<u64, WebhookDelivery>,
    pending: BTreeMap<(String, String, String), BTreeSet<u64>>,
    finished: BTreeSet<(u64, u64)>,
    /// The highest position handed out, so a reaped position is never reused.
    used: u64,
}

fn queue_of(delivery: &WebhookDelivery) -> (String, String, String) {
    (
        delivery.tenant_id.clone(),
        delivery.endpoint_id.clone(),
        delivery.session_id.clone(),
    )
}

impl Deliveries {
    pub fn is_empty(&self) -> bool {
        self.by_position.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_position.len()
    }

    pub fn all(&self) -> impl Iterator<Item = &WebhookDelivery> {
        self.by_position.values()
    }

    fn get(&self, position: u64) -> Option<&WebhookDelivery> {
        self.by_position.get(&position)
    }

    fn next_position(&self) -> u64 {
        self.used + 1
    }

    /// Stores `delivery` (new, or replacing the one at its position).
    pub fn put(&mut self, delivery: WebhookDelivery) {
        self.remove(delivery.position);
        self.used = self.used.max(delivery.position);
        self.index(&delivery);
        self.by_position.insert(delivery.position, delivery);
    }

    pub fn remove(&mut self, position: u64) {
        if let Some(old) = self.by_position.remove(&position) {
            self.unindex(&old);
        }
    }

    /// Applies an attempt's outcome (or a redelivery) to the delivery it names.
    pub fn apply_attempt(&mut self, state: &DeliveryState) {
        if let Some(mut delivery) = self.by_position.remove(&state.position) {
            self.unindex(&delivery);
            state.apply_to(&mut delivery);
            self.index(&delivery);
            self.by_position.insert(state.position, delivery);
        }
    }

    /// Keeps only the deliveries `keep` says so of.
    pub fn retain(&mut self, keep: impl Fn(&WebhookDelivery) -> bool) {
        let gone: Vec<u64> = self
            .all()
            .filter(|d| !keep(d))
            .map(|d| d.position)
            .collect();
        for position in gone {
            self.remove(position);
        }
    }

    /// The deliveries after `position`, in order.
    fn after(&self, position: u64) -> impl Iterator<Item = &WebhookDelivery> {
        self.by_position.range(position + 1..).map(|(_, d)| d)
    }

    /// At most `limit` deliveries that finished at or before `at`, oldest first.
    fn finished_before(&self, at: u64, limit: usize) -> Vec<u64> {
        self.finished
            .iter()
            .take_while(|(finished, _)| *finished <= at)
            .take(limit)
            .map(|(_, position)| *position)
            .collect()
    }

    /// At most `limit` pending deliveries of tenants with more than `cap`: each such tenant's
    /// oldest beyond its newest `cap`.
    fn pending_over(&self, cap: u64, limit: usize) -> Vec<u64> {
        let mut per_tenant: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for ((tenant, _, _), queue) in &self.pending {
            per_tenant.entry(tenant).or_default().extend(queue);
        }
        let mut over = Vec::new();
        for mut positions in per_tenant.into_values() {
            let excess = positions.len().saturating_sub(cap as usize);
            positions.sort_unstable();
            over.extend(positions.into_iter().take(excess));
        }
        over.truncate(limit);
        over
    }

    /// The head of each pending queue: the oldest pending delivery of each
    /// `(tenant, endpoint, session)`, oldest first.
    fn heads(&self) -> Vec<u64> {
        let mut heads: Vec<u64> = self
            .pending
            .values()
            .filter_map(|queue| queue.first().copied())
            .collect();
        heads.sort_unstable();
        heads
    }

    fn index(&mut self, delivery: &WebhookDelivery) {
        match delivery.status {
            DeliveryStatus::Pending => {
                self.pending
                    .entry(queue_of(delivery))
                    .or_default()
                    .insert(delivery.position);
            }
            DeliveryStatus::Delivered | DeliveryStatus::Failed => {
                let at = delivery.finished_at_ms.unwrap_or(0);
                self.finished.insert((at, delivery.position));
            }
        }
    }

    fn unindex(&mut self, delivery: &WebhookDelivery) {
        let queue = queue_of(delivery);
        if let Some(positions) = self.pending.get_mut(&queue) {
            positions.remove(&delivery.position);
            if positions.is_empty() {
                self.pending.remove(&queue);
            }
        }
        let at = delivery.finished_at_ms.unwrap_or(0);
        self.finished.remove(&(at, delivery.position));
    }
}

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
            let position = self.webhook_deliveries.next_position();
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

    fn put_delivery(&mut self, cx: &mut Ctx<'_>, delivery: WebhookDelivery) {
        cx.record(JournalEntry::WebhookDelivery {
            position: delivery.position,
            delivery: Some(Box::new(delivery.clone())),
        });
        self.webhook_deliveries.put(delivery);
    }

    /// Journals and applies a change of a delivery's state (an attempt, a redelivery).
    fn update_delivery(&mut self, cx: &mut Ctx<'_>, attempt: DeliveryState) {
        self.webhook_deliveries.apply_attempt(&attempt);
        cx.record(JournalEntry::WebhookAttempt { attempt });
    }

    fn delete_delivery(&mut self, cx: &mut Ctx<'_>, position: u64) {
        if self.webhook_deliveries.get(position).is_some() {
            self.webhook_deliveries.remove(position);
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
}

impl State {
    /// One attempt's outcome under its claim; whether it was recorded.
    fn record_attempt(
        &mut self,
        cx: &mut Ctx<'_>,
        claim: &ClaimedDelivery,
        outcome: &AttemptOutcome,
        disable_after_ms: u64,
    ) -> bool {
        let position = claim.delivery.position;
        let held = self
            .webhook_claims
            .get(&position)
            .is_some_and(|(id, _)| *id == claim.claim_id);
        let Some(delivery) = self.webhook_deliveries.get(position) else {
            return false;
        };
        if !held || delivery.status != DeliveryStatus::Pending {
            return false;
        }
        self.webhook_claims.remove(&position);
        let key = scope(&delivery.tenant_id, &delivery.endpoint_id);
        let (attempt, failed) = outcome.applied_to(DeliveryState::of(delivery), cx.now);
        self.update_delivery(cx, attempt);
        if let Some(endpoint) = self.webhook_endpoints.get(&key) {
            let mut endpoint = endpoint.clone();
            let before = endpoint.clone();
            failure_clock(&mut endpoint, failed, cx.now, disable_after_ms);
            if endpoint != before {
                self.put_endpoint(cx, endpoint);
            }
        }
        true
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
                    .all()
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
            for position in state.webhook_deliveries.heads() {
                if claimed.len() >= limit as usize {
                    break;
                }
                let Some(delivery) = state.webhook_deliveries.get(position) else {
                    continue;
                };
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

    async fn record_webhook_attempts(
        &self,
        attempts: &[(ClaimedDelivery, AttemptOutcome)],
        disable_after_ms: u64,
    ) -> StoreResult<Vec<bool>> {
        self.write(|state, cx| {
            Ok(attempts
                .iter()
                .map(|(claim, outcome)| state.record_attempt(cx, claim, outcome, disable_after_ms))
                .collect())
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
                .after(after_position)
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
                .all()
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
            state.update_delivery(cx, DeliveryState::of(&delivery));
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
            for delivery in state.webhook_deliveries.all() {
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
            let deliveries = &state.webhook_deliveries;
            let finished = deliveries.finished_before(finished_before_ms, limit as usize);
            let dropped = deliveries.pending_over(max_pending_per_tenant, limit as usize);
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
