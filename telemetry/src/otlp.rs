//! The trace adapter of the telemetry port: ended spans are handed to the OpenTelemetry SDK's
//! batch processor (on Tokio), which exports them with the OTLP exporter over HTTP/protobuf or
//! gRPC, as configured or as the standard `OTEL_EXPORTER_OTLP_*` variables say.
//!
//! Spans are recorded through the port, not through `tracing`: their attributes come from fixed
//! keys with identifier, code or number values (`agent_runtime::telemetry::trace`), so no log
//! line, prompt or tool argument can become part of an exported span.
//!
//! Exporting never slows or fails a command: `record_span` only enqueues (a full queue drops the
//! span), and export failures stay inside the SDK (its internal logs are not enabled).

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_runtime::telemetry::{
    AttributeValue, SpanKind, SpanRecord, SpanStatus, Telemetry, TelemetryError,
};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind as OtelKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::runtime::Tokio;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, SpanData, SpanEvents, SpanExporter as _, SpanLinks, SpanProcessor,
};

/// Spans waiting for export; more are dropped.
const MAX_QUEUE: usize = 4096;
/// Spans per export request.
const MAX_BATCH: usize = 512;
/// Longest wait for one export request.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last export.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The OTLP transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `http/protobuf`: `POST {endpoint}/v1/traces` (the default, as in the SDK specification).
    HttpProtobuf,
    /// `grpc`: the collector's `TraceService/Export` at the endpoint.
    Grpc,
}

impl OtlpProtocol {
    /// The value of `OTEL_EXPORTER_OTLP_PROTOCOL` (or `telemetry.otlp_protocol`).
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim() {
            "http/protobuf" => Ok(Self::HttpProtobuf),
            "grpc" => Ok(Self::Grpc),
            other => Err(format!(
                "OTLP protocol {other:?} is not supported: use \"http/protobuf\" or \"grpc\""
            )),
        }
    }
}

/// Where and how spans are exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The URL spans are sent to: `http://collector:4318/v1/traces` over HTTP,
    /// `http://collector:4317` over gRPC.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// `service.name` of the resource (`agent-runtime-gateway`, …).
    pub service_name: String,
    /// Adds `blade.agent.tenant.id` to spans (off by default).
    pub include_tenant: bool,
    /// Longest time a span waits in the queue before its batch is sent. Default 1 s.
    pub flush_interval: Duration,
}

/// The `Telemetry` adapter: converts ended spans and hands them to the batch processor.
#[derive(Debug)]
pub struct OtlpExporter {
    processor: BatchSpanProcessor<Tokio>,
    include_tenant: bool,
    scope: InstrumentationScope,
}

impl Telemetry for OtlpExporter {
    fn record_span(&self, span: &SpanRecord) -> Result<(), TelemetryError> {
        self.processor
            .on_end(span_data(span, self.include_tenant, &self.scope));
        Ok(())
    }
}

impl OtlpExporter {
    /// Exports what is still queued (bounded by a timeout), then stops the processor.
    pub async fn shutdown(self: std::sync::Arc<Self>) {
        // The SDK's shutdown blocks its thread until the Tokio task it talks to answers: run it
        // off the runtime's threads so that task can run.
        let stopping = tokio::task::spawn_blocking(move || self.processor.shutdown());
        match tokio::time::timeout(SHUTDOWN_TIMEOUT, stopping).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => {
                tracing::debug!(error = %error, "the span exporter stopped with an error")
            }
            Ok(Err(_)) | Err(_) => tracing::debug!("the last span export did not finish in time"),
        }
    }
}

/// Builds the exporter and its batch processor (must run inside a Tokio runtime).
pub fn start(config: OtlpConfig) -> Result<OtlpExporter, String> {
    let refused = |error: opentelemetry_otlp::ExporterBuildError| {
        format!("the OTLP span exporter could not be created: {error}")
    };
    let mut exporter = match config.protocol {
        OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            // Ours: its TLS is the process's (rustls on ring), and it never follows redirects.
            .with_http_client(http_client()?)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(&config.endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(refused)?,
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(&config.endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(refused)?,
    };
    // `OTEL_RESOURCE_ATTRIBUTES` and the SDK's own attributes join the service name.
    exporter.set_resource(
        &Resource::builder()
            .with_service_name(config.service_name.clone())
            .build(),
    );
    let batches = BatchConfigBuilder::default()
        .with_max_queue_size(MAX_QUEUE)
        .with_max_export_batch_size(MAX_BATCH)
        .with_scheduled_delay(config.flush_interval)
        .build();
    let processor = BatchSpanProcessor::builder(exporter, Tokio)
        .with_batch_config(batches)
        .build();
    Ok(OtlpExporter {
        processor,
        include_tenant: config.include_tenant,
        scope: InstrumentationScope::builder("agent-runtime")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    })
}

fn http_client() -> Result<reqwest::Client, String> {
    agent_runtime_http_client::builder()
        .timeout(EXPORT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|_| "the HTTP client of the span exporter could not be created".to_owned())
}

/// The SDK's span of one port record: ids, times, kind, status and the fixed attributes.
pub fn span_data(
    span: &SpanRecord,
    include_tenant: bool,
    scope: &InstrumentationScope,
) -> SpanData {
    let mut attributes: Vec<KeyValue> = span
        .attributes
        .iter()
        .map(|(key, value)| KeyValue::new(*key, attribute(value)))
        .collect();
    if include_tenant && let Some(tenant) = &span.tenant_id {
        attributes.push(KeyValue::new("blade.agent.tenant.id", tenant.clone()));
    }
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(span.trace_id),
            SpanId::from_bytes(span.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        ),
        parent_span_id: span
            .parent_span_id
            .map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: false,
        span_kind: match span.kind {
            SpanKind::Internal => OtelKind::Internal,
            SpanKind::Server => OtelKind::Server,
            SpanKind::Client => OtelKind::Client,
        },
        name: Cow::Borrowed(span.name),
        start_time: at(span.start_unix_nanos),
        end_time: at(span.end_unix_nanos),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: match span.status {
            SpanStatus::Ok => Status::Ok,
            SpanStatus::Error => Status::error(""),
        },
        instrumentation_scope: scope.clone(),
    }
}

fn attribute(value: &AttributeValue) -> opentelemetry::Value {
    match value {
        AttributeValue::Str(text) => (*text).into(),
        AttributeValue::String(text) => text.clone().into(),
        AttributeValue::Int(number) => (*number).into(),
        AttributeValue::Bool(flag) => (*flag).into(),
    }
}

fn at(unix_nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(unix_nanos)
}

#[cfg(test)]
mod tests;
