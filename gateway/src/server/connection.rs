//! One HTTP/1 connection: hyper with the gateway's limits (head size → `431`, bounded buffers),
//! plus a watchdog for what hyper does not enforce: slow request heads, idle keep-alive, and
//! clients that stop reading a response (an SSE stream, mostly), which are dropped.
//!
//! A client that half-closes (shuts down its write half once its request is sent) still gets its
//! answer: the socket wrapper holds the end of its input back from hyper while a whole answer is
//! due ([`Activity::end_of_input`]). hyper's own `half_close` would do that for every response,
//! SSE streams included, which would then notice a client that went away only when a heartbeat
//! fails, holding its stream slot meanwhile; here a stream still ends at once.
//!
//! Backpressure: hyper asks a response body for its next frame only when its buffer
//! (`write_buffer_bytes`) has room, and the SSE body reads the store only when asked, so a client
//! that stops reading stops the reads; the watchdog then closes its connection once the socket
//! has refused data for `write_timeout`.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use agent_runtime::telemetry::{LimitKind, LimitMetric, best_effort};
use axum::body::Body;
use bytes::Bytes;
use futures_util::FutureExt;
use http_body::{Frame, SizeHint};
use hyper::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tower::ServiceExt;

use super::activity::{Activity, Deadlines, Expiry};
use crate::http::ClientAddr;
use crate::response::failure_response;
use crate::state::AppState;
use agent_runtime::protocol::ProtocolError;
use agent_runtime::protocol::error::pseudo_command_id;

/// Serves one accepted connection until it ends, expires, or the gateway forces it closed.
pub async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: axum::Router,
    state: Arc<AppState>,
) {
    // Frames of a live stream should leave at once, not wait for Nagle.
    let _ = stream.set_nodelay(true);
    let config = &state.config;
    let deadlines = Deadlines {
        header_read: config.header_read_timeout,
        idle: config.idle_timeout,
        write: config.write_timeout,
    };
    let activity = Arc::new(Activity::new());
    let local = stream.local_addr().map(|address| address.ip());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: Arc::clone(&activity),
    });
    let service = ConnectionService {
        router,
        activity: Arc::clone(&activity),
        client: ClientAddr(peer.ip()),
        // Unknown local address: treated as loopback, so the stricter rule applies.
        local: local.unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
        state: Arc::clone(&state),
    };
    let mut builder = http1::Builder::new();
    // hyper also caps a head at 100 header fields (its default, kept: a larger cap would put the
    // parser's field buffer on the heap for every request); more get the same 431
    // (docs/configuration.md, `max_header_bytes`).
    builder
        .max_header_size(config.max_header_bytes)
        .max_buf_size(config.write_buffer_bytes)
        // The watchdog below times heads; hyper's own timer would also cut idle keep-alive.
        .header_read_timeout(None)
        // Not hyper's `half_close`: see the module comment (`Watched` holds the end of input).
        .half_close(false)
        .keep_alive(true);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);

    let mut watchdog = tokio::time::interval(deadlines.tick());
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let lifecycle = &state.lifecycle;
    let mut draining = false;
    loop {
        tokio::select! {
            outcome = connection.as_mut() => {
                if let Err(error) = outcome {
                    tracing::debug!(error = %error, "connection ended with an error");
                }
                return;
            }
            _ = watchdog.tick() => {
                if let Some(expiry) = activity.expired(&deadlines) {
                    record_expiry(&state, expiry);
                    // Dropping the connection closes the socket; a response body still held
                    // (an SSE stream) is dropped with it, which frees its stream slot.
                    return;
                }
            }
            () = lifecycle.draining().cancelled(), if !draining => {
                draining = true;
                // Finishes the response in flight (SSE streams end on the same signal), then
                // closes instead of waiting for another request.
                connection.as_mut().graceful_shutdown();
            }
            () = lifecycle.forced().cancelled() => return,
        }
    }
}

