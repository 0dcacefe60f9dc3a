//! The telemetry adapters (docs/protocol.md §10): Prometheus metrics (`prometheus-client`) behind
//! the telemetry port, rendered at `GET /metrics` in the format the scraper asks for, and
//! OTLP/HTTP export of the spans the gateway and executor record. Binaries wire them; the gateway, executor and store only see the port.
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

use agent_runtime::telemetry::{Fanout, SharedTelemetry};

pub use crate::http::{MetricsServer, exposition, negotiate, serve_metrics};
pub use crate::otlp::{OtlpConfig, OtlpExporter, OtlpWorker};
pub use crate::prometheus::PrometheusTelemetry;
pub use crate::registry::Format;

/// The `[telemetry]` settings of a process. Tests build this directly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// Serve `GET /metrics` on the HTTP API listener, without a token. Default true.
    pub metrics: bool,
    /// Serve `GET /metrics` on this address instead (the API listener then has no `/metrics`).
    /// The cluster executor's only HTTP listener. Default: none.
    pub metrics_listen: Option<SocketAddr>,
    /// Tenant ids as the `tenant` metric label and the `blade.agent.tenant.id` span attribute
    /// (the reference's `includeTenantAttributes`). Default false.
    pub include_tenant_attributes: bool,
    /// OTLP/HTTP base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`); spans go to
    /// `{endpoint}/v1/traces`. Default: none, and nothing is exported.
    pub otlp_endpoint: Option<String>,
    /// The full traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); wins over `otlp_endpoint`.
    pub otlp_traces_endpoint: Option<String>,
    /// `service.name` of exported spans (`OTEL_SERVICE_NAME`). Default: `agent-runtime`,
    /// `agent-runtime-gateway` or `agent-runtime-executor`.
    pub service_name: Option<String>,
    /// Longest time a span waits before its batch is exported. Milliseconds, default 1000.
    pub otlp_flush_interval: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            metrics: true,
            metrics_listen: None,
            include_tenant_attributes: false,
            otlp_endpoint: None,
            otlp_traces_endpoint: None,
            service_name: None,
            otlp_flush_interval: Duration::from_secs(1),
        }
    }
}

impl TelemetryConfig {
    /// Where spans are exported, if anywhere.
    pub fn traces_url(&self) -> Option<String> {
        if let Some(url) = self.otlp_traces_endpoint.as_ref().filter(|u| !u.is_empty()) {
            return Some(url.clone());
        }
        self.otlp_endpoint
            .as_ref()
            .filter(|endpoint| !endpoint.is_empty())
            .map(|endpoint| format!("{}/v1/traces", endpoint.trim_end_matches('/')))
    }

    /// Refuses endpoints that are not `http://` or `https://` URLs.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = self.traces_url()
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
    otlp: Option<OtlpWorker>,
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
        let otlp = match config.traces_url() {
            Some(traces_url) => {
                let service_name = config
                    .service_name
                    .clone()
                    .unwrap_or_else(|| process.default_service_name().to_owned());
                let (exporter, worker) = otlp::start(OtlpConfig {
                    traces_url,
                    service_name,
                    include_tenant: config.include_tenant_attributes,
                    flush_interval: config.otlp_flush_interval,
                })?;
                tracing::info!("exporting traces over OTLP/HTTP");
                adapters.push(exporter);
                Some(worker)
            }
            None => None,
        };
        adapters.extend(extra);
        Ok(Self {
            telemetry: Arc::new(Fanout(adapters)),
            metrics,
            otlp,
        })
    }

    /// Flushes queued spans (bounded); call after the server stopped.
    pub async fn shutdown(self) {
        if let Some(worker) = self.otlp {
            worker.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_comes_from_the_endpoint_or_the_traces_endpoint() {
        let mut config = TelemetryConfig::default();
        assert_eq!(config.traces_url(), None);
        config.otlp_endpoint = Some("http://collector:4318/".to_owned());
        assert_eq!(
            config.traces_url().as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        config.otlp_traces_endpoint = Some("https://otel.example/api/traces".to_owned());
        assert_eq!(
            config.traces_url().as_deref(),
            Some("https://otel.example/api/traces")
        );
        assert!(config.validate().is_ok());
        config.otlp_traces_endpoint = Some("collector:4318".to_owned());
        assert!(config.validate().is_err());
    }
}
