//! Protocol error codes (docs/protocol.md §3) and the error value every failure result carries.
//!
//! [`ErrorCode::http_status`] is the single code → HTTP status table of the project. A few sites
//! answer with another status than their code's (an oversized body is `INVALID_COMMAND` 413, an
//! unknown route `INVALID_COMMAND` 404); those carry the override in [`ProtocolError::status`],
//! which never travels in a body.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::fields;
use super::json::JsonObject;
use super::scope::Scope;

/// Pseudo `commandId`s of failures raised before or outside normal execution (docs/protocol.md
/// §1.3).
pub mod pseudo_command_id {
    /// Authentication failed.
    pub const AUTHENTICATION: &str = "authentication";
    /// Body too large, bad JSON or schema failure: the real commandId is not known.
    pub const INVALID: &str = "invalid";
    /// Errors of the SSE route before streaming starts.
    pub const EVENTS: &str = "events";
    /// Route not found.
    pub const ROUTING: &str = "routing";
    /// A handler failed before it knew the command (a panic caught at the connection).
    pub const INTERNAL: &str = "internal";
}

/// `commandLeaseTtlMs` default: the `retryAfterMs` of an uncertain command outcome.
pub const DEFAULT_COMMAND_LEASE_TTL_MS: u64 = 30_000;

/// `retryAfterMs` of a sealed in-progress claim and of every `OVERLOADED` failure.
pub const OVERLOADED_RETRY_AFTER_MS: u64 = 1_000;

/// `maxRequestBytes` default: 1 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1_048_576;

/// The 15 protocol error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    ProtocolVersionUnsupported,
    InvalidCommand,
    Unauthenticated,
    Forbidden,
    SessionNotFound,
    PermissionNotFound,
    SessionConflict,
    CommandConflict,
    CommandInProgress,
    CommandAbandoned,
    StreamFrameTooLarge,
    RateLimited,
    Overloaded,
    StaleCursor,
    InternalError,
}

