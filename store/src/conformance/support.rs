//! Fixtures and assertions shared by the cases: records with fixed shapes, repeated setup steps,
//! and one matcher per error variant so every case checks the exact variant, code and wording.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_runtime::protocol::{EventEnvelope, EventType, JsonObject, SessionStatus};
use agent_runtime::timefmt::format_iso_ms;
use serde_json::Value;

use super::Harness;
use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::model::*;

pub const TENANT: &str = "tenant-a";
pub const OTHER_TENANT: &str = "tenant-b";
pub const SESSION: &str = "session-1";
pub const COMMAND: &str = "command-1";
pub const FINGERPRINT: &str = "fp-1";

/// Upper bound for a condition the store must reach promptly (a live-tail wake-up). Only a
/// deadline: the case passes as soon as the condition holds.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A JSON object from a `json!` literal.
#[track_caller]
pub fn obj(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("fixture is not a JSON object: {other}"),
    }
}

pub fn session_record(tenant_id: &str, session_id: &str, updated_at_ms: u64) -> SessionRecord {
    SessionRecord {
        tenant_id: tenant_id.to_owned(),
        created_by: format!("user-of-{tenant_id}"),
        session_id: session_id.to_owned(),
        status: SessionStatus::Active,
        created_at: format_iso_ms(updated_at_ms),
        updated_at: format_iso_ms(updated_at_ms),
        metadata: Some(obj(serde_json::json!({ "tenant": tenant_id }))),
        profile: None,
    }
}

/// The creation time of [`active_session`] records.
pub const CREATED_AT: &str = "2026-01-01T00:00:00.000Z";

/// An active session of `alice`, created at [`CREATED_AT`] and last updated at `updated_at`.
pub fn active_session(tenant_id: &str, session_id: &str, updated_at: &str) -> SessionRecord {
    SessionRecord {
        tenant_id: tenant_id.to_owned(),
        created_by: "alice".to_owned(),
        session_id: session_id.to_owned(),
        status: SessionStatus::Active,
        created_at: CREATED_AT.to_owned(),
        updated_at: updated_at.to_owned(),
        metadata: None,
        profile: None,
    }
}

/// A `session.stream` event carrying `text`.
pub fn stream_event(session_id: &str, text: &str) -> NewEvent {
    NewEvent {
        session_id: session_id.to_owned(),
        request_id: Some("request-1".to_owned()),
        occurred_at: format_iso_ms(1_767_225_600_000),
        event_type: EventType::SessionStream,
        data: obj(serde_json::json!({ "type": "content", "text": text })),
    }
}

pub fn draft(event_type: &str) -> DurableEventDraft {
    DurableEventDraft {
        event_type: event_type.to_owned(),
        data: obj(serde_json::json!({ "step": event_type })),
        occurred_at: None,
        correlation: Correlation::default(),
    }
}

pub fn drafts(count: usize) -> Vec<DurableEventDraft> {
    (0..count).map(|i| draft(&format!("step_{i}"))).collect()
}

pub fn acquire(lease_id: &str, owner_id: &str, ttl_ms: u64) -> AcquireLease {
    AcquireLease {
        lease_id: lease_id.to_owned(),
        owner_id: owner_id.to_owned(),
        ttl_ms,
    }
}

/// What a claim of a sealed command without a result answers (fail-closed).
pub const SEALED_IN_PROGRESS: CommandClaim = CommandClaim::InProgress {
    retry_after_ms: 1000,
};

pub fn abandoned(reason: &str) -> CommandClaim {
    CommandClaim::Abandoned {
        reason: reason.to_owned(),
    }
}

/// `prefix-N`, unique within the process (lease ids must never repeat across claims).
pub fn unique_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

pub fn sequences(events: &[EventEnvelope]) -> Vec<u64> {
    events.iter().map(|event| event.sequence).collect()
}

/// The target [`Harness::sealed`] seals with.
pub fn sealed_target() -> CommandTarget {
    CommandTarget::new("input.submit", Some("s-1"))
}

