//! Why an MCP connection or call failed, in the words of the person reading it (the model, the
//! console, `readyz`, the log): the server's name, what happened, and a stable code. Never the
//! SDK's type names, never a URL's secrets.

use rmcp::service::{ClientInitializeError, ServiceError};
use serde_json::json;

use crate::scrub::scrub_urls;
use crate::tools::ToolOutcome;
use crate::tools::output::{elide_middle, failed};

/// Longest piece of a server's own text (an error message) passed on.
const MAX_SERVER_TEXT: usize = 2_000;

/// What kind of failure: the `code` of a failed call's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McpErrorCode {
    /// The server is down or cannot be reached; it is retried with backoff.
    Unavailable,
    /// The configuration refuses the server (its address, a header); retried only after the
    /// configuration changes and the process restarts.
    Misconfigured,
    /// No answer within `call_timeout` (or `connect_timeout`).
    Timeout,
    /// The server answered the call with an error of its own.
    ToolError,
    /// A message over `max_message_bytes`.
    MessageTooLarge,
    /// The server broke the protocol: a malformed or unexpected answer.
    Protocol,
}

impl McpErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unavailable => "MCP_SERVER_UNAVAILABLE",
            Self::Misconfigured => "MCP_SERVER_MISCONFIGURED",
            Self::Timeout => "MCP_TIMEOUT",
            Self::ToolError => "MCP_TOOL_ERROR",
            Self::MessageTooLarge => "MCP_MESSAGE_TOO_LARGE",
            Self::Protocol => "MCP_PROTOCOL_ERROR",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpError {
    pub code: McpErrorCode,
    pub message: String,
}

impl std::fmt::Display for McpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl McpError {
    pub fn new(code: McpErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A failed call's result: `{error, code}`.
    pub fn outcome(&self) -> ToolOutcome {
        failed(
            json!({ "error": self.message, "code": self.code.as_str() }),
            self.message.clone(),
        )
    }

    /// A request that failed after the connection was up.
    pub fn of_request(server: &str, error: &ServiceError) -> Self {
        match error {
            ServiceError::McpError(error) => Self::new(
                McpErrorCode::ToolError,
                format!(
                    "the MCP server {server} refused: {}",
                    server_text(&error.message)
                ),
            ),
            ServiceError::TransportSend(error) => {
                let (code, cause) = transport_cause(error.error.as_ref());
                Self::new(code, format!("the MCP server {server} failed: {cause}"))
            }
            ServiceError::TransportClosed => Self::new(
                McpErrorCode::Unavailable,
                format!("the connection to the MCP server {server} closed"),
            ),
            ServiceError::Timeout { .. } => Self::new(
                McpErrorCode::Timeout,
                format!("the MCP server {server} did not answer in time"),
            ),
            ServiceError::Cancelled { .. } => Self::new(
                McpErrorCode::Unavailable,
                format!("the call to the MCP server {server} was cancelled"),
            ),
            _ => Self::new(
                McpErrorCode::Protocol,
                format!("the MCP server {server} sent an answer that does not follow MCP"),
            ),
        }
    }

    /// A handshake that failed.
    pub fn of_handshake(server: &str, error: &ClientInitializeError) -> Self {
        let (code, cause) = match error {
            ClientInitializeError::TransportError { error, .. } => {
                transport_cause(error.error.as_ref())
            }
            ClientInitializeError::ConnectionClosed(_) => (
                McpErrorCode::Unavailable,
                "the connection closed during the handshake".to_owned(),
            ),
            ClientInitializeError::JsonRpcError(error) => (
                McpErrorCode::ToolError,
                format!("it refused the handshake: {}", server_text(&error.message)),
            ),
            ClientInitializeError::NoCompatibleProtocolVersion { .. } => (
                McpErrorCode::Protocol,
                "it speaks no MCP version this server does".to_owned(),
            ),
            _ => (
                McpErrorCode::Protocol,
                "its handshake does not follow MCP".to_owned(),
            ),
        };
        Self::new(
            code,
            format!("the MCP server {server} cannot be connected: {cause}"),
        )
    }
}

/// A server's own text, bounded and without URL secrets.
pub fn server_text(text: &str) -> String {
    elide_middle(&scrub_urls(text), MAX_SERVER_TEXT)
}

/// What went wrong under a transport error, in plain words: the innermost cause that says
/// something (a refused connection, an HTTP status, a message past the cap), never the
/// transport's type name.
fn transport_cause(error: &(dyn std::error::Error + 'static)) -> (McpErrorCode, String) {
    let mut messages = Vec::new();
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::InvalidData
            && let Some(too_large) = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<TooLarge>())
        {
            return (McpErrorCode::MessageTooLarge, too_large.to_string());
        }
        messages.push(error.to_string());
        current = error.source();
    }
    let text = messages.join(": ");
    let code = match text.contains("exceeded the maximum size") {
        true => McpErrorCode::MessageTooLarge,
        false => McpErrorCode::Unavailable,
    };
    // The outer messages repeat the inner ones; keep the first and the root cause.
    let cause = match (messages.first(), messages.last()) {
        (Some(first), Some(last)) if first != last && !first.contains(last.as_str()) => {
            format!("{first}: {last}")
        }
        (Some(first), _) => first.clone(),
        _ => "the connection failed".to_owned(),
    };
    (code, server_text(&cause))
}

/// A stdio server's line past `max_message_bytes` (the error its bounded reader raises).
#[derive(Debug)]
pub struct TooLarge {
    pub limit: usize,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "it sent a message over max_message_bytes ({} bytes)",
            self.limit
        )
    }
}

impl std::error::Error for TooLarge {}
