//! Serving the router on a listener with hyper's HTTP/1 connection builder (axum's `serve` cannot
//! limit header sizes or time connections), and the shutdown sequence of `lifecycle.rs`: not
//! ready → (delay) → stop accepting and drain → (grace) → force.

mod activity;
mod connection;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::state::AppState;

/// Accepts connections until `shutdown` fires, then shuts down in phases. Returns once every
/// connection is closed and every sealed command has finished, or the grace period is over.
pub async fn run(listener: TcpListener, state: Arc<AppState>, shutdown: CancellationToken) {
    let router = crate::http::router(Arc::clone(&state));
    let connections = TaskTracker::new();
    let lifecycle = &state.lifecycle;
    let readiness_delay = state.config.shutdown_readiness_delay;
    let stop_accepting = async {
        shutdown.cancelled().await;
        lifecycle.mark_not_ready();
        tracing::info!(
            readiness_delay_ms = readiness_delay.as_millis() as u64,
            "shutting down: readyz answers 503 before the listener closes"
        );
        tokio::time::sleep(readiness_delay).await;
    };
    tokio::pin!(stop_accepting);
    loop {
        tokio::select! {
            () = &mut stop_accepting => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    connections.spawn(connection::serve_connection(
                        stream,
                        peer,
                        router.clone(),
                        Arc::clone(&state),
                    ));
                }
                Err(error) => accept_failed(&error).await,
            },
        }
    }
    // New connections are refused by the kernel from here on.
    drop(listener);
    lifecycle.begin_drain();
    connections.close();
    state.commands.close();
    let grace = state.config.shutdown_grace;
    let deadline = tokio::time::Instant::now() + grace;
    // Sealed commands reach their result, then an in-process executor stops its sessions (a
    // running request stores its terminal events), and only then do the streams send what is
    // stored and end, so a follower sees its request end before its stream closes. (A remote
    // executor is not stopped by a gateway: its shutdown here does nothing.)
    let _ = tokio::time::timeout_at(deadline, state.commands.wait()).await;
    let _ = tokio::time::timeout_at(deadline, state.executor.shutdown()).await;
    lifecycle.end_streams();
    let drained = tokio::time::timeout_at(deadline, async {
        connections.wait().await;
        state.commands.wait().await;
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "in-flight requests did not finish within the shutdown grace period; closing their connections"
        );
        lifecycle.force();
        connections.wait().await;
    }
}

/// A failed accept: the peer's own problem (reset before accept) is skipped; anything else (out
/// of file descriptors) is logged and retried after a pause instead of spinning.
async fn accept_failed(error: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    tracing::warn!(error = %error, "accepting a connection failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}