/// Repeated setup steps, each unwrapping what the case does not test.
impl Harness {
    /// Claims `command_id` under [`TENANT`] and returns the lease.
    pub async fn claimed(&self, command_id: &str, fingerprint: &str, ttl_ms: u64) -> String {
        let claim = self
            .store
            .claim_command(TENANT, command_id, fingerprint, ttl_ms)
            .await
            .expect("claim");
        match claim {
            CommandClaim::Claimed { lease_id } => lease_id,
            other => panic!("expected a fresh claim of {command_id}, got {other:?}"),
        }
    }

    /// Claims and seals `command_id` under [`TENANT`] with a 30 s claim.
    pub async fn sealed(&self, command_id: &str, fingerprint: &str) -> String {
        let lease_id = self.claimed(command_id, fingerprint, 30_000).await;
        self.store
            .seal_command(TENANT, command_id, &lease_id, &sealed_target())
            .await
            .expect("seal");
        lease_id
    }

    pub async fn claim(&self, command_id: &str, fingerprint: &str) -> CommandClaim {
        self.store
            .claim_command(TENANT, command_id, fingerprint, 30_000)
            .await
            .expect("claim")
    }

    /// Appends `count` unkeyed stream events to `session_id` under [`TENANT`].
    pub async fn append(&self, session_id: &str, count: usize) -> Vec<EventEnvelope> {
        let mut appended = Vec::with_capacity(count);
        for i in 0..count {
            let event = stream_event(session_id, &format!("event {i}"));
            let stored = self
                .store
                .append_event(TENANT, event, None)
                .await
                .expect("append event");
            appended.push(stored);
        }
        appended
    }

    pub async fn read_all(&self, session_id: &str) -> Vec<EventEnvelope> {
        self.store
            .read_events(TENANT, session_id, 0, MAX_EVENT_PAGE)
            .await
            .expect("read events")
            .events
    }

    pub async fn acquire_lease(
        &self,
        session_id: &str,
        lease_id: &str,
        owner_id: &str,
        ttl_ms: u64,
    ) -> ExecutionLease {
        self.store
            .acquire_execution_lease(TENANT, session_id, acquire(lease_id, owner_id, ttl_ms))
            .await
            .expect("acquire execution lease")
    }
}

#[track_caller]
pub fn expect_err<T: Debug>(result: StoreResult<T>) -> StoreError {
    match result {
        Ok(value) => panic!("expected an error, got Ok({value:?})"),
        Err(error) => error,
    }
}

/// A `Runtime` error with `code`; returns its message.
#[track_caller]
pub fn expect_runtime<T: Debug>(result: StoreResult<T>, code: RuntimeErrorCode) -> String {
    match expect_err(result) {
        StoreError::Runtime { code: got, message } if got == code => message,
        other => panic!("expected {code}, got {other:?}"),
    }
}

/// `InvalidArgument` whose message contains `needle`.
#[track_caller]
pub fn expect_invalid<T: Debug>(result: StoreResult<T>, needle: &str) {
    match expect_err(result) {
        StoreError::InvalidArgument(message) if message.contains(needle) => {}
        other => panic!("expected InvalidArgument containing {needle:?}, got {other:?}"),
    }
}

/// `StaleCursor` whose message contains `needle` ("stale", "ahead").
#[track_caller]
pub fn expect_stale<T: Debug>(result: StoreResult<T>, needle: &str) {
    match expect_err(result) {
        StoreError::StaleCursor(message) if message.contains(needle) => {}
        other => panic!("expected StaleCursor containing {needle:?}, got {other:?}"),
    }
}

/// `CommandLeaseLost` saying the lease "is no longer active".
#[track_caller]
pub fn expect_command_lease_lost<T: Debug>(result: StoreResult<T>) {
    match expect_err(result) {
        StoreError::CommandLeaseLost(message) if message.contains("no longer active") => {}
        other => panic!("expected CommandLeaseLost (no longer active), got {other:?}"),
    }
}
