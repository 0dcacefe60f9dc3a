//! [`ClientOptions`] (docs/protocol.md §11.1), their validation, authentication and the retry hook.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::ids::is_valid_identifier;
use agent_runtime::protocol::command::{ClientCapabilities, ClientInfo};
use agent_runtime::secret::Secret;
use reqwest::Url;
use reqwest::header::HeaderMap;

use crate::error::ClientError;

/// Default of [`ClientOptions::max_command_attempts`].
pub const DEFAULT_MAX_COMMAND_ATTEMPTS: u32 = 3;
/// Default of [`ClientOptions::max_event_reconnect_attempts`].
pub const DEFAULT_MAX_EVENT_RECONNECT_ATTEMPTS: u32 = 5;
/// Default of [`ClientOptions::retry_base_delay`].
pub const DEFAULT_RETRY_BASE_DELAY: Duration = Duration::from_millis(250);
/// The longest base delay accepted: beyond it a retry would effectively never happen.
pub const MAX_RETRY_BASE_DELAY: Duration = Duration::from_secs(3600);

/// How to reach and authenticate to a server, and how hard to retry.
#[derive(Clone)]
pub struct ClientOptions {
    /// The API base, e.g. `http://127.0.0.1:8787/v1/agent`; trailing `/` are stripped. `http` or
    /// `https`, without credentials, query or fragment.
    pub base_url: String,
    /// Sent in `initialize`: `name` and `version` follow the identifier rule, `title` has
    /// 1..=256 characters.
    pub client: ClientInfo,
    /// Sent in `initialize`. Default: none.
    pub capabilities: Option<ClientCapabilities>,
    /// Extra headers sent with every request. Default: none.
    pub headers: HeaderMap,
    /// The bearer token, or a provider asked before every request. Default: none.
    pub auth: Option<Auth>,
    /// Attempts per command, the first included; at least 1. Default 3.
    pub max_command_attempts: u32,
    /// Reconnects of an event stream in a row without receiving an event. Default 5.
    pub max_event_reconnect_attempts: u32,
    /// Base of the exponential backoff: attempt `n` waits `base × 2^(n−1)` plus a random jitter
    /// in `[0, base)`, unless the server said how long (`retryAfterMs`). Default 250 ms, at most
    /// one hour.
    pub retry_base_delay: Duration,
    /// Told about every retry and reconnect before its delay. Default: none.
    pub on_retry: Option<RetryHook>,
    /// The HTTP client to use, e.g. one with a proxy or custom roots. Default: one built by
    /// [`crate::http_client_builder`] with a 10 s connect timeout.
    pub http: Option<reqwest::Client>,
}

impl ClientOptions {
    /// Options with every default.
    pub fn new(base_url: impl Into<String>, client: ClientInfo) -> ClientOptions {
        ClientOptions {
            base_url: base_url.into(),
            client,
            capabilities: None,
            headers: HeaderMap::new(),
            auth: None,
            max_command_attempts: DEFAULT_MAX_COMMAND_ATTEMPTS,
            max_event_reconnect_attempts: DEFAULT_MAX_EVENT_RECONNECT_ATTEMPTS,
            retry_base_delay: DEFAULT_RETRY_BASE_DELAY,
            on_retry: None,
            http: None,
        }
    }

    /// Authenticates every request with `authorization: Bearer <token>`.
    pub fn bearer_token(mut self, token: impl Into<Secret>) -> ClientOptions {
        self.auth = Some(Auth::Bearer(token.into()));
        self
    }

    /// Asks `provider` for the bearer token before every request (e.g. to refresh it).
    pub fn token_provider(mut self, provider: Arc<dyn TokenProvider>) -> ClientOptions {
        self.auth = Some(Auth::Provider(provider));
        self
    }

