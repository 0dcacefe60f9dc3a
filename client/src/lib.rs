//! Async Rust client of protocol v1 of the agent session server: the behaviour of the reference
//! browser `AgentClient` (docs/protocol.md §11), on `reqwest` and `tokio`.
//!
//! * **Commands** (`POST {base}/commands`) are built and checked with the root package's strict
//!   protocol types before anything is sent, and their answers are validated strictly. Each call
//!   has one `commandId` (yours, or a fresh nanoid) that every retry reuses, so a retry after a
//!   lost answer returns the stored result instead of running the command twice. Network errors
//!   and failures the server marks `retryable` are retried up to
//!   [`ClientOptions::max_command_attempts`] times, waiting `retryAfterMs` when the server gave
//!   one, else an exponential backoff with jitter. `COMMAND_ABANDONED` is never retried
//!   (decision P3).
//! * **`initialize`** runs once per client and is shared by concurrent callers; every other
//!   command waits for it. A failed `initialize` is forgotten, so the next call tries again.
//! * **Events** ([`AgentClient::events`]) are a [`futures_util::Stream`] over SSE: every frame is
//!   validated, must belong to the session and carry a strictly increasing sequence (the stream
//!   fails closed otherwise), and a dropped connection is resumed from the last sequence seen.
//!   The stream ends after `session.closed`; `STALE_CURSOR` and other non-retryable failures end
//!   it at once.
//! * **Cancellation**: dropping any future or stream is safe and closes its connection; every call
//!   also takes an optional [`CancellationToken`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_runtime::protocol::command::ClientInfo;
//! use agent_runtime_client::{AgentClient, ClientOptions, CommandOptions, EventsOptions, SubmitOptions};
//! use futures_util::StreamExt;
//!
//! let info = ClientInfo { name: "my-app".into(), version: "1.0.0".into(), title: None };
//! let options = ClientOptions::new("http://127.0.0.1:8787/v1/agent", info).bearer_token("TOKEN");
//! let client = AgentClient::new(options)?;
//! let session = client.create_session(None, CommandOptions::default()).await?;
//! let mut events = session.events(EventsOptions::default());
//! session.send("hello", SubmitOptions::default(), CommandOptions::default()).await?;
//! while let Some(event) = events.next().await {
//!     let event = event?;
//!     if event.is_request_end() {
//!         break;
//!     }
//! }
//! # Ok(()) }
//! ```

mod commands;
pub mod error;
mod events;
mod http;
pub mod options;
pub mod retry;
mod session;
pub mod sse;

use agent_runtime::sync::Locked;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::command::{ClientCapabilities, ClientInfo, InitializeData};
use agent_runtime::protocol::result::InitializeResult;
use agent_runtime::protocol::{Command, CommandKind, JsonObject, ProtocolError, ResultData};
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use reqwest::Url;
pub use tokio_util::sync::CancellationToken;

pub use crate::commands::{
    CommandOptions, ForkOptions, ListOptions, PermissionDecision, SubmitOptions,
};
pub use crate::error::{ClientError, ErrorKind};
pub use crate::events::{After, EventCursor, EventStream, EventsOptions, SessionEvent};
pub use crate::http::{http_client_builder, parse_retry_after};
pub use crate::options::{
    Auth, ClientOptions, OptionsError, RetryHook, RetryNotice, TokenProvider,
};
pub use crate::session::RemoteSession;
pub use agent_runtime::secret::Secret;

use crate::http::Transport;
use crate::retry::{retry_delay, sleep};

/// Connect timeout of the default HTTP client.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of one server. Cheap to clone: clones share the connection pool and `initialize`.
#[derive(Clone)]
pub struct AgentClient {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    /// The one in-flight or successful `initialize`; cleared when it fails.
    init: Mutex<Option<SharedInit>>,
}

type SharedInit = Shared<BoxFuture<'static, Result<InitializeResult, ClientError>>>;

/// Everything a request needs. Kept apart from [`Inner`] so the shared `initialize` future can
/// own a handle to it without a reference cycle.
pub(crate) struct Core {
    pub transport: Transport,
    pub base: Url,
    pub commands_url: Url,
    pub client_info: ClientInfo,
    pub capabilities: Option<ClientCapabilities>,
    pub max_command_attempts: u32,
    pub max_event_reconnect_attempts: u32,
    pub retry_base_delay: Duration,
    pub on_retry: Option<RetryHook>,
}

