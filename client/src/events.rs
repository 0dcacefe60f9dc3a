//! The event stream of a session (docs/protocol.md §11.4): SSE over HTTP, every frame strictly
//! validated, resumed from the last sequence after a dropped connection.
//!
//! Rules, as the reference client applies them:
//! * an event must belong to the requested session and carry a sequence greater than the last
//!   one (`INVALID_COMMAND` 502 otherwise, not retryable: the stream fails closed, no dedupe);
//! * after `session.closed` the stream ends;
//! * a clean end of the connection before `session.closed` reconnects; so do retryable errors
//!   (network, 5xx, a frame that is not a valid event). `STALE_CURSOR` and non-retryable errors
//!   end the stream at once;
//! * the reconnect counter is reset by every event; more than `max_event_reconnect_attempts`
//!   reconnects in a row end the stream with the last error (or `INTERNAL_ERROR` 502 "Agent event
//!   stream ended before Session closure"). The delay is the exponential backoff; the server's
//!   `retryAfterMs` is not used here.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use agent_runtime::ids::is_valid_identifier;
use agent_runtime::protocol::{
    ErrorCode, EventEnvelope, EventPayload, EventType, ProtocolError, StreamMessage,
    parse_event_payload,
};
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::error::{ClientError, ErrorKind};
use crate::retry::{cancellable, retry_delay, sleep};
use crate::sse::SseParser;
use crate::{AgentClient, CommandOptions, Core, RetryNotice, endpoint};

/// Where a stream starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum After {
    /// Every retained event.
    #[default]
    Start,
    /// Events with a greater sequence, e.g. a `recovery.lastEventSequence` of `session.read`.
    Sequence(u64),
    /// Events after one already seen (checked: it must belong to the requested session).
    Cursor(EventCursor),
}

impl From<u64> for After {
    fn from(sequence: u64) -> After {
        After::Sequence(sequence)
    }
}

impl From<EventCursor> for After {
    fn from(cursor: EventCursor) -> After {
        After::Cursor(cursor)
    }
}

/// The position of an event (`AgentEventCursor`, docs/protocol.md §1.5). Only `sequence` travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventCursor {
    pub session_id: String,
    pub sequence: u64,
    pub event_id: String,
}

impl EventCursor {
    /// The cursor of an event.
    pub fn of(event: &EventEnvelope) -> EventCursor {
        EventCursor {
            session_id: event.session_id.clone(),
            sequence: event.sequence,
            event_id: event.event_id.clone(),
        }
    }

    fn is_valid(&self) -> bool {
        self.sequence > 0
            && is_valid_identifier(&self.session_id)
            && is_valid_identifier(&self.event_id)
    }
}

/// [`AgentClient::events`] options.
#[derive(Clone, Debug, Default)]
pub struct EventsOptions {
    pub after: After,
    /// Ends the stream with [`ErrorKind::Cancelled`].
    pub cancel: Option<CancellationToken>,
}

impl EventsOptions {
    pub fn after(after: impl Into<After>) -> EventsOptions {
        EventsOptions {
            after: after.into(),
            cancel: None,
        }
    }
}

/// A validated event: the envelope and its typed `data`.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionEvent {
    pub envelope: EventEnvelope,
    pub payload: EventPayload,
}

impl SessionEvent {
    pub fn sequence(&self) -> u64 {
        self.envelope.sequence
    }

    pub fn cursor(&self) -> EventCursor {
        EventCursor::of(&self.envelope)
    }

    /// The stream message of a `session.stream` event.
    pub fn stream_message(&self) -> Option<&StreamMessage> {
        match &self.payload {
            EventPayload::Stream(message) => Some(message),
            EventPayload::PermissionRequested(_) | EventPayload::SessionClosed(_) => None,
        }
    }

    /// The terminal `result` of a request.
    pub fn is_request_end(&self) -> bool {
        self.stream_message()
            .is_some_and(StreamMessage::is_request_terminal)
    }

    pub fn is_session_closed(&self) -> bool {
        self.envelope.event_type == EventType::SessionClosed
    }
}

/// The events of one session; see the module docs. Ends after `session.closed` or with the first
/// error. Dropping it closes the connection.
pub struct EventStream {
    inner: BoxStream<'static, Result<SessionEvent, ClientError>>,
}

impl EventStream {
    pub(crate) fn new(
        client: AgentClient,
        session_id: &str,
        options: EventsOptions,
    ) -> EventStream {
        let reader = Reader {
            core: Arc::clone(client.core()),
            client,
            session_id: session_id.to_owned(),
            start: Some(options.after),
            after: 0,
            attempts: 0,
            connection: None,
            cancel: options.cancel,
            finished: false,
        };
        let inner = futures_util::stream::unfold(reader, |mut reader| async move {
            let item = reader.next().await?;
            Some((item, reader))
        })
        .boxed();
        EventStream { inner }
    }
}

impl Stream for EventStream {
    type Item = Result<SessionEvent, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventStream")
    }
}

struct Reader {
    client: AgentClient,
    core: Arc<Core>,
    session_id: String,
    /// The requested start, checked on the first poll.
    start: Option<After>,
    /// The last sequence delivered.
    after: u64,
    /// Reconnects in a row without an event.
    attempts: u32,
    connection: Option<Connection>,
    cancel: Option<CancellationToken>,
    finished: bool,
}

struct Connection {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    parser: SseParser,
    ready: VecDeque<String>,
    /// Whether this connection delivered an event.
    received: bool,
}

enum Pulled {
    Event(Box<SessionEvent>),
    /// The connection ended cleanly.
    End,
}

