//! The webhook outbox's records (docs/storage.md §11): the endpoints an operator subscribed for a
//! tenant, and the deliveries a store writes in the same commit as the change that causes them
//! (an agent event, a request's terminal journal entry, a command's abandonment).
//!
//! Which changes cause which deliveries is decided here for the memory engine and by the same
//! rules in SQL for PostgreSQL (`migrations/0026_webhook_outbox.sql`); the conformance suite holds
//! both to them.

use agent_runtime::protocol::{EventEnvelope, EventType};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::DurableEvent;

/// A request reached its end (`request_completed`, `request_failed` or `request_interrupted` in
/// the durable journal).
pub const REQUEST_COMPLETED: &str = "request.completed";
/// A tool asks for approval (`permission.requested` in the event log).
pub const PERMISSION_REQUESTED: &str = "permission.requested";
/// A session closed (`session.closed` in the event log).
pub const SESSION_CLOSED: &str = "session.closed";
/// A sealed command was abandoned without a result: its effect is unknown and needs
/// reconciliation.
pub const COMMAND_UNCERTAIN: &str = "command.uncertain";

/// Every webhook event type, in documentation order.
pub const WEBHOOK_EVENT_TYPES: [&str; 4] = [
    REQUEST_COMPLETED,
    PERMISSION_REQUESTED,
    SESSION_CLOSED,
    COMMAND_UNCERTAIN,
];

/// The durable journal's terminal entries of a request.
pub const REQUEST_TERMINAL_ENTRIES: [&str; 3] =
    ["request_completed", "request_failed", "request_interrupted"];

/// The webhook event an agent event causes, if any.
pub fn webhook_type_of_event(event: &EventEnvelope) -> Option<&'static str> {
    match event.event_type {
        EventType::PermissionRequested => Some(PERMISSION_REQUESTED),
        EventType::SessionClosed => Some(SESSION_CLOSED),
        EventType::SessionStream => None,
    }
}

/// The webhook event a durable journal entry causes, if any.
pub fn webhook_type_of_durable(event: &DurableEvent) -> Option<&'static str> {
    REQUEST_TERMINAL_ENTRIES
        .contains(&event.event_type.as_str())
        .then_some(REQUEST_COMPLETED)
}

/// An endpoint as configured: who it belongs to and what it wants. Its address and secrets stay
/// in the configuration of the processes that deliver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSubscription {
    pub tenant_id: String,
    pub endpoint_id: String,
    /// Names from [`WEBHOOK_EVENT_TYPES`].
    pub event_types: Vec<String>,
}

/// An endpoint as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookEndpoint {
    pub tenant_id: String,
    pub endpoint_id: String,
    pub event_types: Vec<String>,
    /// When it was disabled (epoch ms); an endpoint gets deliveries only while enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// When its current run of failed attempts began; `None` after a delivered attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since_ms: Option<u64>,
}

impl WebhookEndpoint {
    pub fn wants(&self, event_type: &str) -> bool {
        self.disabled_at_ms.is_none() && self.event_types.iter().any(|t| t == event_type)
    }
}

/// Where a delivery is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not delivered yet; attempted when due.
    Pending,
    /// A receiver answered 2xx.
    Delivered,
    /// Every attempt of the retry schedule failed; an operator may redeliver it.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<DeliveryStatus> {
        [
            DeliveryStatus::Pending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Failed,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

/// One delivery of one webhook event to one endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookDelivery {
    /// The `webhook-id` of every attempt (`msg_` and 32 hex digits): receivers deduplicate by it.
    pub delivery_id: String,
    /// Enqueue order within the store; a session's deliveries go out in this order.
    pub position: u64,
    pub tenant_id: String,
    pub endpoint_id: String,
    /// The session it concerns; empty for a command that named none.
    pub session_id: String,
    pub event_type: String,
    /// What caused it, as it was when enqueued: `{"event": envelope}`, `{"journal": entry}` or
    /// `{"command": {...}}`. Redeliveries render the same body from it.
    pub source: Value,
    /// When it was enqueued, by the store's clock (PostgreSQL: the database's, read by the
    /// trigger that enqueues it).
    pub created_at_ms: u64,
    pub attempts: u32,
    /// When it is next due (epoch ms); 0 means now.
    pub next_attempt_at_ms: u64,
    pub status: DeliveryStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
}

/// What an attempt or a redelivery changes of a delivery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryState {
    pub position: u64,
    pub attempts: u32,
    pub next_attempt_at_ms: u64,
    pub status: DeliveryStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
}

impl DeliveryState {
    pub fn of(delivery: &WebhookDelivery) -> Self {
        Self {
            position: delivery.position,
            attempts: delivery.attempts,
            next_attempt_at_ms: delivery.next_attempt_at_ms,
            status: delivery.status,
            last_error: delivery.last_error.clone(),
            finished_at_ms: delivery.finished_at_ms,
        }
    }

    pub fn apply_to(&self, delivery: &mut WebhookDelivery) {
        delivery.attempts = self.attempts;
        delivery.next_attempt_at_ms = self.next_attempt_at_ms;
        delivery.status = self.status;
        delivery.last_error = self.last_error.clone();
        delivery.finished_at_ms = self.finished_at_ms;
    }
}

/// A new delivery id.
pub fn new_delivery_id() -> String {
    format!("msg_{:032x}", rand::random::<u128>())
}

/// A delivery claimed by one process for one attempt. Another process cannot claim it until the
/// claim expires, and an attempt's outcome is recorded only under the claim that made it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimedDelivery {
    pub delivery: WebhookDelivery,
    pub claim_id: String,
}

/// How one attempt ended, as the delivering process decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    Delivered,
    /// Failed; attempt again at `at_ms` (epoch ms).
    Retry {
        error: String,
        at_ms: u64,
    },
    /// Failed, and the retry schedule is spent: the delivery has failed for good.
    GiveUp {
        error: String,
    },
}

impl AttemptOutcome {
    /// The delivery's state after this attempt at `now`, and whether the attempt failed.
    pub fn applied_to(&self, mut state: DeliveryState, now: u64) -> (DeliveryState, bool) {
        state.attempts += 1;
        let failed = match self {
            AttemptOutcome::Delivered => {
                state.status = DeliveryStatus::Delivered;
                state.finished_at_ms = Some(now);
                state.last_error = None;
                false
            }
            AttemptOutcome::Retry { error, at_ms } => {
                state.next_attempt_at_ms = *at_ms;
                state.last_error = Some(error.clone());
                true
            }
            AttemptOutcome::GiveUp { error } => {
                state.status = DeliveryStatus::Failed;
                state.finished_at_ms = Some(now);
                state.last_error = Some(error.clone());
                true
            }
        };
        (state, failed)
    }
}

/// One endpoint's outbox, for metrics and the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookEndpointStats {
    pub tenant_id: String,
    pub endpoint_id: String,
    pub disabled: bool,
    pub pending: u64,
    pub failed: u64,
    /// When the oldest pending delivery was enqueued (epoch ms).
    pub oldest_pending_at_ms: Option<u64>,
}

/// What a reap of the outbox deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReapedDeliveries {
    /// Delivered or failed deliveries past their retention.
    pub finished: u64,
    /// The oldest pending deliveries of a tenant over its cap: dropped undelivered.
    pub dropped: u64,
}
