//! `GET /metrics`: content negotiation between the two text formats, and a listener that serves
//! only that route — the executor's (which has no HTTP API otherwise), and the gateway's when
//! `[telemetry] metrics_listen` moves metrics off the API listener.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::prometheus::PrometheusTelemetry;
use crate::registry::Format;

/// The format an `Accept` header prefers: OpenMetrics when it names
/// `application/openmetrics-text` with a quality at least that of plain text (as Prometheus
/// does), the Prometheus text format otherwise (no header, `*/*`, `text/plain`).
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Prometheus;
    };
    let (mut openmetrics, mut text) = (0.0_f32, 0.0_f32);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let quality = parts
            .filter_map(|param| param.split_once('='))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, value)| value.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
            "text/plain" | "text/*" | "*/*" => text = text.max(quality),
            _ => {}
        }
    }
    if openmetrics > 0.0 && openmetrics >= text {
        Format::OpenMetrics
    } else {
        Format::Prometheus
    }
}

/// The content type and body answering a scrape with this `Accept` header.
pub fn exposition(metrics: &PrometheusTelemetry, accept: Option<&str>) -> (&'static str, String) {
    let format = negotiate(accept);
    (format.content_type(), metrics.render(format))
}

/// The router of a metrics listener.
pub fn metrics_router(metrics: Arc<PrometheusTelemetry>) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let metrics = metrics.clone();
            async move {
                let accept = headers
                    .get(header::ACCEPT)
                    .and_then(|value| value.to_str().ok());
                let (content_type, body) = exposition(&metrics, accept);
                let mut response = body.into_response();
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
                response
            }
        }),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_plain_text() {
        // What Prometheus 2.x and 3.x send.
        for accept in [
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
            "Application/OpenMetrics-Text",
        ] {
            assert_eq!(negotiate(Some(accept)), Format::OpenMetrics, "{accept}");
        }
        for accept in [
            None,
            Some("*/*"),
            Some("text/plain"),
            Some("text/plain;version=0.0.4"),
            Some("application/openmetrics-text;q=0"),
            Some("application/openmetrics-text;q=0.2, text/plain;q=0.9"),
            Some("application/json"),
            Some("garbage;;;q=x"),
        ] {
            assert_eq!(negotiate(accept), Format::Prometheus, "{accept:?}");
        }
    }
}
