//! The telemetry port (protocol.md §10). Every call is best effort: an error or even a panic in a
//! telemetry adapter never changes a command result or event delivery.
//!
//! Records carry ids, types and outcomes only — never inputs, prompts, tool arguments or tokens.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::protocol::{ErrorCode, EventType};

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
}

/// The default: records nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTelemetry;

impl Telemetry for NoTelemetry {}

pub type SharedTelemetry = Arc<dyn Telemetry>;

/// Several adapters behind the one port: every call reaches each of them, each best effort (one
/// failing or panicking adapter does not keep the record from the others).
#[derive(Debug, Default, Clone)]
pub struct Fanout(pub Vec<SharedTelemetry>);

impl Telemetry for Fanout {
    fn record_command(&self, metric: &CommandMetric) -> Result<(), TelemetryError> {
        for adapter in &self.0 {
            best_effort(|| adapter.record_command(metric));
        }
        Ok(())
    }
    fn record_event(&self, metric: &EventMetric) -> Result<(), TelemetryError> {
        for adapter in &self.0 {
            best_effort(|| adapter.record_event(metric));
        }
        Ok(())
    }
    fn write_audit(&self, record: &AuditRecord) -> Result<(), TelemetryError> {
        for adapter in &self.0 {
            best_effort(|| adapter.write_audit(record));
        }
        Ok(())
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
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Telemetry for Recorder {
        fn write_audit(&self, record: &AuditRecord) -> Result<(), TelemetryError> {
            self.0.lock().unwrap().push(record.command_id.clone());
            Ok(())
        }
    }

    #[derive(Debug)]
    struct Panicking;

    impl Telemetry for Panicking {
        fn write_audit(&self, _: &AuditRecord) -> Result<(), TelemetryError> {
            panic!("adapter bug")
        }
    }

    #[test]
    fn fanout_reaches_every_adapter_even_after_one_panics() {
        let first = Arc::new(Recorder::default());
        let last = Arc::new(Recorder::default());
        let fanout = Fanout(vec![first.clone(), Arc::new(Panicking), last.clone()]);
        let record = AuditRecord {
            occurred_at: "2026-01-01T00:00:00.000Z".to_owned(),
            tenant_id: "t".to_owned(),
            subject: "s".to_owned(),
            command_id: "c-1".to_owned(),
            command_type: "session.list",
            session_id: None,
            outcome: Outcome::Success,
            error_code: None,
        };
        assert!(fanout.write_audit(&record).is_ok());
        assert_eq!(*first.0.lock().unwrap(), vec!["c-1".to_owned()]);
        assert_eq!(*last.0.lock().unwrap(), vec!["c-1".to_owned()]);
    }
}
