//! The metrics adapter of the telemetry port: every observation becomes a Prometheus series named
//! `agent_runtime_*`. Labels are command types, outcomes, error codes, event types, reasons,
//! store operations and provider names — closed sets — and the tenant id only when
//! `include_tenant` is set (the reference's `includeTenantAttributes`). Never session ids,
//! subjects, prompts or other free text.

use agent_runtime::telemetry::{
    AdmissionRejection, ClaimMetric, ClaimOutcome, CommandMetric, DeliveryMetric, EventMetric,
    LimitMetric, ProviderCallMetric, SseConnectionMetric, StoreCallMetric, Telemetry,
    TelemetryError, WebhookAttemptMetric, WebhookOutboxMetric,
};

use crate::registry::{Counter, Format, Gauge, Histogram, Registry};

/// Command latency buckets, in seconds.
const COMMAND_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Store call buckets, in seconds.
const STORE_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
/// Live-tail lag buckets, in seconds.
const LAG_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Model call buckets, in seconds (a streamed answer takes a while).
const PROVIDER_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Every metric of a process. The gateway's and the executor's series live in one registry: a
/// cluster process simply never touches the other part's series.
pub struct PrometheusTelemetry {
    registry: Registry,
    include_tenant: bool,
    commands: Counter,
    command_duration: Histogram,
    admission_rejections: Counter,
    replays: Counter,
    claim_refusals: Counter,
    sse_connections: Gauge,
    sse_connections_total: Counter,
    limit_hits: Counter,
    events_appended: Counter,
    events_delivered: Counter,
    live_tail_lag: Histogram,
    store_calls: Histogram,
    fenced_writes: Counter,
    provider_requests: Histogram,
    provider_errors: Counter,
    webhook_attempts: Histogram,
    webhooks_pending: Gauge,
    webhooks_failed: Gauge,
    webhook_oldest_pending: Gauge,
    webhook_endpoint_disabled: Gauge,
    webhooks_dropped: Counter,
}

impl std::fmt::Debug for PrometheusTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusTelemetry")
            .field("include_tenant", &self.include_tenant)
            .finish_non_exhaustive()
    }
}

