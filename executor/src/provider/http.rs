//! What the HTTP providers share: one streaming call with timeouts, the mapping of failures to the
//! stable provider error codes, and retries with exponential backoff.
//!
//! A call is retried only while nothing of it has reached the client: once a `content` or
//! `thinking` delta was forwarded, a retry would show the user a second, different answer, so a
//! failure after that point ends the request. Dropping the future drops the response body, which
//! closes the connection: that is how `request.abort` stops a provider call.

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use tokio::sync::mpsc;

use super::sse::{MAX_PROVIDER_EVENT_BYTES, SseDecoder, SseError, SseEvent};
use super::{ModelDelta, ModelRequest, ModelTurn, ProviderError, ProviderErrorCode};

/// Timeouts and retries of a provider's HTTP calls.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpSettings {
    /// Limit for establishing the TCP (and TLS) connection. Default 10 s.
    pub connect_timeout: Duration,
    /// Longest silence allowed while waiting for the response headers or between two body
    /// chunks. Default 60 s (reasoning models can think silently for a while).
    pub idle_timeout: Duration,
    /// Retries after the first attempt on transient failures. Default 3.
    pub max_retries: u32,
    /// Wait before the first retry; doubles each time. Default 500 ms.
    pub initial_backoff: Duration,
    /// Longest wait between two attempts, also the cap of a server's `retry-after`. Default 30 s.
    pub max_backoff: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl HttpSettings {
    /// The client every call of one provider uses. Providers never follow redirects: a
    /// redirect would resend the API key to wherever it points.
    pub(super) fn client(&self) -> Result<reqwest::Client, ProviderError> {
        client_builder()
            .connect_timeout(self.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| ProviderError {
                code: ProviderErrorCode::Unavailable,
                message: "The HTTP client of the model provider could not be created".to_owned(),
            })
    }

    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after {
            return wait.min(self.max_backoff);
        }
        let factor = 2u32.saturating_pow(attempt);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// Every outgoing HTTP client starts here (rustls with the `ring` provider installed once; see
/// the `agent-runtime-http-client` crate).
pub use agent_runtime_http_client::builder as client_builder;

/// A failed attempt, before the retry decision.
#[derive(Debug)]
pub(super) struct Failure {
    pub code: ProviderErrorCode,
    pub message: String,
    /// Whether another attempt may succeed.
    pub transient: bool,
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// The stream broke the API's contract (bad JSON, an unexpected event order).
    pub fn malformed(what: &str) -> Self {
        Self {
            code: ProviderErrorCode::BadResponse,
            message: format!("The model provider sent a malformed stream: {what}"),
            // A garbled stream is usually a broken proxy or connection, worth one more try.
            transient: true,
            retry_after: None,
        }
    }

    /// The stream ended before the API's end marker.
    /// One event past [`MAX_PROVIDER_EVENT_BYTES`]: refused, and not retried (it would come
    /// again).
    pub fn too_large() -> Self {
        Self {
            code: ProviderErrorCode::BadResponse,
            message: format!(
                "The model provider sent an event over {} MiB",
                MAX_PROVIDER_EVENT_BYTES >> 20
            ),
            transient: false,
            retry_after: None,
        }
    }

    pub fn truncated() -> Self {
        Self {
            code: ProviderErrorCode::Unavailable,
            message: "The model provider's stream ended before the answer was complete".to_owned(),
            transient: true,
            retry_after: None,
        }
    }

    /// An `error` event inside a stream that had started well.
    pub fn in_stream(kind: &str, overloaded: bool) -> Self {
        let code = match overloaded {
            true => ProviderErrorCode::Unavailable,
            false => ProviderErrorCode::BadResponse,
        };
        Self {
            code,
            message: format!("The model provider reported an error in its stream ({kind})"),
            transient: overloaded,
            retry_after: None,
        }
    }

    fn timeout() -> Self {
        Self {
            code: ProviderErrorCode::Unavailable,
            message: "The model provider did not answer in time".to_owned(),
            transient: true,
            retry_after: None,
        }
    }

    /// Never includes the error's text: it may name the URL, and a URL may carry credentials.
    fn transport(error: &reqwest::Error) -> Self {
        let (message, transient) = if error.is_timeout() {
            ("The model provider did not answer in time", true)
        } else if error.is_connect() {
            ("Could not connect to the model provider", true)
        } else if error.is_builder() {
            (
                "The model provider's URL is invalid (check base_url)",
                false,
            )
        } else {
            ("The connection to the model provider broke", true)
        };
        Self {
            code: ProviderErrorCode::Unavailable,
            message: message.to_owned(),
            transient,
            retry_after: None,
        }
    }

    fn status(status: StatusCode, retry_after: Option<Duration>) -> Self {
        let code = status.as_u16();
        let (code_kind, what, transient) = match code {
            401 | 403 => (ProviderErrorCode::AuthFailed, "refused the API key", false),
            429 => (ProviderErrorCode::RateLimited, "is rate limiting", true),
            408 | 409 | 500..=599 => (ProviderErrorCode::Unavailable, "is unavailable", true),
            _ => (
                ProviderErrorCode::BadResponse,
                "rejected the request",
                false,
            ),
        };
        Self {
            code: code_kind,
            message: format!("The model provider {what} (HTTP {code})"),
            transient,
            retry_after,
        }
    }

    fn into_error(self, attempts: u32) -> ProviderError {
        let message = if attempts > 1 {
            format!("{} after {attempts} attempts", self.message)
        } else {
            self.message
        };
        ProviderError {
            code: self.code,
            message,
        }
    }
}

/// The turn a decoder starts from.
pub(super) fn empty_turn(max_context_tokens: u64) -> ModelTurn {
    ModelTurn {
        usage: super::ModelUsage {
            max_context_tokens,
            ..super::ModelUsage::default()
        },
        ..ModelTurn::default()
    }
}

/// One provider API: how to ask, and how to read the answer's events.
pub(super) trait StreamingApi: Send + Sync {
    type Decoder: StreamDecoder + Send;

    fn build(&self, client: &reqwest::Client, request: &ModelRequest) -> reqwest::RequestBuilder;
    fn decoder(&self) -> Self::Decoder;
}

/// Whether the stream goes on after an event.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flow {
    More,
    Done,
}

