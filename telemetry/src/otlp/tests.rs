use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue;

use super::*;

fn record(name: &'static str, parent: Option<[u8; 8]>, tenant: &str) -> SpanRecord {
    SpanRecord {
        name,
        kind: SpanKind::Server,
        trace_id: [0xab; 16],
        span_id: [0x01; 8],
        parent_span_id: parent,
        start_unix_nanos: 1_700_000_000_000_000_000,
        end_unix_nanos: 1_700_000_000_500_000_000,
        attributes: vec![
            (
                "blade.agent.command.type",
                AttributeValue::Str("input.submit"),
            ),
            ("gen_ai.usage.input_tokens", AttributeValue::Int(12)),
            (
                "blade.agent.command.idempotent_replay",
                AttributeValue::Bool(true),
            ),
        ],
        tenant_id: Some(tenant.to_owned()),
        status: SpanStatus::Error,
    }
}

#[test]
fn a_port_record_becomes_the_sdks_span_with_the_same_ids_times_and_attributes() {
    let scope = InstrumentationScope::builder("agent-runtime").build();
    let span = span_data(
        &record("blade.agent.server.command", Some([0x02; 8]), "acme"),
        false,
        &scope,
    );
    assert_eq!(
        span.span_context.trace_id().to_string(),
        "abababababababababababababababab"
    );
    assert_eq!(span.span_context.span_id().to_string(), "0101010101010101");
    assert!(span.span_context.is_sampled());
    assert_eq!(span.parent_span_id.to_string(), "0202020202020202");
    assert_eq!(span.name, "blade.agent.server.command");
    assert_eq!(span.span_kind, OtelKind::Server);
    assert_eq!(
        span.end_time.duration_since(span.start_time).unwrap(),
        Duration::from_millis(500)
    );
    assert_eq!(span.status, Status::error(""));
    assert_eq!(
        span.attributes,
        vec![
            KeyValue::new("blade.agent.command.type", "input.submit"),
            KeyValue::new("gen_ai.usage.input_tokens", 12_i64),
            KeyValue::new("blade.agent.command.idempotent_replay", true),
        ]
    );

    let root = span_data(&record("root", None, "acme"), true, &scope);
    assert_eq!(root.parent_span_id, SpanId::INVALID);
    assert!(
        root.attributes
            .contains(&KeyValue::new("blade.agent.tenant.id", "acme"))
    );
}

/// An OTLP/gRPC receiver on the OpenTelemetry project's generated service: keeps every request.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn grpc_receiver() -> (Receiver, String) {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(receiver.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });
    (receiver, format!("http://{address}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_out_over_grpc_in_batches_and_the_rest_on_shutdown() {
    let (receiver, endpoint) = grpc_receiver().await;
    let exporter = Arc::new(
        start(OtlpConfig {
            endpoint,
            protocol: OtlpProtocol::Grpc,
            service_name: "agent-runtime-test".to_owned(),
            include_tenant: false,
            flush_interval: Duration::from_secs(60),
        })
        .unwrap(),
    );
    for _ in 0..3 {
        exporter
            .record_span(&record("blade.agent.server.command", None, "acme"))
            .unwrap();
    }
    // Nothing before the flush interval; everything at shutdown.
    assert!(receiver.0.lock().unwrap().is_empty());
    exporter.shutdown().await;
    let requests = receiver.0.lock().unwrap();
    let resource_spans: Vec<_> = requests.iter().flat_map(|r| &r.resource_spans).collect();
    let service = resource_spans[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .find(|kv| kv.key == "service.name")
        .unwrap();
    assert!(
        matches!(
            service.value.as_ref().and_then(|value| value.value.as_ref()),
            Some(StringValue(name)) if name == "agent-runtime-test"
        ),
        "{service:?}"
    );
    let spans: Vec<_> = resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect();
    assert_eq!(spans.len(), 3);
    assert_eq!(spans[0].trace_id, vec![0xab; 16]);
    assert_eq!(spans[0].name, "blade.agent.server.command");
    assert!(
        !format!("{requests:?}").contains("acme"),
        "no tenant by default"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_changes_nothing_for_the_caller() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let exporter = Arc::new(
        start(OtlpConfig {
            endpoint: format!("http://127.0.0.1:{port}/v1/traces"),
            protocol: OtlpProtocol::HttpProtobuf,
            service_name: "agent-runtime-test".to_owned(),
            include_tenant: false,
            flush_interval: Duration::from_millis(10),
        })
        .unwrap(),
    );
    for _ in 0..10_000 {
        exporter
            .record_span(&record("blade.agent.server.command", None, "acme"))
            .unwrap();
    }
    // Every span was taken without an error or a wait, and shutdown returns although nothing
    // could be delivered.
    exporter.shutdown().await;
}
