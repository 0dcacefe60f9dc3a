//! The trace adapter of the telemetry port: ended spans are queued and exported in batches by a
//! background task as OTLP/HTTP with the JSON encoding (`POST {endpoint}/v1/traces`).
//!
//! Exporting never slows or fails a command: `record_span` only tries to enqueue (a full queue
//! drops the span), and export failures are logged at debug level without the endpoint (a URL may
//! carry credentials) or the response body.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_runtime::telemetry::{
    AttributeValue, SpanKind, SpanRecord, SpanStatus, Telemetry, TelemetryError,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Spans per export request.
const MAX_BATCH: usize = 512;
/// Spans waiting for export; more are dropped.
const MAX_QUEUE: usize = 4096;
/// Longest wait for an export request.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last export.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how spans are exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The full traces URL, e.g. `http://127.0.0.1:4318/v1/traces`.
    pub traces_url: String,
    /// `service.name` of the resource (`agent-runtime-gateway`, …).
    pub service_name: String,
    /// Adds `blade.agent.tenant.id` to spans (off by default).
    pub include_tenant: bool,
    /// Longest time a span waits in the queue before its batch is sent. Default 1 s.
    pub flush_interval: Duration,
}

/// The `Telemetry` adapter: enqueues sampled spans.
#[derive(Debug)]
pub struct OtlpExporter {
    queue: mpsc::Sender<SpanRecord>,
    dropped: AtomicU64,
}

impl OtlpExporter {
    /// Spans dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Telemetry for OtlpExporter {
    fn record_span(&self, span: &SpanRecord) -> Result<(), TelemetryError> {
        match self.queue.try_send(span.clone()) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                Err(TelemetryError("the span export queue is full".to_owned()))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                Err(TelemetryError("the span exporter has stopped".to_owned()))
            }
        }
    }
}

/// The background task that sends batches; [`OtlpWorker::shutdown`] flushes what is queued.
pub struct OtlpWorker {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl OtlpWorker {
    /// Sends what is still queued (bounded by a timeout), then stops.
    pub async fn shutdown(self) {
        self.stop.cancel();
        if tokio::time::timeout(SHUTDOWN_TIMEOUT, self.task)
            .await
            .is_err()
        {
            tracing::debug!("the last span export did not finish in time");
        }
    }
}

/// Starts the exporter and its background task (must run inside a Tokio runtime).
pub fn start(config: OtlpConfig) -> Result<(Arc<OtlpExporter>, OtlpWorker), String> {
    let client = agent_runtime_http_client::builder()
        .timeout(EXPORT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|_| "the HTTP client of the span exporter could not be created".to_owned())?;
    let (queue, receiver) = mpsc::channel(MAX_QUEUE);
    let stop = CancellationToken::new();
    let task = tokio::spawn(export_loop(client, config, receiver, stop.clone()));
    let exporter = Arc::new(OtlpExporter {
        queue,
        dropped: AtomicU64::new(0),
    });
    Ok((exporter, OtlpWorker { stop, task }))
}

async fn export_loop(
    client: reqwest::Client,
    config: OtlpConfig,
    mut receiver: mpsc::Receiver<SpanRecord>,
    stop: CancellationToken,
) {
    loop {
        let mut batch = Vec::new();
        let stopping = tokio::select! {
            received = receiver.recv_many(&mut batch, MAX_BATCH) => {
                if received == 0 {
                    return;
                }
                false
            }
            () = stop.cancelled() => true,
        };
        // Let the batch fill up for a while: one request per interval, not one per span.
        let deadline = tokio::time::Instant::now() + config.flush_interval;
        let mut stopping = stopping;
        while !stopping && batch.len() < MAX_BATCH {
            let room = MAX_BATCH - batch.len();
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                received = receiver.recv_many(&mut batch, room) => {
                    if received == 0 {
                        break;
                    }
                }
                () = stop.cancelled() => stopping = true,
            }
        }
        if stopping {
            while let Ok(span) = receiver.try_recv() {
                batch.push(span);
            }
        }
        for chunk in batch.chunks(MAX_BATCH) {
            export(&client, &config, chunk).await;
        }
        if stopping {
            return;
        }
    }
}

async fn export(client: &reqwest::Client, config: &OtlpConfig, spans: &[SpanRecord]) {
    if spans.is_empty() {
        return;
    }
    let body = encode(spans, &config.service_name, config.include_tenant);
    let sent = client
        .post(&config.traces_url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await;
    match sent {
        Ok(response) if response.status().is_success() => {}
        Ok(response) => tracing::debug!(
            status = response.status().as_u16(),
            spans = spans.len(),
            "the trace collector refused a span export"
        ),
        Err(error) => tracing::debug!(
            timeout = error.is_timeout(),
            connect = error.is_connect(),
            spans = spans.len(),
            "exporting spans failed"
        ),
    }
}

/// The OTLP/JSON `ExportTraceServiceRequest` of `spans` (ids in hex, times as decimal strings).
pub fn encode(spans: &[SpanRecord], service_name: &str, include_tenant: bool) -> Value {
    let spans: Vec<Value> = spans
        .iter()
        .map(|span| encode_span(span, include_tenant))
        .collect();
    json!({
        "resourceSpans": [{
            "resource": { "attributes": [
                attribute("service.name", &AttributeValue::String(service_name.to_owned())),
                attribute("service.version", &AttributeValue::Str(env!("CARGO_PKG_VERSION"))),
                attribute("telemetry.sdk.name", &AttributeValue::Str("agent-runtime")),
                attribute("telemetry.sdk.language", &AttributeValue::Str("rust")),
            ]},
            "scopeSpans": [{
                "scope": { "name": "agent-runtime", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans,
            }],
        }],
    })
}

fn encode_span(span: &SpanRecord, include_tenant: bool) -> Value {
    let mut attributes: Vec<Value> = span
        .attributes
        .iter()
        .map(|(key, value)| attribute(key, value))
        .collect();
    if include_tenant && let Some(tenant) = &span.tenant_id {
        attributes.push(attribute(
            "blade.agent.tenant.id",
            &AttributeValue::String(tenant.clone()),
        ));
    }
    let kind = match span.kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
    };
    let status = match span.status {
        SpanStatus::Ok => 1,
        SpanStatus::Error => 2,
    };
    let mut value = json!({
        "traceId": hex::encode(span.trace_id),
        "spanId": hex::encode(span.span_id),
        "name": span.name,
        "kind": kind,
        "startTimeUnixNano": span.start_unix_nanos.to_string(),
        "endTimeUnixNano": span.end_unix_nanos.to_string(),
        "attributes": attributes,
        "status": { "code": status },
    });
    if let Some(parent) = span.parent_span_id {
        value["parentSpanId"] = Value::String(hex::encode(parent));
    }
    value
}

fn attribute(key: &str, value: &AttributeValue) -> Value {
    let value = match value {
        AttributeValue::Str(text) => json!({ "stringValue": text }),
        AttributeValue::String(text) => json!({ "stringValue": text }),
        AttributeValue::Int(number) => json!({ "intValue": number.to_string() }),
        AttributeValue::Bool(flag) => json!({ "boolValue": flag }),
    };
    json!({ "key": key, "value": value })
}

#[cfg(test)]
mod tests;
