//! `serve` configured only by the standard OpenTelemetry variables to export over gRPC
//! (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`): its spans reach an OTLP/gRPC receiver built on the
//! OpenTelemetry project's generated `TraceService`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;

use crate::support::{command, serve_with_env, stop};

/// Every span received, with its resource's `service.name`.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<(String, Span)>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().unwrap();
        for resource in request.into_inner().resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    AnyValue::StringValue(name) => Some(name.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for scope in resource.scope_spans {
                spans.extend(scope.spans.into_iter().map(|span| (service.clone(), span)));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exports_over_grpc_when_the_standard_variables_say_so() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let service = TraceServiceServer::new(receiver.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });

    let dir = tempfile::tempdir().unwrap();
    let served = serve_with_env(
        dir.path(),
        &["--listen", "127.0.0.1:0"],
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "serve-over-grpc"),
        ],
    );
    command(&served, "session.create", json!({})).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (gateway, executor) = loop {
        let spans = receiver.0.lock().unwrap().clone();
        let named = |name: &str| spans.iter().find(|(_, span)| span.name == name).cloned();
        if let (Some(gateway), Some(executor)) = (
            named("blade.agent.server.command"),
            named("blade.agent.executor.command"),
        ) {
            break (gateway, executor);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "spans before the deadline"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(gateway.0, "serve-over-grpc");
    assert_eq!(executor.1.trace_id, gateway.1.trace_id);
    // In one process the executor's span is directly under the gateway's: no gRPC hop.
    assert_eq!(executor.1.parent_span_id, gateway.1.span_id);
    stop(served);
}
