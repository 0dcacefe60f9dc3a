//! The audit log: a `Telemetry` adapter (docs/protocol.md §10 `writeAudit`) that writes one JSON
//! object per command to a JSON-lines file or to stdout.
//!
//! Each line has `occurredAt`, `tenantId`, `subject`, `commandId`, `commandType`, `sessionId`
//! (when the command names a session), `outcome` and `errorCode` (on errors). Never an input, a
//! prompt, a tool argument or a token: the record it is built from has no such field.
//!
//! The request path only serialises the record and hands the line to a bounded queue; a writer
//! thread does the file I/O. When the queue is full (the disk is slower than the command rate for
//! longer than the queue absorbs), the record is **dropped**: counted in [`AuditLog::dropped`] and
//! reported by a warning (the first drop, then every 1000th), rather than slowing commands down.
//! The file rotates by size: past `max_bytes` it becomes `PATH.1`, older ones shift to `PATH.2` …
//! and only `max_files` of them are kept — the audit log's own retention.

#[cfg(test)]
mod tests;
mod writer;

use agent_runtime::sync::Locked;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use agent_runtime::telemetry::{AuditRecord, Telemetry, TelemetryError};
use serde::Serialize;

use self::writer::Sink;

/// Where audit records go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuditTarget {
    /// Standard output (`path = "-"`), for a log collector; never rotated.
    Stdout,
    /// A JSON-lines file, appended to and rotated by size.
    File(PathBuf),
}

/// `[audit]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditConfig {
    pub target: AuditTarget,
    /// Rotate the file before it would grow past this many bytes. Default 100 MiB.
    pub max_bytes: u64,
    /// Rotated files kept (`PATH.1` … `PATH.N`); 0 keeps none. Default 10.
    pub max_files: usize,
    /// Records waiting for the writer before new ones are dropped. Default 10 000.
    pub queue_capacity: usize,
}

impl AuditConfig {
    pub fn new(target: AuditTarget) -> Self {
        Self {
            target,
            max_bytes: 100 * 1024 * 1024,
            max_files: 10,
            queue_capacity: 10_000,
        }
    }
}

/// The running audit log.
pub struct AuditLog {
    sender: Mutex<Option<SyncSender<String>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    dropped: AtomicU64,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

/// One line of the log, in this field order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Line<'a> {
    occurred_at: &'a str,
    tenant_id: &'a str,
    subject: &'a str,
    command_id: &'a str,
    command_type: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_code: Option<&'static str>,
}

impl AuditLog {
    /// Opens the target now (a file that cannot be opened stops start-up) and starts the writer.
    pub fn start(config: &AuditConfig) -> std::io::Result<Arc<AuditLog>> {
        let sink = Sink::open(config)?;
        let (sender, receiver) = sync_channel::<String>(config.queue_capacity.max(1));
        let writer = std::thread::Builder::new()
            .name("audit-writer".to_owned())
            .spawn(move || writer::run(receiver, sink))?;
        Ok(Arc::new(AuditLog::from_parts(sender, Some(writer))))
    }

    fn from_parts(sender: SyncSender<String>, writer: Option<JoinHandle<()>>) -> AuditLog {
        AuditLog {
            sender: Mutex::new(Some(sender)),
            writer: Mutex::new(writer),
            dropped: AtomicU64::new(0),
        }
    }

    /// Records dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Writes out everything queued and stops the writer (blocking; call at shutdown, off the
    /// async runtime). Records that arrive afterwards are refused.
    pub fn close(&self) {
        let sender = lock(&self.sender).take();
        drop(sender);
        let writer = lock(&self.writer).take();
        if let Some(writer) = writer
            && writer.join().is_err()
        {
            tracing::warn!("the audit writer thread panicked");
        }
    }
}

impl Telemetry for AuditLog {
    fn write_audit(&self, record: &AuditRecord) -> Result<(), TelemetryError> {
        let line = Line {
            occurred_at: &record.occurred_at,
            tenant_id: &record.tenant_id,
            subject: &record.subject,
            command_id: &record.command_id,
            command_type: record.command_type,
            session_id: record.session_id.as_deref(),
            outcome: record.outcome.as_str(),
            error_code: record.error_code.map(|code| code.as_str()),
        };
        let line =
            serde_json::to_string(&line).map_err(|error| TelemetryError(error.to_string()))?;
        let sender = lock(&self.sender);
        let Some(sender) = sender.as_ref() else {
            return Err(TelemetryError("the audit log is closed".to_owned()));
        };
        match sender.try_send(line) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped == 1 || dropped.is_multiple_of(1000) {
                    tracing::warn!(dropped, "audit queue full: audit records dropped");
                }
                Err(TelemetryError("audit queue full".to_owned()))
            }
            Err(TrySendError::Disconnected(_)) => {
                Err(TelemetryError("the audit writer stopped".to_owned()))
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.locked()
}