    /// Checks every value and returns the normalised base URL.
    pub(crate) fn validate(&self) -> Result<Url, OptionsError> {
        let trimmed = self.base_url.trim_end_matches('/');
        let url = Url::parse(trimmed).map_err(|_| OptionsError::BaseUrl("not a valid URL"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(OptionsError::BaseUrl("the scheme must be http or https"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            // Credentials in a URL end up in error messages and logs; use `auth` instead.
            return Err(OptionsError::BaseUrl(
                "credentials belong in `auth`, not the URL",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(OptionsError::BaseUrl("a query or fragment is not allowed"));
        }
        if !is_valid_identifier(&self.client.name) || !is_valid_identifier(&self.client.version) {
            return Err(OptionsError::ClientInfo(
                "name and version must match the identifier rule",
            ));
        }
        if let Some(title) = &self.client.title {
            let length = title.encode_utf16().count();
            if !(1..=256).contains(&length) {
                return Err(OptionsError::ClientInfo(
                    "title must have 1 to 256 characters",
                ));
            }
        }
        if self.max_command_attempts == 0 {
            return Err(OptionsError::MaxCommandAttempts);
        }
        if self.retry_base_delay > MAX_RETRY_BASE_DELAY {
            return Err(OptionsError::RetryBaseDelay);
        }
        Ok(url)
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values may hold credentials: names only.
        let header_names: Vec<&str> = self.headers.keys().map(|name| name.as_str()).collect();
        f.debug_struct("ClientOptions")
            .field("base_url", &self.base_url)
            .field("client", &self.client)
            .field("capabilities", &self.capabilities)
            .field("headers", &header_names)
            .field("auth", &self.auth)
            .field("max_command_attempts", &self.max_command_attempts)
            .field(
                "max_event_reconnect_attempts",
                &self.max_event_reconnect_attempts,
            )
            .field("retry_base_delay", &self.retry_base_delay)
            .field("on_retry", &self.on_retry.as_ref().map(|_| "<hook>"))
            .finish_non_exhaustive()
    }
}

/// Why [`crate::AgentClient::new`] refused its options.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error("invalid base URL: {0}")]
    BaseUrl(&'static str),
    #[error("invalid client info: {0}")]
    ClientInfo(&'static str),
    #[error("max_command_attempts must be at least 1")]
    MaxCommandAttempts,
    #[error("retry_base_delay must be at most one hour")]
    RetryBaseDelay,
    #[error("the HTTP client could not be built")]
    HttpClient,
}

/// Supplies the bearer token; asked before every request, so it may refresh it.
#[async_trait::async_trait]
pub trait TokenProvider: Send + Sync {
    async fn bearer_token(&self) -> Result<Secret, ClientError>;
}

/// How requests authenticate.
#[derive(Clone)]
pub enum Auth {
    Bearer(Secret),
    Provider(Arc<dyn TokenProvider>),
}

impl Auth {
    pub(crate) async fn token(&self) -> Result<Secret, ClientError> {
        match self {
            Auth::Bearer(token) => Ok(token.clone()),
            Auth::Provider(provider) => provider.bearer_token().await,
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Bearer(token) => f.debug_tuple("Bearer").field(token).finish(),
            Auth::Provider(_) => f.write_str("Provider(<token provider>)"),
        }
    }
}

/// A retry or reconnect about to happen, for [`ClientOptions::on_retry`].
#[derive(Clone, Copy, Debug)]
pub enum RetryNotice<'a> {
    /// A command failed retryably and is sent again, with the same commandId, after `delay`.
    Command {
        command_type: &'static str,
        command_id: &'a str,
        /// The attempt that failed (1 for the first).
        attempt: u32,
        delay: Duration,
        error: &'a ClientError,
    },
    /// An event stream reconnects after `delay`, from after sequence `after`.
    EventReconnect {
        session_id: &'a str,
        after: u64,
        /// Consecutive reconnects without an event, this one included.
        attempt: u32,
        delay: Duration,
        /// `None` when the stream ended cleanly before `session.closed`.
        error: Option<&'a ClientError>,
    },
}

/// See [`ClientOptions::on_retry`]. It runs on the calling task: keep it quick.
pub type RetryHook = Arc<dyn Fn(&RetryNotice<'_>) + Send + Sync>;