impl AgentClient {
    /// Checks the options and builds the client; nothing is sent until the first call.
    pub fn new(options: ClientOptions) -> Result<AgentClient, OptionsError> {
        let base = options.validate()?;
        let http = match options.http {
            Some(http) => http,
            None => http_client_builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .build()
                .map_err(|_| OptionsError::HttpClient)?,
        };
        let commands_url = endpoint(&base, &["commands"]);
        let core = Core {
            transport: Transport {
                http,
                headers: options.headers,
                auth: options.auth,
            },
            base,
            commands_url,
            client_info: options.client,
            capabilities: options.capabilities,
            max_command_attempts: options.max_command_attempts,
            max_event_reconnect_attempts: options.max_event_reconnect_attempts,
            retry_base_delay: options.retry_base_delay,
            on_retry: options.on_retry,
        };
        Ok(AgentClient {
            inner: Arc::new(Inner {
                core: Arc::new(core),
                init: Mutex::new(None),
            }),
        })
    }

    /// The normalised base URL (no trailing `/`).
    pub fn base_url(&self) -> &str {
        self.inner.core.base.as_str().trim_end_matches('/')
    }

    /// `initialize`, once: concurrent callers share one attempt, a success is remembered, and a
    /// failure is forgotten so that the next call tries again. `options.command_id` applies only
    /// when this call starts the attempt; `options.cancel` stops only this caller's wait.
    pub async fn initialize(
        &self,
        options: CommandOptions,
    ) -> Result<InitializeResult, ClientError> {
        let attempt = {
            let mut slot = self.inner.init.locked();
            match &*slot {
                Some(attempt) => attempt.clone(),
                None => {
                    let core = Arc::clone(&self.inner.core);
                    let shared_options = CommandOptions {
                        command_id: options.command_id.clone(),
                        cancel: None,
                    };
                    let attempt = async move { core.initialize(&shared_options).await }
                        .boxed()
                        .shared();
                    *slot = Some(attempt.clone());
                    attempt
                }
            }
        };
        let result = retry::cancellable(options.cancel.as_ref(), attempt.clone()).await?;
        if result.is_err() {
            let mut slot = self.inner.init.locked();
            if slot.as_ref().is_some_and(|stored| stored.ptr_eq(&attempt)) {
                *slot = None;
            }
        }
        result
    }

    /// Runs a command after `initialize`, decoding its success `data` with `decode`.
    pub(crate) async fn run<T>(
        &self,
        kind: CommandKind,
        options: &CommandOptions,
        decode: fn(&JsonObject) -> Result<T, ProtocolError>,
    ) -> Result<T, ClientError> {
        self.initialize(CommandOptions {
            command_id: None,
            cancel: options.cancel.clone(),
        })
        .await?;
        self.inner.core.execute(kind, options, decode).await
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }
}

impl fmt::Debug for AgentClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentClient")
            .field("base_url", &self.base_url())
            .field("client", &self.inner.core.client_info)
            .finish_non_exhaustive()
    }
}

impl Core {
    async fn initialize(&self, options: &CommandOptions) -> Result<InitializeResult, ClientError> {
        let kind = CommandKind::Initialize(InitializeData {
            client: self.client_info.clone(),
            capabilities: self.capabilities.clone(),
        });
        self.execute(kind, options, InitializeResult::from_data)
            .await
    }

    /// One command with the retry rules of docs/protocol.md §11.3.
    pub(crate) async fn execute<T>(
        &self,
        kind: CommandKind,
        options: &CommandOptions,
        decode: fn(&JsonObject) -> Result<T, ProtocolError>,
    ) -> Result<T, ClientError> {
        let command_id = options.command_id.clone().unwrap_or_else(nanoid);
        let command = Command::new(command_id, kind);
        let command_type = command.command_type();
        let value = command.to_value();
        // Checked with the server's own parser: an invalid argument costs no request.
        if let Err(error) = Command::from_value(value.clone()) {
            return Err(ClientError::invalid_argument(format!(
                "{command_type}: {}",
                error.message
            )));
        }
        let body = value.to_string().into_bytes();
        let cancel = options.cancel.as_ref();
        let mut attempt = 1;
        loop {
            let outcome = self
                .transport
                .post_command(&self.commands_url, command_type, &body, decode, cancel)
                .await;
            let error = match outcome {
                Ok(data) => return Ok(data),
                Err(error) => error,
            };
            if !error.retryable || attempt >= self.max_command_attempts {
                return Err(error);
            }
            let delay = retry_delay(self.retry_base_delay, attempt, error.retry_after);
            self.notify(&RetryNotice::Command {
                command_type,
                command_id: &command.command_id,
                attempt,
                delay,
                error: &error,
            });
            sleep(cancel, delay).await?;
            attempt += 1;
        }
    }

    pub(crate) fn notify(&self, notice: &RetryNotice<'_>) {
        if let Some(hook) = &self.on_retry {
            hook(notice);
        }
    }
}

/// `base` with more path segments (each percent-encoded as one segment).
pub(crate) fn endpoint(base: &Url, segments: &[&str]) -> Url {
    let mut url = base.clone();
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    url
}
