//! The delivering loop: claims due deliveries from the store's outbox, attempts each (at most
//! `max_in_flight` at once, `max_in_flight_per_endpoint` per endpoint), and records each outcome
//! under its claim. Any number of processes may run one over the same store: a claim is taken by
//! one of them at a time, and lasts longer than any attempt it covers can take (see
//! [`Dispatcher::claim_ttl`]), so a delivery is never sent by two processes at once. A process
//! that dies mid-attempt leaves its claim to expire; the delivery is then attempted again (at
//! least once, same `webhook-id`).
//!
//! Delivery is off the command path: commands only write the outbox rows (in their own commit),
//! and this loop reads them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runtime::clock::SharedClock;
use agent_runtime::telemetry::{
    SharedTelemetry, WebhookAttemptMetric, WebhookOutboxMetric, WebhookOutcome, best_effort,
};
use agent_runtime_store::outbox::*;
use agent_runtime_store::{Store, StoreResult};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::delivery::{Attempt, Endpoint, RETRY_SCHEDULE, Sender, retry_delay};
use crate::payload::render;

/// One configured endpoint.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    pub tenant_id: String,
    pub endpoint: Endpoint,
    /// Names from [`WEBHOOK_EVENT_TYPES`].
    pub event_types: Vec<String>,
    /// Puts prompts, answers, tool arguments and error texts in the bodies.
    pub include_content: bool,
}

/// How the loop runs; [`DispatchOptions::default`] holds the documented defaults.
#[derive(Clone, Debug)]
pub struct DispatchOptions {
    /// How often the outbox is read when the last read found nothing more to do.
    pub poll_interval: Duration,
    pub max_in_flight: usize,
    pub max_in_flight_per_endpoint: usize,
    /// One attempt's limit (connection, request and answer).
    pub attempt_timeout: Duration,
    /// The waits before each retry; past the last, a delivery has failed for good.
    pub retry_schedule: Vec<Duration>,
    /// An endpoint whose attempts all failed for this long is disabled.
    pub disable_after: Duration,
    /// How long delivered and failed deliveries are kept (for redelivery and inspection).
    pub finished_retention: Duration,
    /// A tenant's pending deliveries beyond this are dropped, oldest first.
    pub max_pending_per_tenant: u64,
    /// How often the outbox is measured for metrics and reaped.
    pub housekeeping_interval: Duration,
}

impl Default for DispatchOptions {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_millis(250),
            max_in_flight: 32,
            max_in_flight_per_endpoint: 8,
            attempt_timeout: Duration::from_secs(10),
            retry_schedule: RETRY_SCHEDULE.to_vec(),
            disable_after: Duration::from_secs(24 * 60 * 60),
            finished_retention: Duration::from_secs(7 * 24 * 60 * 60),
            max_pending_per_tenant: 10_000,
            housekeeping_interval: Duration::from_secs(10),
        }
    }
}

/// Reaps at most this many deliveries of each kind per housekeeping round.
const REAP_BATCH: u32 = 1_000;

/// Records at most this many attempts' outcomes in one store write.
const RECORD_BATCH: usize = 64;

/// An attempt's outcome on its way to the store.
type Outcome = (ClaimedDelivery, AttemptOutcome);

/// Delivers a store's webhooks.
pub struct Dispatcher {
    store: Arc<dyn Store>,
    clock: SharedClock,
    telemetry: SharedTelemetry,
    sender: Sender,
    options: DispatchOptions,
    endpoints: HashMap<(String, String), Configured>,
}