/// Label names, with `tenant` appended when tenants are included.
fn names(base: &[&'static str], include_tenant: bool) -> Vec<&'static str> {
    let mut names = base.to_vec();
    if include_tenant {
        names.push("tenant");
    }
    names
}

impl PrometheusTelemetry {
    /// `service` names the process kind in `agent_runtime_info` (`serve`, `gateway`, `executor`).
    /// Stays whole: the registration of every metric family, one after another.
    pub fn new(service: &'static str, include_tenant: bool) -> Self {
        let registry = Registry::default();
        let t = |base: &[&'static str]| names(base, include_tenant);
        let info = registry.gauge(
            "agent_runtime_info",
            "Always 1; the labels say which process and version this is",
            &["service", "version"],
        );
        info.add(&[service, env!("CARGO_PKG_VERSION")], 1);
        Self {
            commands: registry.counter(
                "agent_runtime_commands",
                "Commands executed (after the idempotency claim), by type, outcome and error code",
                &t(&["type", "outcome", "code"]),
            ),
            command_duration: registry.histogram(
                "agent_runtime_command_duration_seconds",
                "Command latency from after the claim to the result, by type and outcome",
                &t(&["type", "outcome"]),
                COMMAND_BUCKETS,
            ),
            admission_rejections: registry.counter(
                "agent_runtime_admission_rejections",
                "Commands refused by per-tenant admission control, by reason",
                &t(&["reason"]),
            ),
            replays: registry.counter(
                "agent_runtime_idempotent_replays",
                "Commands answered with their stored result (same commandId and fingerprint)",
                &t(&["type"]),
            ),
            claim_refusals: registry.counter(
                "agent_runtime_command_claim_refusals",
                "Commands refused at the claim: COMMAND_CONFLICT, COMMAND_IN_PROGRESS, COMMAND_ABANDONED",
                &t(&["type", "code"]),
            ),
            sse_connections: registry.gauge(
                "agent_runtime_sse_connections_open",
                "SSE event streams open now",
                &[],
            ),
            sse_connections_total: registry.counter(
                "agent_runtime_sse_connections",
                "SSE event streams opened",
                &t(&[]),
            ),
            limit_hits: registry.counter(
                "agent_runtime_limit_hits",
                "Requests and connections stopped by a protective limit (timeouts, caps, slow SSE readers), by limit",
                &["limit"],
            ),
            events_appended: registry.counter(
                "agent_runtime_events_appended",
                "Session events appended to the store by this process, by event type",
                &t(&["type"]),
            ),
            events_delivered: registry.counter(
                "agent_runtime_events_delivered",
                "Session events written to SSE connections, by event type",
                &t(&["type"]),
            ),
            live_tail_lag: registry.histogram(
                "agent_runtime_live_tail_lag_seconds",
                "From an event's occurredAt to its write on an SSE connection that was open when it was appended",
                &[],
                LAG_BUCKETS,
            ),
            store_calls: registry.histogram(
                "agent_runtime_store_call_duration_seconds",
                "Store port calls, by operation and outcome",
                &["operation", "outcome"],
                STORE_BUCKETS,
            ),
            fenced_writes: registry.counter(
                "agent_runtime_store_fenced_writes",
                "Store writes refused because this process's execution lease of the session was no longer current (a stale fence: another executor took the session over), by operation",
                &["operation"],
            ),
            provider_requests: registry.histogram(
                "agent_runtime_provider_request_duration_seconds",
                "Model calls (with their retries), by provider and outcome",
                &["provider", "outcome"],
                PROVIDER_BUCKETS,
            ),
            provider_errors: registry.counter(
                "agent_runtime_provider_errors",
                "Failed model calls, by provider and stable error code",
                &["provider", "code"],
            ),
            webhook_attempts: registry.histogram(
                "agent_runtime_webhook_attempt_duration_seconds",
                "Webhook delivery attempts, by endpoint, event type and outcome (delivered, retrying, gave_up)",
                &t(&["endpoint", "event_type", "outcome"]),
                PROVIDER_BUCKETS,
            ),
            webhooks_pending: registry.gauge(
                "agent_runtime_webhooks_pending",
                "Webhook deliveries waiting in the outbox, by endpoint (as last read by this process)",
                &t(&["endpoint"]),
            ),
            webhooks_failed: registry.gauge(
                "agent_runtime_webhooks_failed",
                "Webhook deliveries that failed for good and wait for an operator's redelivery, by endpoint",
                &t(&["endpoint"]),
            ),
            webhook_oldest_pending: registry.gauge(
                "agent_runtime_webhook_oldest_pending_seconds",
                "How long the oldest pending webhook delivery has waited, by endpoint (0 when none waits)",
                &t(&["endpoint"]),
            ),
            webhook_endpoint_disabled: registry.gauge(
                "agent_runtime_webhook_endpoint_disabled",
                "1 while a webhook endpoint is disabled (after sustained failure, or by an operator)",
                &t(&["endpoint"]),
            ),
            webhooks_dropped: registry.counter(
                "agent_runtime_webhooks_dropped",
                "Pending webhook deliveries dropped undelivered because their tenant's outbox was full",
                &[],
            ),
            registry,
            include_tenant,
        }
    }

    /// The registry, for gauges sampled at scrape time (loaded sessions, held leases).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The exposition in `format`.
    pub fn render(&self, format: Format) -> String {
        self.registry.render(format)
    }

    /// `labels` plus the tenant when tenants are included.
    fn with_tenant<'a>(&self, labels: &[&'a str], tenant_id: &'a str) -> Vec<&'a str> {
        let mut labels = labels.to_vec();
        if self.include_tenant {
            labels.push(tenant_id);
        }
        labels
    }
}

fn outcome(ok: bool) -> &'static str {
    if ok { "success" } else { "error" }
}

impl Telemetry for PrometheusTelemetry {
    fn record_command(&self, metric: &CommandMetric) -> Result<(), TelemetryError> {
        let code = metric.error_code.map(|code| code.as_str()).unwrap_or("");
        let kind = metric.outcome.as_str();
        let tenant = metric.tenant_id.as_str();
        self.commands
            .inc(&self.with_tenant(&[metric.command_type, kind, code], tenant));
        self.command_duration.observe(
            &self.with_tenant(&[metric.command_type, kind], tenant),
            metric.duration_ms as f64 / 1000.0,
        );
        Ok(())
    }

    fn record_event(&self, metric: &EventMetric) -> Result<(), TelemetryError> {
        let labels = self.with_tenant(&[metric.event_type.as_str()], &metric.tenant_id);
        self.events_appended.inc(&labels);
        Ok(())
    }

    fn record_claim(&self, metric: &ClaimMetric<'_>) -> Result<(), TelemetryError> {
        match metric.outcome {
            ClaimOutcome::Replayed => self
                .replays
                .inc(&self.with_tenant(&[metric.command_type], metric.tenant_id)),
            ClaimOutcome::Refused(code) => self
                .claim_refusals
                .inc(&self.with_tenant(&[metric.command_type, code.as_str()], metric.tenant_id)),
        }
        Ok(())
    }

    fn record_admission_rejection(
        &self,
        metric: &AdmissionRejection<'_>,
    ) -> Result<(), TelemetryError> {
        let labels = self.with_tenant(&[metric.reason.as_str()], metric.tenant_id);
        self.admission_rejections.inc(&labels);
        Ok(())
    }

    fn record_sse_connection(
        &self,
        metric: &SseConnectionMetric<'_>,
    ) -> Result<(), TelemetryError> {
        if metric.opened {
            self.sse_connections.add(&[], 1);
            self.sse_connections_total
                .inc(&self.with_tenant(&[], metric.tenant_id));
        } else {
            self.sse_connections.add(&[], -1);
        }
        Ok(())
    }

    fn record_limit(&self, metric: &LimitMetric) -> Result<(), TelemetryError> {
        self.limit_hits.inc(&[metric.limit.as_str()]);
        Ok(())
    }

    fn record_delivery(&self, metric: &DeliveryMetric<'_>) -> Result<(), TelemetryError> {
        let labels = self.with_tenant(&[metric.event_type.as_str()], metric.tenant_id);
        self.events_delivered.inc(&labels);
        if let Some(lag) = metric.live_lag {
            self.live_tail_lag.observe(&[], lag.as_secs_f64());
        }
        Ok(())
    }

    fn record_webhook_attempt(
        &self,
        metric: &WebhookAttemptMetric<'_>,
    ) -> Result<(), TelemetryError> {
        let base = [
            metric.endpoint_id,
            metric.event_type,
            metric.outcome.as_str(),
        ];
        self.webhook_attempts.observe(
            &self.with_tenant(&base, metric.tenant_id),
            metric.duration.as_secs_f64(),
        );
        Ok(())
    }

    fn record_webhook_outbox(
        &self,
        metric: &WebhookOutboxMetric<'_>,
    ) -> Result<(), TelemetryError> {
        let labels = self.with_tenant(&[metric.endpoint_id], metric.tenant_id);
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.webhooks_pending.set(&labels, count(metric.pending));
        self.webhooks_failed.set(&labels, count(metric.failed));
        self.webhook_oldest_pending
            .set(&labels, count(metric.oldest_pending_age.as_secs()));
        self.webhook_endpoint_disabled
            .set(&labels, i64::from(metric.disabled));
        Ok(())
    }

    fn record_webhooks_dropped(&self, count: u64) -> Result<(), TelemetryError> {
        self.webhooks_dropped.add(&[], count);
        Ok(())
    }

    fn record_store_call(&self, metric: &StoreCallMetric) -> Result<(), TelemetryError> {
        self.store_calls.observe(
            &[metric.operation, outcome(metric.ok)],
            metric.duration.as_secs_f64(),
        );
        if metric.fenced_off > 0 {
            self.fenced_writes
                .add(&[metric.operation], metric.fenced_off as u64);
        }
        Ok(())
    }

    fn record_provider_call(&self, metric: &ProviderCallMetric<'_>) -> Result<(), TelemetryError> {
        let ok = metric.error_code.is_none();
        self.provider_requests.observe(
            &[metric.provider, outcome(ok)],
            metric.duration.as_secs_f64(),
        );
        if let Some(code) = metric.error_code {
            self.provider_errors.inc(&[metric.provider, code]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use agent_runtime::protocol::{ErrorCode, EventType};
    use agent_runtime::telemetry::{AdmissionReason, Outcome};

    use super::*;

    fn command(tenant: &str, error: Option<ErrorCode>) -> CommandMetric {
        CommandMetric {
            command_type: "input.submit",
            tenant_id: tenant.to_owned(),
            subject: "alice@example.com".to_owned(),
            duration_ms: 20,
            outcome: if error.is_some() {
                Outcome::Error
            } else {
                Outcome::Success
            },
            error_code: error,
        }
    }

    #[test]
    fn observations_become_series_without_tenants_or_subjects_by_default() {
        let metrics = PrometheusTelemetry::new("serve", false);
        metrics.record_command(&command("acme", None)).unwrap();
        metrics
            .record_command(&command("acme", Some(ErrorCode::SessionNotFound)))
            .unwrap();
        metrics
            .record_claim(&ClaimMetric {
                tenant_id: "acme",
                command_type: "session.create",
                outcome: ClaimOutcome::Replayed,
            })
            .unwrap();
        metrics
            .record_admission_rejection(&AdmissionRejection {
                tenant_id: "acme",
                command_type: "input.submit",
                reason: AdmissionReason::RateLimited,
            })
            .unwrap();
        for opened in [true, true, false] {
            metrics
                .record_sse_connection(&SseConnectionMetric {
                    tenant_id: "acme",
                    opened,
                })
                .unwrap();
        }
        metrics
            .record_delivery(&DeliveryMetric {
                tenant_id: "acme",
                event_type: EventType::SessionStream,
                live_lag: Some(Duration::from_millis(3)),
            })
            .unwrap();
        metrics
            .record_provider_call(&ProviderCallMetric {
                provider: "openai",
                duration: Duration::from_millis(900),
                error_code: Some("PROVIDER_AUTH_FAILED"),
            })
            .unwrap();
        for fenced_off in [1, 0, 2] {
            metrics
                .record_store_call(&StoreCallMetric {
                    operation: "renew_session_leases",
                    duration: Duration::from_millis(2),
                    ok: true,
                    fenced_off,
                })
                .unwrap();
        }
        let text = metrics.render(Format::Prometheus);
        for line in [
            "agent_runtime_commands_total{type=\"input.submit\",outcome=\"success\"} 1",
            "agent_runtime_commands_total{type=\"input.submit\",outcome=\"error\",code=\"SESSION_NOT_FOUND\"} 1",
            "agent_runtime_command_duration_seconds_count{type=\"input.submit\",outcome=\"success\"} 1",
            "agent_runtime_idempotent_replays_total{type=\"session.create\"} 1",
            "agent_runtime_admission_rejections_total{reason=\"rate_limited\"} 1",
            "agent_runtime_sse_connections_open 1",
            "agent_runtime_sse_connections_total 2",
            "agent_runtime_events_delivered_total{type=\"session.stream\"} 1",
            "agent_runtime_live_tail_lag_seconds_count 1",
            "agent_runtime_provider_request_duration_seconds_count{provider=\"openai\",outcome=\"error\"} 1",
            "agent_runtime_provider_errors_total{provider=\"openai\",code=\"PROVIDER_AUTH_FAILED\"} 1",
            "agent_runtime_store_fenced_writes_total{operation=\"renew_session_leases\"} 3",
            "agent_runtime_info{service=\"serve\",version=",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("acme") && !text.contains("alice"), "{text}");
    }

    #[test]
    fn tenants_are_labels_only_when_configured() {
        let metrics = PrometheusTelemetry::new("gateway", true);
        metrics.record_command(&command("acme", None)).unwrap();
        metrics
            .record_event(&EventMetric {
                tenant_id: "acme".to_owned(),
                session_id: "session-secret-id".to_owned(),
                event_type: EventType::SessionClosed,
            })
            .unwrap();
        let text = metrics.render(Format::Prometheus);
        assert!(
            text.contains(
                "agent_runtime_commands_total{type=\"input.submit\",outcome=\"success\",tenant=\"acme\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "agent_runtime_events_appended_total{type=\"session.closed\",tenant=\"acme\"} 1"
            ),
            "{text}"
        );
        assert!(!text.contains("session-secret-id"), "{text}");
    }
}
