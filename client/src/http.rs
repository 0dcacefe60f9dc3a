//! The HTTP side: building clients, one command POST with the response rules of docs/protocol.md
//! §11.3, and opening an SSE connection (§11.4).

use std::time::{Duration, SystemTime};

use agent_runtime::protocol::{CommandResult, JsonObject, ProtocolError, parse_command_result};
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{StatusCode, Url};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc2822;
use tokio_util::sync::CancellationToken;

use crate::error::ClientError;
use crate::options::Auth;
use crate::retry::cancellable;

/// A `reqwest` client builder whose TLS is ready to use (`agent_runtime_http_client::builder`):
/// code that needs a client (tests included) builds it from here.
pub use agent_runtime_http_client::builder as http_client_builder;

/// The largest error body read from a non-2xx SSE answer; a JSON failure is far smaller.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// What every request carries: the user's headers and the bearer token.
#[derive(Clone)]
pub(crate) struct Transport {
    pub http: reqwest::Client,
    pub headers: HeaderMap,
    pub auth: Option<Auth>,
}

impl Transport {
    /// The headers of one request; a token provider is asked every time.
    async fn request_headers(&self) -> Result<HeaderMap, ClientError> {
        let mut headers = self.headers.clone();
        if let Some(auth) = &self.auth {
            let token = auth.token().await?;
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
                    ClientError::invalid_argument("The bearer token is not a valid header value")
                })?;
            value.set_sensitive(true);
            headers.insert(header::AUTHORIZATION, value);
        }
        Ok(headers)
    }

    /// Sends one command body and reads its answer: the success `data`, or the error to retry
    /// or return. `decode` checks the `data` shape of the command type.
    pub async fn post_command<T>(
        &self,
        url: &Url,
        what: &str,
        body: &[u8],
        decode: impl Fn(&JsonObject) -> Result<T, ProtocolError>,
        cancel: Option<&CancellationToken>,
    ) -> Result<T, ClientError> {
        let headers = self.request_headers().await?;
        let request = self
            .http
            .post(url.clone())
            .headers(headers)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.to_vec())
            .send();
        let response = cancellable(cancel, request)
            .await?
            .map_err(|error| ClientError::transport(what, &error))?;
        let status = response.status();
        let retry_after = retry_after_header(response.headers());
        let bytes = cancellable(cancel, response.bytes())
            .await?
            .map_err(|error| ClientError::transport(what, &error))?;
        interpret_command_response(status, retry_after, &bytes, decode)
    }

    /// Opens the SSE stream at `url` (which carries `?after=`); a non-2xx answer is an error.
    pub async fn open_events(
        &self,
        url: &Url,
        after: u64,
        cancel: Option<&CancellationToken>,
    ) -> Result<reqwest::Response, ClientError> {
        let mut headers = self.request_headers().await?;
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        if after > 0 {
            headers.insert("last-event-id", HeaderValue::from(after));
        }
        let request = self.http.get(url.clone()).headers(headers).send();
        let response = cancellable(cancel, request)
            .await?
            .map_err(|error| ClientError::transport("events", &error))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after_header(response.headers());
        let body = cancellable(cancel, read_limited(response, MAX_ERROR_BODY))
            .await?
            .map_err(|error| ClientError::transport("events", &error))?;
        Err(events_failure(status, retry_after, &body))
    }
}

/// The rules of docs/protocol.md §11.3 for one command answer.
///
/// * A structured failure: its code, and the body's `retryable` and `retryAfterMs` (the
///   `Retry-After` header is ignored).
/// * A success with a 2xx status whose `data` passes `decode`: the typed data.
/// * Anything else (bad JSON, schema failure, `ok: true` with a non-2xx status): `INTERNAL_ERROR`,
///   retryable by status, waiting as long as the `Retry-After` header says.
pub fn interpret_command_response<T>(
    status: StatusCode,
    retry_after: Option<Duration>,
    body: &[u8],
    decode: impl Fn(&JsonObject) -> Result<T, ProtocolError>,
) -> Result<T, ClientError> {
    let code = status.as_u16();
    let invalid = |message: &str| ClientError::invalid_response(message, code, retry_after);
    match parse_command_result(body) {
        Ok(CommandResult::Failure { error, .. }) => Err(ClientError::from_server(error, code)),
        Ok(CommandResult::Success { data, .. }) if status.is_success() => {
            decode(&data).map_err(|_| invalid("Agent server returned an invalid command result"))
        }
        Ok(CommandResult::Success { .. }) => Err(invalid(&format!(
            "Agent server answered ok with HTTP status {code}"
        ))),
        Err(_) => Err(invalid(&format!(
            "Agent server returned an invalid command result (HTTP status {code})"
        ))),
    }
}

/// A non-2xx SSE answer: the body's failure when it is one, else `INTERNAL_ERROR` by status.
fn events_failure(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> ClientError {
    let code = status.as_u16();
    match parse_command_result(body) {
        Ok(CommandResult::Failure { error, .. }) => ClientError::from_server(error, code),
        _ => ClientError::invalid_response(
            format!("Agent event stream request failed with HTTP status {code}"),
            code,
            retry_after,
        ),
    }
}

async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        body.extend_from_slice(&chunk);
        if body.len() > limit {
            break;
        }
    }
    Ok(body)
}

/// `Retry-After`: delay seconds or an HTTP date.
pub fn retry_after_header(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    parse_retry_after(value, SystemTime::now())
}

/// [`retry_after_header`] for a given `now`: a date in the past means "now".
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = OffsetDateTime::parse(value, &Rfc2822).ok()?;
    let at = SystemTime::from(date);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests;