impl Reader {
    async fn next(&mut self) -> Option<Result<SessionEvent, ClientError>> {
        if self.finished {
            return None;
        }
        if let Some(start) = self.start.take()
            && let Err(error) = self.begin(start).await
        {
            return self.fail(error);
        }
        loop {
            let error = match self.pull().await {
                Ok(Pulled::Event(event)) => {
                    let event = *event;
                    self.after = event.sequence();
                    self.attempts = 0;
                    if event.is_session_closed() {
                        self.finished = true;
                        self.connection = None;
                    }
                    return Some(Ok(event));
                }
                Ok(Pulled::End) => {
                    let received = self.connection.take().is_some_and(|c| c.received);
                    self.attempts = if received { 1 } else { self.attempts + 1 };
                    if self.attempts > self.core.max_event_reconnect_attempts {
                        return self.fail(premature_end());
                    }
                    None
                }
                Err(error) => {
                    self.connection = None;
                    let fatal = error.is_cancelled()
                        || !error.retryable
                        || error.code == ErrorCode::StaleCursor;
                    self.attempts += 1;
                    if fatal || self.attempts > self.core.max_event_reconnect_attempts {
                        return self.fail(error);
                    }
                    Some(error)
                }
            };
            let delay = retry_delay(self.core.retry_base_delay, self.attempts, None);
            self.core.notify(&RetryNotice::EventReconnect {
                session_id: &self.session_id,
                after: self.after,
                attempt: self.attempts,
                delay,
                error: error.as_ref(),
            });
            if let Err(cancelled) = sleep(self.cancel.as_ref(), delay).await {
                return self.fail(cancelled);
            }
        }
    }

    fn fail(&mut self, error: ClientError) -> Option<Result<SessionEvent, ClientError>> {
        self.finished = true;
        self.connection = None;
        Some(Err(error))
    }

    /// Checks the start position (no request for a bad one), then waits for `initialize`.
    async fn begin(&mut self, start: After) -> Result<(), ClientError> {
        self.after = match start {
            After::Start => 0,
            After::Sequence(sequence) => sequence,
            After::Cursor(cursor) => {
                if !cursor.is_valid() || cursor.session_id != self.session_id {
                    return Err(ClientError::invalid_argument("Event cursor is invalid"));
                }
                cursor.sequence
            }
        };
        self.client
            .initialize(CommandOptions {
                command_id: None,
                cancel: self.cancel.clone(),
            })
            .await
            .map(|_| ())
    }

    async fn pull(&mut self) -> Result<Pulled, ClientError> {
        let cancel = self.cancel.clone();
        if self.connection.is_none() {
            let mut url = endpoint(&self.core.base, &["sessions", &self.session_id, "events"]);
            url.query_pairs_mut()
                .append_pair("after", &self.after.to_string());
            let response = self
                .core
                .transport
                .open_events(&url, self.after, cancel.as_ref())
                .await?;
            self.connection = Some(Connection {
                body: response.bytes_stream().boxed(),
                parser: SseParser::new(),
                ready: VecDeque::new(),
                received: false,
            });
        }
        let Some(connection) = self.connection.as_mut() else {
            return Ok(Pulled::End);
        };
        loop {
            if let Some(data) = connection.ready.pop_front() {
                let event = check_event(&data, &self.session_id, self.after)?;
                connection.received = true;
                return Ok(Pulled::Event(Box::new(event)));
            }
            match cancellable(cancel.as_ref(), connection.body.next()).await? {
                None => return Ok(Pulled::End),
                Some(Err(error)) => return Err(ClientError::transport("events", &error)),
                Some(Ok(chunk)) => {
                    let frames = connection.parser.push(&chunk).map_err(ClientError::local)?;
                    connection.ready.extend(frames);
                }
            }
        }
    }
}

/// Parses and checks one frame's data against the session and the last sequence.
fn check_event(data: &str, session_id: &str, after: u64) -> Result<SessionEvent, ClientError> {
    // A frame that is not a valid event is retried like a network error (the reference treats
    // schema failures so), with the status of a bad upstream.
    let invalid_frame = |error: ProtocolError| {
        ClientError::local(error)
            .with_kind(ErrorKind::InvalidResponse)
            .with_status(502)
            .with_retryable(true)
    };
    let (envelope, payload) = parse_event_payload(data.as_bytes()).map_err(invalid_frame)?;
    if envelope.session_id != session_id {
        return Err(stream_violation(format!(
            "Received an event of Session {} on the stream of Session {session_id}",
            envelope.session_id
        )));
    }
    if envelope.sequence <= after {
        return Err(stream_violation(format!(
            "Received non-monotonic event sequence {} after {after}",
            envelope.sequence
        )));
    }
    Ok(SessionEvent { envelope, payload })
}

/// `INVALID_COMMAND` 502, not retryable: the stream fails closed.
fn stream_violation(message: String) -> ClientError {
    ClientError::local(ProtocolError::new(ErrorCode::InvalidCommand, message).with_status(502))
}

fn premature_end() -> ClientError {
    ClientError::local(
        ProtocolError::new(
            ErrorCode::InternalError,
            "Agent event stream ended before Session closure",
        )
        .with_status(502),
    )
}

impl AgentClient {
    /// The events of `session_id`; see [`EventStream`]. Nothing is sent until the first poll.
    pub fn events(&self, session_id: &str, options: EventsOptions) -> EventStream {
        EventStream::new(self.clone(), session_id, options)
    }
}

#[cfg(test)]
mod tests;
