//! The telemetry adapters (docs/protocol.md §10): Prometheus metrics (`prometheus-client`) behind
//! the telemetry port, rendered at `GET /metrics` in the format the scraper asks for, and
//! OTLP export (HTTP/protobuf or gRPC, on the OpenTelemetry SDK) of the spans the gateway and
//! executor record. Binaries wire them; the gateway, executor and store only see the port.
//!
//! Nothing here ever sees a prompt, a tool argument, a token or a provider key: the port's
//! records carry identifiers, types, codes and durations only.

pub mod http;
pub mod otlp;
pub mod prometheus;
pub mod registry;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::telemetry::{Fanout, Sampler, SharedTelemetry};

pub use crate::http::{MetricsServer, exposition, negotiate, serve_metrics};
pub use crate::otlp::{OtlpConfig, OtlpExporter, OtlpProtocol};
pub use crate::prometheus::PrometheusTelemetry;
pub use crate::registry::Format;

/// The `[telemetry]` settings of a process. Tests build this directly.
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// Serve `GET /metrics` on the HTTP API listener, without a token. Default true.
    pub metrics: bool,
    /// Serve `GET /metrics` on this address instead (the API listener then has no `/metrics`).
    /// The cluster executor's only HTTP listener. Default: none.
    pub metrics_listen: Option<SocketAddr>,
    /// Tenant ids as the `tenant` metric label and the `blade.agent.tenant.id` span attribute
    /// (the reference's `includeTenantAttributes`). Default false.
    pub include_tenant_attributes: bool,
    /// OTLP base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`); over HTTP spans go to
    /// `{endpoint}/v1/traces`, over gRPC to the endpoint itself. Default: none, and nothing is
    /// exported.
    pub otlp_endpoint: Option<String>,
    /// The full traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); wins over `otlp_endpoint`.
    pub otlp_traces_endpoint: Option<String>,
    /// `http/protobuf` (default) or `grpc` (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`,
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`).
    pub otlp_protocol: OtlpProtocol,
    /// `service.name` of exported spans (`OTEL_SERVICE_NAME`). Default: `agent-runtime`,
    /// `agent-runtime-gateway` or `agent-runtime-executor`.
    pub service_name: Option<String>,
    /// Longest time a span waits before its batch is exported. Milliseconds, default 1000.
    pub otlp_flush_interval: Duration,
    /// Which traces are recorded (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`). Default
    /// `parentbased_always_on`.
    pub sampler: Sampler,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            metrics: true,
            metrics_listen: None,
            include_tenant_attributes: false,
            otlp_endpoint: None,
            otlp_traces_endpoint: None,
            otlp_protocol: OtlpProtocol::HttpProtobuf,
            service_name: None,
            otlp_flush_interval: Duration::from_secs(1),
            sampler: Sampler::default(),
        }
    }
}

impl TelemetryConfig {
    /// Where spans are exported and how, if anywhere.
    pub fn otlp_target(&self) -> Option<(String, OtlpProtocol)> {
        let protocol = self.otlp_protocol;
        if let Some(url) = self.otlp_traces_endpoint.as_ref().filter(|u| !u.is_empty()) {
            return Some((url.clone(), protocol));
        }
        let endpoint = self.otlp_endpoint.as_ref().filter(|e| !e.is_empty())?;
        let url = match protocol {
            OtlpProtocol::HttpProtobuf => {
                format!("{}/v1/traces", endpoint.trim_end_matches('/'))
            }
            OtlpProtocol::Grpc => endpoint.clone(),
        };
        Some((url, protocol))
    }

    /// Refuses endpoints that are not `http://` or `https://` URLs.
    pub fn validate(&self) -> Result<(), String> {
        if let Some((url, _)) = self.otlp_target()
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err("telemetry.otlp_endpoint must be an http:// or https:// URL".to_owned());
        }
        Ok(())
    }
}

/// Which process the telemetry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    Serve,
    Gateway,
    Executor,
}

