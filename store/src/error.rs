//! Typed store errors, what each proves about the write it failed, and the one mapping to the
//! protocol error a command answers (gateway and executor alike); nothing here knows about HTTP or
//! gRPC.

use agent_runtime::protocol::{ErrorCode, ProtocolError};

/// Errors of every storage port.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// A caller-supplied argument is out of range (the reference's RangeError): bad cursor, bad
    /// page limit, blank ids, bad TTL, session mismatch.
    #[error("{0}")]
    InvalidArgument(String),

    /// The event cursor is older than the retained log ("Event cursor is stale") or ahead of its
    /// head ("Event cursor is ahead of the session head"). Maps to `STALE_CURSOR`.
    #[error("{0}")]
    StaleCursor(String),

    /// A command lease was replaced, completed, released or abandoned
    /// ("Command lease <commandId>/<leaseId> is no longer active").
    #[error("{0}")]
    CommandLeaseLost(String),

    /// The store is not initialised or already closed.
    #[error("{0}")]
    NotOpen(String),

    /// A runtime-store failure with a stable code (docs/storage.md §2, §4.1, §4.4, §7.1).
    #[error("{code}: {message}")]
    Runtime {
        code: RuntimeErrorCode,
        message: String,
    },

    /// The backend itself failed (I/O, database). `retry_safe` says whether the caller may retry
    /// the same operation without risk of applying it twice.
    #[error("store backend failure: {message}")]
    Backend { message: String, retry_safe: bool },

    /// The database aborted the transaction to break a deadlock or a serialization conflict
    /// (PostgreSQL `40P01`, `40001`) before its commit: nothing was written, and running the
    /// whole transaction again is safe.
    #[error("store backend failure: {0}")]
    Conflict(String),
}

impl StoreError {
    pub fn runtime(code: RuntimeErrorCode, message: impl Into<String>) -> Self {
        StoreError::Runtime {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        StoreError::InvalidArgument(message.into())
    }

    /// What the failure proves about the write: exhaustive, never read from a message.
    pub fn write_outcome(&self) -> WriteOutcome {
        match self {
            // Refusals: decided before anything was written, or with the transaction rolled back.
            StoreError::InvalidArgument(_)
            | StoreError::StaleCursor(_)
            | StoreError::CommandLeaseLost(_)
            | StoreError::NotOpen(_)
            | StoreError::Runtime { .. }
            | StoreError::Conflict(_)
            | StoreError::Backend {
                retry_safe: true, ..
            } => WriteOutcome::NotWritten,
            StoreError::Backend {
                retry_safe: false, ..
            } => WriteOutcome::Unknown,
        }
    }

    /// The stable runtime code, when there is one.
    pub fn runtime_code(&self) -> Option<RuntimeErrorCode> {
        match self {
            StoreError::Runtime { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// What a failed store call proves about the write it was asked to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Nothing was written (a refusal, or a failure before the commit).
    NotWritten,
    /// It may have been written: a COMMIT whose reply was lost, a journal write cut short.
    Unknown,
}

/// How much of a command had taken effect when a store call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandProgress {
    /// The failed call was the command's first write (or it writes nothing).
    NothingDone,
    /// An earlier write of the command took effect.
    PartDone,
}

/// The protocol error a command answers for a store failure:
/// - a bad cursor or argument is the caller's (`STALE_CURSOR`, `INVALID_COMMAND`);
/// - a write whose outcome is unknown, or any failure once part of the command took effect, is
///   uncertain: `COMMAND_IN_PROGRESS`, and the gateway keeps the command sealed rather than store
///   a guess (architecture invariant 4);
/// - anything else left nothing done: `INTERNAL_ERROR`, retryable, and the gateway reopens the
///   command so that a retry with the same id runs it.
///
/// The cause goes to the log, never to the client.
pub fn command_error(error: &StoreError, progress: CommandProgress) -> ProtocolError {
    match error {
        StoreError::StaleCursor(message) => return ProtocolError::stale_cursor(message.clone()),
        StoreError::InvalidArgument(message) => {
            return ProtocolError::new(ErrorCode::InvalidCommand, message.clone());
        }
        _ => {}
    }
    tracing::error!(error = %error, ?progress, "store failure");
    match (error.write_outcome(), progress) {
        (WriteOutcome::NotWritten, CommandProgress::NothingDone) => ProtocolError::internal(),
        (WriteOutcome::Unknown, _) | (_, CommandProgress::PartDone) => {
            ProtocolError::command_effect_uncertain()
        }
    }
}

/// Stable codes of runtime-store failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuntimeErrorCode {
    QuotaExceeded,
    InvalidTransaction,
    JournalFailed,
    CorruptJournal,
    Locked,
    LeaseInvalid,
    LeaseConflict,
    LeaseRequired,
    LeaseLost,
    DurableInvalidAppend,
    DurableSequenceConflict,
    DurableInvalidCursor,
    SessionStateConflict,
    SessionRouteNotFound,
    WorkerInvalid,
    WorkerNotFound,
    WorkerUnavailable,
    TranscriptNotFound,
}

impl RuntimeErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeErrorCode::QuotaExceeded => "RUNTIME_STORE_QUOTA_EXCEEDED",
            RuntimeErrorCode::InvalidTransaction => "RUNTIME_STORE_INVALID_TRANSACTION",
            RuntimeErrorCode::JournalFailed => "RUNTIME_STORE_JOURNAL_FAILED",
            RuntimeErrorCode::CorruptJournal => "RUNTIME_STORE_CORRUPT_JOURNAL",
            RuntimeErrorCode::Locked => "RUNTIME_STORE_LOCKED",
            RuntimeErrorCode::LeaseInvalid => "DURABLE_EXECUTION_LEASE_INVALID",
            RuntimeErrorCode::LeaseConflict => "DURABLE_EXECUTION_LEASE_CONFLICT",
            RuntimeErrorCode::LeaseRequired => "DURABLE_EXECUTION_LEASE_REQUIRED",
            RuntimeErrorCode::LeaseLost => "DURABLE_EXECUTION_LEASE_LOST",
            RuntimeErrorCode::DurableInvalidAppend => "DURABLE_EVENT_INVALID_APPEND",
            RuntimeErrorCode::DurableSequenceConflict => "DURABLE_EVENT_SEQUENCE_CONFLICT",
            RuntimeErrorCode::DurableInvalidCursor => "DURABLE_EVENT_INVALID_CURSOR",
            RuntimeErrorCode::SessionStateConflict => "SESSION_STATE_CONFLICT",
            RuntimeErrorCode::SessionRouteNotFound => "SESSION_ROUTE_NOT_FOUND",
            RuntimeErrorCode::WorkerInvalid => "WORKER_INVALID",
            RuntimeErrorCode::WorkerNotFound => "WORKER_NOT_FOUND",
            RuntimeErrorCode::WorkerUnavailable => "WORKER_UNAVAILABLE",
            RuntimeErrorCode::TranscriptNotFound => "TRANSCRIPT_NOT_FOUND",
        }
    }
}

impl std::fmt::Display for RuntimeErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