pub(super) trait StreamDecoder {
    /// Reads one event, appending the deltas to forward to `out`.
    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelDelta>) -> Result<Flow, Failure>;
    /// The whole turn once the stream ended; fails if it ended too early.
    fn finish(self, ended_cleanly: bool) -> Result<ModelTurn, Failure>;
}

/// Runs one model call, retrying transient failures that happened before any delta went out.
pub(super) async fn stream_with_retries<A: StreamingApi>(
    api: &A,
    client: &reqwest::Client,
    settings: &HttpSettings,
    request: &ModelRequest,
    deltas: &mpsc::Sender<ModelDelta>,
) -> Result<ModelTurn, ProviderError> {
    let mut attempt: u32 = 0;
    loop {
        let mut streamed = false;
        let failure =
            match attempt_once(api, client, settings, request, deltas, &mut streamed).await {
                Ok(turn) => return Ok(turn),
                Err(failure) => failure,
            };
        let retry = failure.transient && !streamed && attempt < settings.max_retries;
        if !retry {
            tracing::warn!(
                code = failure.code.as_str(),
                attempts = attempt + 1,
                streamed,
                "model call failed"
            );
            return Err(failure.into_error(attempt + 1));
        }
        let wait = settings.backoff(attempt, failure.retry_after);
        tracing::info!(
            code = failure.code.as_str(),
            attempt = attempt + 1,
            wait_ms = wait.as_millis() as u64,
            "model call failed, retrying"
        );
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

async fn attempt_once<A: StreamingApi>(
    api: &A,
    client: &reqwest::Client,
    settings: &HttpSettings,
    request: &ModelRequest,
    deltas: &mpsc::Sender<ModelDelta>,
    streamed: &mut bool,
) -> Result<ModelTurn, Failure> {
    let mut builder = api.build(client, request);
    if let Some(trace) = &request.trace {
        // Only the traceparent: a client's tracestate is not for third parties.
        builder = builder.header("traceparent", trace.traceparent());
    }
    let send = builder.send();
    let response = tokio::time::timeout(settings.idle_timeout, send)
        .await
        .map_err(|_| Failure::timeout())?
        .map_err(|error| Failure::transport(&error))?;
    let status = response.status();
    if !status.is_success() {
        let retry_after = retry_after(response.headers());
        let body = error_body(response, settings.idle_timeout).await;
        // Error bodies may echo the request (the prompt, even the key): only the API's own
        // error identifiers are logged, never its text.
        let (kind, code) = error_identifiers(&body);
        tracing::warn!(
            status = status.as_u16(),
            error_type = kind.as_deref().unwrap_or("-"),
            error_code = code.as_deref().unwrap_or("-"),
            "the model provider refused the call"
        );
        return Err(Failure::status(status, retry_after));
    }
    let mut body = response.bytes_stream();
    let mut sse = SseDecoder::default();
    let mut decoder = api.decoder();
    let mut out = Vec::new();
    loop {
        let chunk = match tokio::time::timeout(settings.idle_timeout, body.next()).await {
            Err(_) => return Err(Failure::timeout()),
            Ok(None) => break,
            Ok(Some(Err(error))) => return Err(Failure::transport(&error)),
            Ok(Some(Ok(chunk))) => chunk,
        };
        let events = sse.push(&chunk).map_err(|error| match error {
            SseError::NotUtf8 => Failure::malformed("the body is not UTF-8"),
            SseError::TooLarge => Failure::too_large(),
        })?;
        for event in events {
            let flow = decoder.event(&event, &mut out)?;
            forward(&mut out, deltas, streamed).await;
            if flow == Flow::Done {
                return decoder.finish(true);
            }
        }
    }
    if let Some(event) = sse.finish() {
        let flow = decoder.event(&event, &mut out)?;
        forward(&mut out, deltas, streamed).await;
        if flow == Flow::Done {
            return decoder.finish(true);
        }
    }
    decoder.finish(false)
}

async fn forward(
    out: &mut Vec<ModelDelta>,
    deltas: &mpsc::Sender<ModelDelta>,
    streamed: &mut bool,
) {
    for delta in out.drain(..) {
        *streamed = true;
        // A closed receiver means the request is going away; the caller drops us soon.
        let _ = deltas.send(delta).await;
    }
}

/// `retry-after` in seconds (the HTTP-date form is rare from APIs and falls back to backoff).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// `error.type` and `error.code` of an OpenAI- or Anthropic-style error body, when they are short
/// identifiers (letters, digits, `_ - .`); anything else in the body is ignored.
fn error_identifiers(body: &str) -> (Option<String>, Option<String>) {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return (None, None);
    };
    let error = value.get("error").unwrap_or(&value);
    let identifier = |key: &str| {
        error
            .get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|text| {
                !text.is_empty()
                    && text.len() <= 64
                    && text
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            })
            .map(str::to_owned)
    };
    (identifier("type"), identifier("code"))
}