fn record_expiry(state: &AppState, expiry: Expiry) {
    let limit = match expiry {
        Expiry::Idle => {
            tracing::trace!("closing an idle keep-alive connection");
            return;
        }
        Expiry::HeaderTimeout => {
            tracing::debug!("closing a connection whose request head did not arrive in time");
            LimitKind::HeaderTimeout
        }
        Expiry::SlowReader => {
            tracing::info!("closing a connection whose client stopped reading its response");
            LimitKind::SlowReader
        }
    };
    best_effort(|| state.telemetry.record_limit(&LimitMetric { limit }));
}

/// The socket, telling the activity when bytes arrive.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) {
            if buf.filled().len() > before {
                self.activity.bytes_arrived();
            } else if room && self.activity.end_of_input(cx.waker()) {
                // The end of the input: held until the answer is out (a half-closed client).
                return Poll::Pending;
            }
        }
        polled
    }
}

impl Watched {
    /// Reports whether the socket took data (the client reads) or refused it (it does not).
    fn written<T>(&self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match &polled {
            Poll::Pending => self.activity.write_blocked(),
            Poll::Ready(Ok(_)) => self.activity.write_progressed(),
            Poll::Ready(Err(_)) => {}
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.written(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.written(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router behind one connection, counting its requests in flight and telling each request
/// which address it came from.
#[derive(Clone)]
struct ConnectionService {
    router: axum::Router,
    activity: Arc<Activity>,
    client: ClientAddr,
    /// The address the connection arrived on, for the DNS-rebinding guard.
    local: std::net::IpAddr,
    /// For the configured `allowed_hosts`.
    state: Arc<AppState>,
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<hyper::Response<Tracked>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = hyper::Response<Tracked>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(self.client);
        let in_flight = InFlight::start(Arc::clone(&self.activity));
        let host = crate::http::host::check(
            request.version(),
            request.uri(),
            request.headers(),
            self.local,
            &self.state.config.allowed_hosts,
        );
        if let Err(error) = host {
            let response = failure_response(pseudo_command_id::ROUTING, &error, false);
            return Box::pin(async move {
                Ok(response.map(|body| Tracked {
                    body,
                    _in_flight: in_flight,
                }))
            });
        }
        let router = self.router.clone();
        let activity = Arc::clone(&self.activity);
        Box::pin(async move {
            let request = request.map(|body| {
                Body::new(RequestBody {
                    body,
                    activity: Arc::clone(&activity),
                })
            });
            // A panic in a handler answers an opaque 500 instead of dropping the connection; the
            // panic hook has logged where it happened.
            let handled = AssertUnwindSafe(router.oneshot(request))
                .catch_unwind()
                .await;
            let response = match handled {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_panic) => {
                    tracing::error!("a request handler panicked; answered 500");
                    failure_response(
                        pseudo_command_id::INTERNAL,
                        &ProtocolError::internal(),
                        false,
                    )
                }
            };
            if http_body::Body::size_hint(response.body())
                .exact()
                .is_none()
            {
                activity.response_streams();
            }
            Ok(response.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// A request body that fails, instead of waiting forever, when the client's input ends inside it
/// (a truncated body): the end of the input is held back from hyper while an answer is due (see
/// [`Activity::end_of_input`]), so hyper would not see it.
struct RequestBody {
    body: Incoming,
    activity: Arc<Activity>,
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Pending if self.activity.input_ended(cx.waker()) => {
                Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the request ended inside its body",
                )
                .into())))
            }
            Poll::Pending => Poll::Pending,
            Poll::Ready(frame) => Poll::Ready(frame.map(|frame| frame.map_err(Into::into))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request in flight on the connection, until its response body is done or dropped (or the
/// handler's future is dropped before it answered).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> Self {
        activity.request_started();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}

/// A response body that holds its request's [`InFlight`] until it is done or dropped.
pub struct Tracked {
    body: Body,
    /// Released with the body.
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> SizeHint {
        http_body::Body::size_hint(&self.body)
    }
}
