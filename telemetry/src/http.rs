//! A listener that serves only `GET /metrics`: the executor's (which has no HTTP API otherwise),
//! and the gateway's when `[telemetry] metrics_listen` moves metrics off the API listener.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::prometheus::PrometheusTelemetry;

/// The content type of the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The router of a metrics listener.
pub fn metrics_router(metrics: Arc<PrometheusTelemetry>) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { exposition(&metrics) }
        }),
    )
}

fn exposition(metrics: &PrometheusTelemetry) -> Response {
    let mut response = metrics.render().into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

/// A running metrics listener.
pub struct MetricsServer {
    pub address: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
}

impl MetricsServer {
    pub async fn shutdown(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(error = %error, "the metrics listener failed"),
            Err(error) => tracing::warn!(error = %error, "the metrics listener panicked"),
        }
    }
}

/// Serves `GET /metrics` on `listener` until [`MetricsServer::shutdown`].
pub fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<PrometheusTelemetry>,
) -> std::io::Result<MetricsServer> {
    let address = listener.local_addr()?;
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        axum::serve(listener, metrics_router(metrics))
            .with_graceful_shutdown(stopped.cancelled_owned())
            .await
    });
    Ok(MetricsServer {
        address,
        stop,
        task,
    })
}
