//! [`ClientError`]: every failure of the client, in the shape of a protocol error (code, message,
//! status, retryable, retry-after, details) plus the [`ErrorKind`] that says where it came from.
//!
//! No error ever carries the bearer token or a request header: transport errors are built from the
//! HTTP library's error chain with the URL removed, and the base URL may not hold credentials.

use std::error::Error as _;
use std::time::Duration;

use agent_runtime::protocol::{ErrorCode, JsonObject, ProtocolError};

/// Where a [`ClientError`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The server answered with a structured failure (`ok: false`); `retryable` is the body's.
    Server,
    /// The server's answer broke the protocol: not JSON, not the result or event schema, or
    /// `ok: true` with a non-2xx status. Retryable by HTTP status (408, 429, >= 500).
    InvalidResponse,
    /// No answer: connection refused or reset, a body cut off. Always retryable.
    Transport,
    /// Raised by the client itself: an invalid argument (nothing was sent), or a stream check
    /// (session mismatch, non-monotonic sequence, frame too large, premature end).
    Local,
    /// The caller's cancellation token fired.
    Cancelled,
}

/// A failed client call.
///
/// `code` is the protocol code of the failure. Failures that have none of their own (transport
/// errors, cancellation) use `INTERNAL_ERROR`; [`ClientError::kind`] tells them apart.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ClientError {
    pub kind: ErrorKind,
    pub code: ErrorCode,
    pub message: String,
    /// The HTTP status of the answer, or the local status the reference client uses (400 for a bad
    /// argument, 502 for a broken event stream). `None` when there was no answer.
    pub status: Option<u16>,
    /// Whether the same call may succeed if repeated (with the same commandId).
    pub retryable: bool,
    /// How long the server asked to wait before a retry.
    pub retry_after: Option<Duration>,
    pub details: Option<JsonObject>,
}

impl ClientError {
    /// A structured failure the server sent with HTTP `status`. The body's `retryable` decides,
    /// except that `COMMAND_ABANDONED` is never retryable (decision P3: it is terminal, even when
    /// a reference server flags it retryable).
    pub fn from_server(error: ProtocolError, status: u16) -> ClientError {
        let retryable = error.retryable && error.code != ErrorCode::CommandAbandoned;
        ClientError {
            kind: ErrorKind::Server,
            code: error.code,
            message: error.message,
            status: Some(status),
            retryable,
            retry_after: error.retry_after_ms.map(Duration::from_millis),
            details: error.details,
        }
    }

    /// An answer that is not a valid protocol response: `INTERNAL_ERROR`, retryable by status.
    pub fn invalid_response(
        message: impl Into<String>,
        status: u16,
        retry_after: Option<Duration>,
    ) -> ClientError {
        ClientError {
            kind: ErrorKind::InvalidResponse,
            code: ErrorCode::InternalError,
            message: message.into(),
            status: Some(status),
            retryable: retryable_status(status),
            retry_after,
            details: None,
        }
    }

    /// The request got no (complete) answer. `what` names the operation, e.g. "session.create".
    pub fn transport(what: &str, error: &reqwest::Error) -> ClientError {
        ClientError {
            kind: ErrorKind::Transport,
            code: ErrorCode::InternalError,
            message: format!("{what}: {}", describe(error)),
            status: None,
            retryable: true,
            retry_after: None,
            details: None,
        }
    }

    /// A check of the client itself failed, with the protocol error it raises.
    pub fn local(error: ProtocolError) -> ClientError {
        ClientError {
            kind: ErrorKind::Local,
            code: error.code,
            status: Some(error.http_status()),
            retryable: error.retryable,
            message: error.message,
            retry_after: None,
            details: error.details,
        }
    }

    /// An invalid argument: `INVALID_COMMAND` 400, nothing was sent.
    pub fn invalid_argument(message: impl Into<String>) -> ClientError {
        ClientError::local(ProtocolError::new(ErrorCode::InvalidCommand, message))
    }

    /// The caller cancelled the call.
    pub fn cancelled() -> ClientError {
        ClientError {
            kind: ErrorKind::Cancelled,
            code: ErrorCode::InternalError,
            message: "The call was cancelled".to_owned(),
            status: None,
            retryable: false,
            retry_after: None,
            details: None,
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.kind == ErrorKind::Cancelled
    }

    /// Replaces `retryable` (event-stream rules differ from command rules for frame errors).
    pub(crate) fn with_retryable(mut self, retryable: bool) -> ClientError {
        self.retryable = retryable;
        self
    }

    pub(crate) fn with_status(mut self, status: u16) -> ClientError {
        self.status = Some(status);
        self
    }

    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> ClientError {
        self.kind = kind;
        self
    }
}

/// Statuses whose unstructured answers are worth retrying (docs/protocol.md §11.3).
pub fn retryable_status(status: u16) -> bool {
    status == 408 || status == 429 || status >= 500
}

/// The error chain of a transport failure, without the URL (which is ours, but keeps messages
/// short) and never with headers.
fn describe(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        "the request timed out".to_owned()
    } else if error.is_connect() {
        "could not connect".to_owned()
    } else if error.is_body() || error.is_decode() {
        "the response body was cut off".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