struct Configured {
    config: EndpointConfig,
    slots: Arc<Semaphore>,
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        telemetry: SharedTelemetry,
        endpoints: Vec<EndpointConfig>,
        options: DispatchOptions,
        sender: Sender,
    ) -> Self {
        let endpoints = endpoints
            .into_iter()
            .map(|config| {
                let key = (config.tenant_id.clone(), config.endpoint.id.clone());
                let slots = Arc::new(Semaphore::new(options.max_in_flight_per_endpoint.max(1)));
                (key, Configured { config, slots })
            })
            .collect();
        Self {
            store,
            clock,
            telemetry,
            sender,
            options,
            endpoints,
        }
    }

    /// How long a claim lasts: longer than a claimed delivery can wait for its endpoint's slot
    /// (at most one attempt per `max_in_flight_per_endpoint` other deliveries of this process)
    /// plus its own attempt, with a margin.
    pub fn claim_ttl(&self) -> Duration {
        let o = &self.options;
        let rounds = o
            .max_in_flight
            .div_ceil(o.max_in_flight_per_endpoint.max(1))
            + 1;
        o.attempt_timeout * u32::try_from(rounds).unwrap_or(u32::MAX) + Duration::from_secs(30)
    }

    /// Makes the store's endpoints the configured ones, then delivers until `shutdown`.
    pub async fn start(self, shutdown: CancellationToken) -> StoreResult<JoinHandle<()>> {
        let subscriptions: Vec<WebhookSubscription> = self
            .endpoints
            .values()
            .map(|c| WebhookSubscription {
                tenant_id: c.config.tenant_id.clone(),
                endpoint_id: c.config.endpoint.id.clone(),
                event_types: c.config.event_types.clone(),
            })
            .collect();
        self.store.sync_webhook_endpoints(&subscriptions).await?;
        let dispatcher = Arc::new(self);
        // Outcomes are recorded in batches, one store write each, by one task: it ends once the
        // loop and every attempt have ended and their outcomes are stored.
        let (outcomes, recorded) = mpsc::unbounded_channel();
        let recorder = tokio::spawn(Arc::clone(&dispatcher).record(recorded));
        let run = tokio::spawn(dispatcher.run(shutdown, outcomes));
        Ok(tokio::spawn(async move {
            let _ = run.await;
            let _ = recorder.await;
        }))
    }

    async fn record(self: Arc<Self>, mut outcomes: mpsc::UnboundedReceiver<Outcome>) {
        let disable_after =
            u64::try_from(self.options.disable_after.as_millis()).unwrap_or(u64::MAX);
        while let Some(first) = outcomes.recv().await {
            let mut batch = vec![first];
            while batch.len() < RECORD_BATCH {
                match outcomes.try_recv() {
                    Ok(outcome) => batch.push(outcome),
                    Err(_) => break,
                }
            }
            match self
                .store
                .record_webhook_attempts(&batch, disable_after)
                .await
            {
                Ok(recorded) => {
                    let lost = recorded.iter().filter(|recorded| !**recorded).count();
                    if lost > 0 {
                        tracing::warn!(
                            lost,
                            "webhook claims expired before their attempts were recorded; those deliveries will be attempted again"
                        );
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, attempts = batch.len(), "recording webhook attempts failed; those deliveries will be attempted again")
                }
            }
        }
    }

    async fn run(
        self: Arc<Self>,
        shutdown: CancellationToken,
        outcomes: mpsc::UnboundedSender<Outcome>,
    ) {
        let mut in_flight = JoinSet::new();
        let mut housekept = Instant::now() - self.options.housekeeping_interval;
        'reading: while !shutdown.is_cancelled() {
            if housekept.elapsed() >= self.options.housekeeping_interval {
                self.housekeeping().await;
                housekept = Instant::now();
            }
            let free = self.options.max_in_flight.saturating_sub(in_flight.len());
            let claimed = if free == 0 {
                0
            } else {
                self.claim(free, &mut in_flight, &outcomes).await
            };
            if claimed == free {
                // More may be due: read again once half the slots are free, so that a busy
                // outbox is read in batches, not once per attempt (each read is a query).
                let refill_at = self.options.max_in_flight / 2;
                while in_flight.len() > refill_at {
                    tokio::select! {
                        _ = shutdown.cancelled() => break 'reading,
                        _ = in_flight.join_next() => {}
                    }
                }
                continue;
            }
            // Nothing more is due: read again after the poll interval, reaping the attempts that
            // end meanwhile.
            let pause = tokio::time::sleep(self.options.poll_interval);
            tokio::pin!(pause);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break 'reading,
                    _ = &mut pause => break,
                    Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                }
            }
        }
        // Attempts under way end within their timeout; their outcomes are recorded.
        while in_flight.join_next().await.is_some() {}
    }

    /// Claims up to `free` deliveries and starts an attempt for each; returns how many it claimed.
    async fn claim(
        self: &Arc<Self>,
        free: usize,
        in_flight: &mut JoinSet<()>,
        outcomes: &mpsc::UnboundedSender<Outcome>,
    ) -> usize {
        let ttl_ms = u64::try_from(self.claim_ttl().as_millis()).unwrap_or(u64::MAX);
        let limit = u32::try_from(free).unwrap_or(u32::MAX);
        let claims = match self.store.claim_webhook_deliveries(limit, ttl_ms).await {
            Ok(claims) => claims,
            Err(error) => {
                tracing::warn!(%error, "reading the webhook outbox failed; retrying");
                return 0;
            }
        };
        let count = claims.len();
        for claim in claims {
            in_flight.spawn(Arc::clone(self).deliver(claim, outcomes.clone()));
        }
        count
    }

    async fn deliver(
        self: Arc<Self>,
        claim: ClaimedDelivery,
        outcomes: mpsc::UnboundedSender<Outcome>,
    ) {
        let delivery = &claim.delivery;
        let key = (delivery.tenant_id.clone(), delivery.endpoint_id.clone());
        let Some(configured) = self.endpoints.get(&key) else {
            // Another process's configuration has it; its claim expires and that process (or
            // this one after a configuration change) delivers it.
            tracing::warn!(endpoint = %delivery.endpoint_id, "a webhook delivery names an endpoint this process is not configured with");
            return;
        };
        let Ok(_slot) = Arc::clone(&configured.slots).acquire_owned().await else {
            return;
        };
        let body = render(delivery, configured.config.include_content);
        let started = Instant::now();
        let now_secs = i64::try_from(self.clock.now_ms() / 1000).unwrap_or(i64::MAX);
        let attempt = self
            .sender
            .attempt(
                &configured.config.endpoint,
                &delivery.delivery_id,
                &body,
                now_secs,
            )
            .await;
        let retry = usize::try_from(delivery.attempts).unwrap_or(usize::MAX);
        let (outcome, metric) = match attempt {
            Attempt::Delivered { .. } => (AttemptOutcome::Delivered, WebhookOutcome::Delivered),
            Attempt::Failed { reason, .. } => {
                match retry_delay(&self.options.retry_schedule, retry) {
                    Some(wait) => {
                        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                        let at_ms = self.clock.now_ms().saturating_add(wait_ms);
                        let retry = AttemptOutcome::Retry {
                            error: reason,
                            at_ms,
                        };
                        (retry, WebhookOutcome::Retrying)
                    }
                    None => (
                        AttemptOutcome::GiveUp { error: reason },
                        WebhookOutcome::GaveUp,
                    ),
                }
            }
        };
        best_effort(|| {
            self.telemetry
                .record_webhook_attempt(&WebhookAttemptMetric {
                    tenant_id: &delivery.tenant_id,
                    endpoint_id: &delivery.endpoint_id,
                    event_type: &delivery.event_type,
                    outcome: metric,
                    duration: started.elapsed(),
                })
        });
        // The recorder outlives every attempt (see `start`).
        let _ = outcomes.send((claim, outcome));
    }

    /// Measures the outbox for metrics and reaps it.
    async fn housekeeping(&self) {
        let now = self.clock.now_ms();
        match self.store.webhook_outbox_stats().await {
            Ok(stats) => {
                for endpoint in &stats {
                    let waited = endpoint
                        .oldest_pending_at_ms
                        .map_or(0, |at| now.saturating_sub(at));
                    best_effort(|| {
                        self.telemetry.record_webhook_outbox(&WebhookOutboxMetric {
                            tenant_id: &endpoint.tenant_id,
                            endpoint_id: &endpoint.endpoint_id,
                            pending: endpoint.pending,
                            failed: endpoint.failed,
                            oldest_pending_age: Duration::from_millis(waited),
                            disabled: endpoint.disabled,
                        })
                    });
                }
            }
            Err(error) => tracing::warn!(%error, "measuring the webhook outbox failed"),
        }
        let retention =
            u64::try_from(self.options.finished_retention.as_millis()).unwrap_or(u64::MAX);
        let reaped = self
            .store
            .reap_webhook_deliveries(
                now.saturating_sub(retention),
                self.options.max_pending_per_tenant,
                REAP_BATCH,
            )
            .await;
        match reaped {
            Ok(reaped) if reaped.dropped > 0 => {
                tracing::error!(
                    dropped = reaped.dropped,
                    "webhook deliveries dropped undelivered: a tenant's outbox is full"
                );
                best_effort(|| self.telemetry.record_webhooks_dropped(reaped.dropped));
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "reaping the webhook outbox failed"),
        }
    }
}

#[cfg(test)]
mod tests;