/// At most 2 KiB of an error body, read only for its error identifiers.
async fn error_body(response: reqwest::Response, limit: Duration) -> String {
    const MAX: usize = 2048;
    let read = async {
        let mut stream = response.bytes_stream();
        let mut body = Vec::new();
        while let Some(Ok(chunk)) = stream.next().await {
            body.extend_from_slice(&chunk);
            if body.len() >= MAX {
                break;
            }
        }
        body.truncate(MAX);
        String::from_utf8_lossy(&body).into_owned()
    };
    tokio::time::timeout(limit, read).await.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped_and_retry_after_wins() {
        let settings = HttpSettings {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            ..HttpSettings::default()
        };
        assert_eq!(settings.backoff(0, None), Duration::from_millis(100));
        assert_eq!(settings.backoff(2, None), Duration::from_millis(400));
        assert_eq!(settings.backoff(10, None), Duration::from_secs(1));
        assert_eq!(
            settings.backoff(0, Some(Duration::from_millis(700))),
            Duration::from_millis(700)
        );
        assert_eq!(
            settings.backoff(0, Some(Duration::from_secs(90))),
            Duration::from_secs(1)
        );
    }

    #[tokio::test]
    async fn https_clients_build_with_the_ring_provider() {
        // With `rustls-no-provider`, building a client without an installed provider fails.
        let client = HttpSettings::default().client().expect("client builds");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/", listener.local_addr().unwrap());
        drop(listener);
        let error = client.get(url).send().await.unwrap_err();
        assert!(
            error.is_connect(),
            "a TLS-capable client reached the connect stage"
        );
    }

    #[test]
    fn only_error_identifiers_are_taken_from_error_bodies() {
        let openai = r#"{"error":{"message":"key sk-secret and your prompt","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        assert_eq!(
            error_identifiers(openai),
            (
                Some("invalid_request_error".to_owned()),
                Some("invalid_api_key".to_owned())
            )
        );
        let anthropic = r#"{"type":"error","error":{"type":"authentication_error","message":"x"}}"#;
        assert_eq!(
            error_identifiers(anthropic),
            (Some("authentication_error".to_owned()), None)
        );
        let echoing =
            r#"{"error":{"type":"the prompt was: tell me a secret","code":"sk live key"}}"#;
        assert_eq!(error_identifiers(echoing), (None, None));
        assert_eq!(error_identifiers("<html>Bad gateway</html>"), (None, None));
    }

    #[test]
    fn statuses_map_to_stable_codes() {
        let cases = [
            (401, ProviderErrorCode::AuthFailed, false),
            (403, ProviderErrorCode::AuthFailed, false),
            (429, ProviderErrorCode::RateLimited, true),
            (500, ProviderErrorCode::Unavailable, true),
            (529, ProviderErrorCode::Unavailable, true),
            (400, ProviderErrorCode::BadResponse, false),
            (404, ProviderErrorCode::BadResponse, false),
        ];
        for (status, code, transient) in cases {
            let failure = Failure::status(StatusCode::from_u16(status).unwrap(), None);
            assert_eq!(
                (failure.code, failure.transient),
                (code, transient),
                "{status}"
            );
        }
    }
}
