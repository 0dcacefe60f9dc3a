//! Typed store errors. The gateway maps them to protocol codes at its boundary; nothing here knows
//! about HTTP or gRPC.

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

    /// A runtime-store failure with a stable code (storage.md §2, §4.1, §4.4, §7.1).
    #[error("{code}: {message}")]
    Runtime {
        code: RuntimeErrorCode,
        message: String,
    },

    /// The backend itself failed (I/O, database). `retry_safe` says whether the caller may retry
    /// the same operation without risk of applying it twice.
    #[error("store backend failure: {message}")]
    Backend { message: String, retry_safe: bool },
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

    /// The stable runtime code, when there is one.
    pub fn runtime_code(&self) -> Option<RuntimeErrorCode> {
        match self {
            StoreError::Runtime { code, .. } => Some(*code),
            _ => None,
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