impl ErrorCode {
    /// Every code, in the order of docs/protocol.md §3.
    pub const ALL: [ErrorCode; 15] = [
        ErrorCode::ProtocolVersionUnsupported,
        ErrorCode::InvalidCommand,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::SessionNotFound,
        ErrorCode::PermissionNotFound,
        ErrorCode::SessionConflict,
        ErrorCode::CommandConflict,
        ErrorCode::CommandInProgress,
        ErrorCode::CommandAbandoned,
        ErrorCode::StreamFrameTooLarge,
        ErrorCode::RateLimited,
        ErrorCode::Overloaded,
        ErrorCode::StaleCursor,
        ErrorCode::InternalError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ProtocolVersionUnsupported => "PROTOCOL_VERSION_UNSUPPORTED",
            ErrorCode::InvalidCommand => "INVALID_COMMAND",
            ErrorCode::Unauthenticated => "UNAUTHENTICATED",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::SessionNotFound => "SESSION_NOT_FOUND",
            ErrorCode::PermissionNotFound => "PERMISSION_NOT_FOUND",
            ErrorCode::SessionConflict => "SESSION_CONFLICT",
            ErrorCode::CommandConflict => "COMMAND_CONFLICT",
            ErrorCode::CommandInProgress => "COMMAND_IN_PROGRESS",
            ErrorCode::CommandAbandoned => "COMMAND_ABANDONED",
            ErrorCode::StreamFrameTooLarge => "STREAM_FRAME_TOO_LARGE",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::Overloaded => "OVERLOADED",
            ErrorCode::StaleCursor => "STALE_CURSOR",
            ErrorCode::InternalError => "INTERNAL_ERROR",
        }
    }

    /// Parses the wire spelling of a code.
    pub fn parse(value: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|code| code.as_str() == value)
    }

    /// The HTTP status of a failure with this code (docs/protocol.md §3, `statusForCode`).
    ///
    /// `STREAM_FRAME_TOO_LARGE` is 502: only a client raises it (an upstream sent a frame it cannot
    /// take, a bad-gateway condition), and that is the status the reference client gives it. The
    /// reference server's map has no entry and would fall to 500, but no server ever sends it.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::ProtocolVersionUnsupported => 400,
            ErrorCode::InvalidCommand => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::SessionNotFound => 404,
            ErrorCode::PermissionNotFound => 404,
            ErrorCode::SessionConflict => 409,
            ErrorCode::CommandConflict => 409,
            ErrorCode::CommandInProgress => 409,
            ErrorCode::CommandAbandoned => 409,
            ErrorCode::StreamFrameTooLarge => 502,
            ErrorCode::RateLimited => 429,
            ErrorCode::Overloaded => 503,
            ErrorCode::StaleCursor => 409,
            ErrorCode::InternalError => 500,
        }
    }

    /// Whether a failure with this code is worth retrying with the same commandId.
    ///
    /// `COMMAND_ABANDONED` is `false` (decision P3): the command is terminal and a retry can never
    /// succeed, although the reference flags it retryable.
    pub fn default_retryable(self) -> bool {
        match self {
            ErrorCode::ProtocolVersionUnsupported => false,
            ErrorCode::InvalidCommand => false,
            ErrorCode::Unauthenticated => false,
            ErrorCode::Forbidden => false,
            ErrorCode::SessionNotFound => false,
            ErrorCode::PermissionNotFound => false,
            ErrorCode::SessionConflict => false,
            ErrorCode::CommandConflict => false,
            ErrorCode::CommandInProgress => true,
            ErrorCode::CommandAbandoned => false,
            ErrorCode::StreamFrameTooLarge => false,
            ErrorCode::RateLimited => true,
            ErrorCode::Overloaded => true,
            ErrorCode::StaleCursor => false,
            ErrorCode::InternalError => true,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A protocol failure: the `error` object of a failure result, plus the HTTP status override of the
/// few sites whose status differs from their code's.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[error("{code}: {message}")]
pub struct ProtocolError {
    pub code: ErrorCode,
    pub message: String,
    pub retryable: bool,
    #[serde(
        default,
        deserialize_with = "fields::opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_after_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "fields::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub details: Option<JsonObject>,
    /// HTTP status when it differs from `code.http_status()`; never serialised.
    #[serde(skip)]
    pub status: Option<u16>,
}

impl ProtocolError {
    /// A failure with the code's default retryability and status.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ProtocolError {
        ProtocolError {
            code,
            message: message.into(),
            retryable: code.default_retryable(),
            retry_after_ms: None,
            details: None,
            status: None,
        }
    }

    pub fn with_retry_after_ms(mut self, retry_after_ms: u64) -> ProtocolError {
        self.retry_after_ms = Some(retry_after_ms);
        self
    }

    pub fn with_status(mut self, status: u16) -> ProtocolError {
        self.status = Some(status);
        self
    }

    /// The HTTP status this failure is answered with.
    pub fn http_status(&self) -> u16 {
        self.status.unwrap_or_else(|| self.code.http_status())
    }

    /// The `retry-after` header value in seconds: `ceil(retryAfterMs / 1000)`, only when
    /// `retryAfterMs > 0` (docs/protocol.md §2.0).
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after_ms
            .filter(|&ms| ms > 0)
            .map(|ms| ms.div_ceil(1000))
    }

    // ---- INVALID_COMMAND -------------------------------------------------------------------

    pub fn invalid_json() -> ProtocolError {
        ProtocolError::new(ErrorCode::InvalidCommand, "Command body is not valid JSON")
    }

    /// A number that parsing would not keep exactly (past 64-bit integers, or more precise than
    /// a 64-bit float): refused rather than rounded, so that no two commands share a fingerprint
    /// by rounding.
    pub fn inexact_number() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::InvalidCommand,
            "Command body has a number that cannot be represented exactly",
        )
    }

    pub fn validation_failed() -> ProtocolError {
        ProtocolError::new(ErrorCode::InvalidCommand, "Command validation failed")
    }

    /// 413: the body is over `maxRequestBytes`.
    pub fn body_too_large() -> ProtocolError {
        ProtocolError::new(ErrorCode::InvalidCommand, "Command body is too large").with_status(413)
    }

    /// 400: the body could not be read (broken chunked framing, or the connection ended inside
    /// it); not a size problem, so not a 413.
    pub fn body_unreadable() -> ProtocolError {
        ProtocolError::new(ErrorCode::InvalidCommand, "Command body could not be read")
    }

    /// 404 with commandId `routing`.
    pub fn route_not_found() -> ProtocolError {
        ProtocolError::new(ErrorCode::InvalidCommand, "Route not found").with_status(404)
    }

    /// 421 with commandId `routing`: a loopback connection that names a host this server does
    /// not answer for (a DNS-rebinding page, or a proxy whose host is not in
    /// `gateway.allowed_hosts`).
    pub fn host_not_allowed() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::InvalidCommand,
            "Host is not served on this address (see gateway.allowed_hosts)",
        )
        .with_status(421)
    }

    /// 400 with commandId `routing`: the request does not name its host unambiguously (no
    /// `Host` on HTTP/1.1, two of them, or an absolute-form target naming another host).
    pub fn ambiguous_host() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::InvalidCommand,
            "Request must name its host once: one Host header, and a request target that agrees with it",
        )
    }

    pub fn invalid_session_route_id() -> ProtocolError {
        ProtocolError::new(ErrorCode::InvalidCommand, "Session identifier is invalid")
    }

    pub fn invalid_session_route_encoding() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::InvalidCommand,
            "Session identifier is not valid URL encoding",
        )
    }

    /// An SSE cursor that is not a decimal integer: 400, not 409 (decision P8).
    pub fn invalid_event_cursor() -> ProtocolError {
        ProtocolError::new(ErrorCode::InvalidCommand, "Event cursor is invalid")
    }

    /// A strictly validated event was malformed.
    pub fn invalid_event(message: impl Into<String>) -> ProtocolError {
        ProtocolError::new(ErrorCode::InvalidCommand, message)
    }

    // ---- other codes -----------------------------------------------------------------------

    pub fn protocol_version_unsupported() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::ProtocolVersionUnsupported,
            "Protocol version is not supported; this server speaks protocolVersion 1",
        )
    }

    pub fn unauthenticated() -> ProtocolError {
        ProtocolError::new(ErrorCode::Unauthenticated, "Authentication required")
    }

    pub fn invalid_principal() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::Unauthenticated,
            "Principal tenantId, subject, or scopes are invalid",
        )
    }

    pub fn forbidden(scope: Scope) -> ProtocolError {
        ProtocolError::new(
            ErrorCode::Forbidden,
            format!("Missing required scope: {}", scope.as_str()),
        )
    }

    /// Unknown session, or another tenant's (existence is not disclosed).
    pub fn session_not_found(session_id: &str) -> ProtocolError {
        ProtocolError::new(
            ErrorCode::SessionNotFound,
            format!("Session {session_id} was not found"),
        )
    }

    pub fn session_not_active(session_id: &str) -> ProtocolError {
        ProtocolError::new(
            ErrorCode::SessionNotFound,
            format!("Session {session_id} is not active; resume it before issuing this command"),
        )
    }

    pub fn permission_not_pending(permission_request_id: &str) -> ProtocolError {
        ProtocolError::new(
            ErrorCode::PermissionNotFound,
            format!("Permission request {permission_request_id} is not pending"),
        )
    }

    /// Resume of a closed session.
    pub fn session_closed_conflict() -> ProtocolError {
        ProtocolError::new(ErrorCode::SessionConflict, "Session is closed")
    }

    pub fn command_conflict() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::CommandConflict,
            "This commandId was already used for a different command",
        )
    }

    /// Another attempt holds the claim; `retry_after_ms` is the lease remaining (at least 1), or
    /// 1000 once the claim is sealed.
    pub fn command_in_progress(retry_after_ms: u64) -> ProtocolError {
        ProtocolError::new(
            ErrorCode::CommandInProgress,
            "This command is already in progress; retry later with the same commandId",
        )
        .with_retry_after_ms(retry_after_ms.max(1))
    }

    /// Storing the result failed: the command may or may not have taken effect. 409 on the wire.
    pub fn command_outcome_uncertain(retry_after_ms: u64) -> ProtocolError {
        ProtocolError::new(
            ErrorCode::CommandInProgress,
            "Command outcome is uncertain because idempotency completion failed",
        )
        .with_retry_after_ms(retry_after_ms)
    }

    /// A store write of the command may or may not have taken effect. 409 on the wire; the
    /// command stays sealed, so a retry with the same id answers this until it is decided.
    pub fn command_effect_uncertain() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::CommandInProgress,
            "Command outcome is uncertain because a store write's outcome is unknown",
        )
        .with_retry_after_ms(1000)
    }

    pub fn command_abandoned(reason: &str) -> ProtocolError {
        ProtocolError::new(
            ErrorCode::CommandAbandoned,
            format!("This command was abandoned without a result: {reason}"),
        )
    }

    /// A client that failed authentication too often (reliability AUTH-12).
    pub fn authentication_rate_limited(retry_after_ms: u64) -> ProtocolError {
        ProtocolError::new(
            ErrorCode::RateLimited,
            "Too many failed authentication attempts",
        )
        .with_retry_after_ms(retry_after_ms.max(1))
    }

    pub fn rate_limited(retry_after_ms: u64) -> ProtocolError {
        ProtocolError::new(ErrorCode::RateLimited, "Tenant command rate limit exceeded")
            .with_retry_after_ms(retry_after_ms.max(1))
    }

    pub fn queue_full() -> ProtocolError {
        ProtocolError::new(ErrorCode::Overloaded, "Tenant command queue is full")
            .with_retry_after_ms(OVERLOADED_RETRY_AFTER_MS)
    }

    pub fn session_limit() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::Overloaded,
            "Tenant active Session limit exceeded",
        )
        .with_retry_after_ms(OVERLOADED_RETRY_AFTER_MS)
    }

    /// A command or event stream that reached a process on its way down: retry, and a load
    /// balancer sends it to another instance (the restarted one, or a sibling).
    pub fn shutting_down() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::Overloaded,
            "Server is shutting down; retry on another instance",
        )
        .with_retry_after_ms(OVERLOADED_RETRY_AFTER_MS)
    }

    /// The tenant holds as many SSE connections as it may (`max_sse_connections_per_tenant`).
    pub fn tenant_stream_limit() -> ProtocolError {
        ProtocolError::new(ErrorCode::Overloaded, "Tenant event stream limit exceeded")
            .with_retry_after_ms(OVERLOADED_RETRY_AFTER_MS)
    }

    /// The process holds as many SSE connections as it may (`max_sse_connections`).
    pub fn server_stream_limit() -> ProtocolError {
        ProtocolError::new(ErrorCode::Overloaded, "Server event stream limit exceeded")
            .with_retry_after_ms(OVERLOADED_RETRY_AFTER_MS)
    }

    /// The command did not finish within the request timeout. It may still complete (a sealed
    /// command always runs to its end), so the answer is the in-progress one: a retry with the
    /// same commandId gets the stored result, or runs the command if it never started.
    pub fn request_timed_out() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::CommandInProgress,
            "Command did not finish within the request timeout; retry with the same commandId",
        )
        .with_retry_after_ms(OVERLOADED_RETRY_AFTER_MS)
    }

    /// 408: the body did not arrive within the request timeout. Nothing ran, so a retry is safe.
    pub fn body_timed_out() -> ProtocolError {
        let mut error = ProtocolError::new(
            ErrorCode::InvalidCommand,
            "Command body was not received within the request timeout",
        )
        .with_status(408);
        error.retryable = true;
        error
    }

    /// `STALE_CURSOR` with the store's message (see the `event_cursor_*` constructors).
    pub fn stale_cursor(message: impl Into<String>) -> ProtocolError {
        ProtocolError::new(ErrorCode::StaleCursor, message)
    }

    /// The cursor is older than the retained range.
    pub fn event_cursor_stale() -> ProtocolError {
        ProtocolError::stale_cursor("Event cursor is stale")
    }

    /// The cursor is past the head, or positive on an empty log.
    pub fn event_cursor_ahead() -> ProtocolError {
        ProtocolError::stale_cursor("Event cursor is ahead of the session head")
    }

    pub fn stream_frame_too_large() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::StreamFrameTooLarge,
            "Agent event stream frame exceeds 4 MiB",
        )
    }

    /// A command result that does not fit the result schema. Like the reference client, a peer's
    /// malformed answer is an internal error on the reading side.
    pub fn invalid_result() -> ProtocolError {
        ProtocolError::new(
            ErrorCode::InternalError,
            "Agent server returned an invalid command result",
        )
    }

    /// Any non-protocol failure; the cause is logged, never sent.
    pub fn internal() -> ProtocolError {
        ProtocolError::new(ErrorCode::InternalError, "Internal server error")
    }
}

#[cfg(test)]
mod tests;
