//! The telemetry port (docs/protocol.md §10). Every call is best effort: an error or even a panic
//! in a telemetry adapter never changes a command result or event delivery.
//!
//! Records carry ids, types and outcomes only — never inputs, prompts, tool arguments or tokens.
//!
//! Besides the three methods of §10 the port takes operational observations (`observations`)
//! and ended spans (`trace`); every method defaults to doing nothing, so an adapter implements
//! only what it exports.

pub mod observations;
pub mod sampler;
pub mod trace;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::protocol::{ErrorCode, EventType};

pub use self::observations::{
    AdmissionReason, AdmissionRejection, ClaimMetric, ClaimOutcome, DeliveryMetric, LimitKind,
    LimitMetric, ProviderCallMetric, SseConnectionMetric, StoreCallMetric, WebhookAttemptMetric,
    WebhookOutboxMetric, WebhookOutcome,
};
pub use self::sampler::Sampler;
pub use self::trace::{AttributeValue, Span, SpanKind, SpanRecord, SpanStatus, TraceContext};

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Error => "error",
        }
    }
}

/// One executed command (after the idempotency claim; not for replays or conflicts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandMetric {
    pub command_type: &'static str,
    pub tenant_id: String,
    pub subject: String,
    /// From after the claim to the end.
    pub duration_ms: u64,
    pub outcome: Outcome,
    pub error_code: Option<ErrorCode>,
}

/// One appended event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventMetric {
    pub tenant_id: String,
    pub session_id: String,
    pub event_type: EventType,
}

/// Who did what, for the audit log. Never includes input payloads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRecord {
    pub occurred_at: String,
    pub tenant_id: String,
    pub subject: String,
    pub command_id: String,
    pub command_type: &'static str,
    /// Absent for create, list and initialize.
    pub session_id: Option<String>,
    pub outcome: Outcome,
    pub error_code: Option<ErrorCode>,
}

/// A telemetry adapter's own failure; logged at debug level and otherwise ignored.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TelemetryError(pub String);

pub trait Telemetry: Send + Sync + std::fmt::Debug {
    fn record_command(&self, _metric: &CommandMetric) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_event(&self, _metric: &EventMetric) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn write_audit(&self, _record: &AuditRecord) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_claim(&self, _metric: &ClaimMetric<'_>) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_admission_rejection(
        &self,
        _metric: &AdmissionRejection<'_>,
    ) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_sse_connection(
        &self,
        _metric: &SseConnectionMetric<'_>,
    ) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_delivery(&self, _metric: &DeliveryMetric<'_>) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_limit(&self, _metric: &LimitMetric) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_store_call(&self, _metric: &StoreCallMetric) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_provider_call(&self, _metric: &ProviderCallMetric<'_>) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_webhook_attempt(
        &self,
        _metric: &WebhookAttemptMetric<'_>,
    ) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_webhook_outbox(
        &self,
        _metric: &WebhookOutboxMetric<'_>,
    ) -> Result<(), TelemetryError> {
        Ok(())
    }
    /// Pending deliveries dropped undelivered because their tenant's outbox was full.
    fn record_webhooks_dropped(&self, _count: u64) -> Result<(), TelemetryError> {
        Ok(())
    }
    fn record_span(&self, _span: &SpanRecord) -> Result<(), TelemetryError> {
        Ok(())
    }
    /// Whether a span of `trace_id` started under `parent` is recorded (see [`Sampler`]); the
    /// default is the specification's: follow the parent, record new traces.
    fn samples(&self, parent: Option<&TraceContext>, trace_id: &[u8; 16]) -> bool {
        Sampler::default().should_sample(parent, trace_id)
    }
}

/// The default: records nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTelemetry;

impl Telemetry for NoTelemetry {}

pub type SharedTelemetry = Arc<dyn Telemetry>;

