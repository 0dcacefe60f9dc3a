//! Operational observations beyond the three methods of docs/protocol.md §10, for the metrics
//! adapter: admission, idempotency, SSE, store and provider calls. Like the §10 records they carry
//! identifiers, types, codes and durations only — never inputs, prompts, tool arguments, tokens or
//! free text.

use std::time::Duration;

use crate::protocol::{ErrorCode, EventType};

/// Why admission control refused a command (docs/protocol.md §8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionReason {
    RateLimited,
    QueueFull,
}

impl AdmissionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionReason::RateLimited => "rate_limited",
            AdmissionReason::QueueFull => "queue_full",
        }
    }
}

/// A command refused by admission control (it is also recorded as a failed command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionRejection<'a> {
    pub tenant_id: &'a str,
    pub command_type: &'static str,
    pub reason: AdmissionReason,
}

/// How a command claim that did not run the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The stored result was returned (an idempotent replay).
    Replayed,
    /// Refused without running: `COMMAND_CONFLICT`, `COMMAND_IN_PROGRESS` or `COMMAND_ABANDONED`.
    Refused(ErrorCode),
}

/// A command answered from the idempotency ledger instead of being executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimMetric<'a> {
    pub tenant_id: &'a str,
    pub command_type: &'static str,
    pub outcome: ClaimOutcome,
}

/// Which of the gateway's protective limits stopped a request or a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    /// A request head did not arrive within `header_read_timeout` (connection closed).
    HeaderTimeout,
    /// A command did not finish within `request_timeout` (a retryable answer was sent).
    RequestTimeout,
    /// A command body over `max_request_bytes` (413).
    BodyTooLarge,
    /// An SSE connection refused by the tenant's cap.
    SseTenantCap,
    /// An SSE connection refused by the process's cap.
    SseProcessCap,
    /// A connection closed because its client stopped reading its response, typically an SSE
    /// stream (`write_timeout`).
    SlowReader,
    /// A request refused with `429` because its client failed authentication too often.
    AuthFailures,
}

impl LimitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::HeaderTimeout => "header_timeout",
            LimitKind::RequestTimeout => "request_timeout",
            LimitKind::BodyTooLarge => "body_too_large",
            LimitKind::SseTenantCap => "sse_tenant_cap",
            LimitKind::SseProcessCap => "sse_process_cap",
            LimitKind::SlowReader => "slow_reader",
            LimitKind::AuthFailures => "auth_failures",
        }
    }
}

/// A limit was hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitMetric {
    pub limit: LimitKind,
}

/// An SSE connection opened or closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SseConnectionMetric<'a> {
    pub tenant_id: &'a str,
    pub opened: bool,
}

/// One event written to an SSE connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliveryMetric<'a> {
    pub tenant_id: &'a str,
    pub event_type: EventType,
    /// From the event's `occurredAt` to the write, for events appended while the connection was
    /// open (the live tail); `None` for replayed history.
    pub live_lag: Option<Duration>,
}

/// One call of a store port method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreCallMetric {
    /// The port method, e.g. `claim_command`.
    pub operation: &'static str,
    pub duration: Duration,
    pub ok: bool,
    /// Writes of this call the store refused because the caller's execution lease is no longer
    /// the session's (a stale fence: another executor took the session over). 0 or 1 for one
    /// write; a batch renewal counts each lost lease.
    pub fenced_off: usize,
}

/// One model call (all of its retries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProviderCallMetric<'a> {
    /// `demo`, `openai` or `anthropic`.
    pub provider: &'a str,
    pub duration: Duration,
    /// The stable provider error code (`PROVIDER_UNAVAILABLE`, …), `None` on success.
    pub error_code: Option<&'static str>,
}

/// How one webhook attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookOutcome {
    Delivered,
    /// Failed; it is retried on the schedule.
    Retrying,
    /// Failed, and the schedule is spent: the delivery failed for good.
    GaveUp,
}

impl WebhookOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookOutcome::Delivered => "delivered",
            WebhookOutcome::Retrying => "retrying",
            WebhookOutcome::GaveUp => "gave_up",
        }
    }
}

/// One attempt to deliver a webhook. Endpoint ids are unique in a deployment's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookAttemptMetric<'a> {
    pub tenant_id: &'a str,
    pub endpoint_id: &'a str,
    pub event_type: &'a str,
    pub outcome: WebhookOutcome,
    pub duration: Duration,
}

/// One endpoint's outbox as last read: what waits, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookOutboxMetric<'a> {
    pub tenant_id: &'a str,
    pub endpoint_id: &'a str,
    pub pending: u64,
    pub failed: u64,
    /// How long the oldest pending delivery has waited; zero when none waits.
    pub oldest_pending_age: Duration,
    pub disabled: bool,
}