impl Process {
    fn as_str(self) -> &'static str {
        match self {
            Process::Serve => "serve",
            Process::Gateway => "gateway",
            Process::Executor => "executor",
        }
    }

    fn default_service_name(self) -> &'static str {
        match self {
            Process::Serve => "agent-runtime",
            Process::Gateway => "agent-runtime-gateway",
            Process::Executor => "agent-runtime-executor",
        }
    }
}

/// The adapters of one process, wired behind one port.
pub struct TelemetryStack {
    /// What the gateway, executor and store are given.
    pub telemetry: SharedTelemetry,
    pub metrics: Arc<PrometheusTelemetry>,
    otlp: Option<Arc<OtlpExporter>>,
}

impl TelemetryStack {
    /// Builds the metrics registry and, when an endpoint is configured, the span exporter (inside
    /// a Tokio runtime). `extra` adapters (an audit log, a test's recorder) join the fan-out.
    pub fn start(
        config: &TelemetryConfig,
        process: Process,
        extra: Vec<SharedTelemetry>,
    ) -> Result<Self, String> {
        config.validate()?;
        let metrics = Arc::new(PrometheusTelemetry::new(
            process.as_str(),
            config.include_tenant_attributes,
        ));
        let mut adapters: Vec<SharedTelemetry> = vec![metrics.clone()];
        let otlp = match config.otlp_target() {
            Some((endpoint, protocol)) => {
                let service_name = config
                    .service_name
                    .clone()
                    .unwrap_or_else(|| process.default_service_name().to_owned());
                let exporter = Arc::new(otlp::start(OtlpConfig {
                    endpoint,
                    protocol,
                    service_name,
                    include_tenant: config.include_tenant_attributes,
                    flush_interval: config.otlp_flush_interval,
                })?);
                tracing::info!(protocol = ?protocol, "exporting traces over OTLP");
                adapters.push(exporter.clone());
                Some(exporter)
            }
            None => None,
        };
        adapters.extend(extra);
        Ok(Self {
            telemetry: Arc::new(Fanout {
                adapters,
                sampler: config.sampler.clone(),
            }),
            metrics,
            otlp,
        })
    }

    /// Flushes queued spans (bounded); call after the server stopped.
    pub async fn shutdown(self) {
        if let Some(exporter) = self.otlp {
            exporter.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_otlp_target_comes_from_the_endpoint_or_the_traces_endpoint() {
        let mut config = TelemetryConfig::default();
        assert_eq!(config.otlp_target(), None);
        config.otlp_endpoint = Some("http://collector:4318/".to_owned());
        assert_eq!(
            config.otlp_target(),
            Some((
                "http://collector:4318/v1/traces".to_owned(),
                OtlpProtocol::HttpProtobuf
            ))
        );
        config.otlp_protocol = OtlpProtocol::Grpc;
        config.otlp_endpoint = Some("http://collector:4317".to_owned());
        assert_eq!(
            config.otlp_target(),
            Some(("http://collector:4317".to_owned(), OtlpProtocol::Grpc))
        );
        config.otlp_traces_endpoint = Some("https://otel.example/api/traces".to_owned());
        assert_eq!(
            config.otlp_target(),
            Some((
                "https://otel.example/api/traces".to_owned(),
                OtlpProtocol::Grpc
            ))
        );
        assert!(config.validate().is_ok());
        config.otlp_traces_endpoint = Some("collector:4318".to_owned());
        assert!(config.validate().is_err());
    }

    #[test]
    fn only_the_two_standard_protocols_are_accepted() {
        assert_eq!(
            OtlpProtocol::parse("http/protobuf"),
            Ok(OtlpProtocol::HttpProtobuf)
        );
        assert_eq!(OtlpProtocol::parse(" grpc "), Ok(OtlpProtocol::Grpc));
        assert!(OtlpProtocol::parse("http/json").is_err());
    }
}