/// Several adapters behind one port (metrics, traces, audit). Each call reaches every adapter;
/// one adapter's failure neither stops the others nor reaches the caller. Which spans are
/// recorded at all is the process's one `sampler`.
#[derive(Debug, Default, Clone)]
pub struct Fanout {
    pub adapters: Vec<SharedTelemetry>,
    pub sampler: Sampler,
}

impl Fanout {
    /// The adapters with the default sampler.
    pub fn new(adapters: Vec<SharedTelemetry>) -> Self {
        Self {
            adapters,
            sampler: Sampler::default(),
        }
    }

    fn each(&self, call: impl Fn(&dyn Telemetry) -> Result<(), TelemetryError>) {
        for adapter in &self.adapters {
            best_effort(|| call(adapter.as_ref()));
        }
    }
}

impl Telemetry for Fanout {
    fn record_command(&self, metric: &CommandMetric) -> Result<(), TelemetryError> {
        self.each(|t| t.record_command(metric));
        Ok(())
    }
    fn record_event(&self, metric: &EventMetric) -> Result<(), TelemetryError> {
        self.each(|t| t.record_event(metric));
        Ok(())
    }
    fn write_audit(&self, record: &AuditRecord) -> Result<(), TelemetryError> {
        self.each(|t| t.write_audit(record));
        Ok(())
    }
    fn record_claim(&self, metric: &ClaimMetric<'_>) -> Result<(), TelemetryError> {
        self.each(|t| t.record_claim(metric));
        Ok(())
    }
    fn record_admission_rejection(
        &self,
        metric: &AdmissionRejection<'_>,
    ) -> Result<(), TelemetryError> {
        self.each(|t| t.record_admission_rejection(metric));
        Ok(())
    }
    fn record_sse_connection(
        &self,
        metric: &SseConnectionMetric<'_>,
    ) -> Result<(), TelemetryError> {
        self.each(|t| t.record_sse_connection(metric));
        Ok(())
    }
    fn record_delivery(&self, metric: &DeliveryMetric<'_>) -> Result<(), TelemetryError> {
        self.each(|t| t.record_delivery(metric));
        Ok(())
    }
    fn record_limit(&self, metric: &LimitMetric) -> Result<(), TelemetryError> {
        self.each(|t| t.record_limit(metric));
        Ok(())
    }
    fn record_store_call(&self, metric: &StoreCallMetric) -> Result<(), TelemetryError> {
        self.each(|t| t.record_store_call(metric));
        Ok(())
    }
    fn record_provider_call(&self, metric: &ProviderCallMetric<'_>) -> Result<(), TelemetryError> {
        self.each(|t| t.record_provider_call(metric));
        Ok(())
    }
    fn record_webhook_attempt(
        &self,
        metric: &WebhookAttemptMetric<'_>,
    ) -> Result<(), TelemetryError> {
        self.each(|t| t.record_webhook_attempt(metric));
        Ok(())
    }
    fn record_webhook_outbox(
        &self,
        metric: &WebhookOutboxMetric<'_>,
    ) -> Result<(), TelemetryError> {
        self.each(|t| t.record_webhook_outbox(metric));
        Ok(())
    }
    fn record_webhooks_dropped(&self, count: u64) -> Result<(), TelemetryError> {
        self.each(|t| t.record_webhooks_dropped(count));
        Ok(())
    }
    fn record_span(&self, span: &SpanRecord) -> Result<(), TelemetryError> {
        self.each(|t| t.record_span(span));
        Ok(())
    }
    fn samples(&self, parent: Option<&TraceContext>, trace_id: &[u8; 16]) -> bool {
        self.sampler.should_sample(parent, trace_id)
    }
}

/// Calls a telemetry method, swallowing its errors and panics.
pub fn best_effort(call: impl FnOnce() -> Result<(), TelemetryError>) {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::debug!(error = %error, "telemetry call failed"),
        Err(_) => tracing::debug!("telemetry call panicked"),
    }
}

#[cfg(test)]
mod tests;
