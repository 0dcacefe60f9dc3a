use std::sync::Mutex;

use agent_runtime::telemetry::{SharedTelemetry, Span, TraceContext};

use super::*;

fn span(name: &'static str, parent: Option<[u8; 8]>, tenant: &str) -> SpanRecord {
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
fn spans_encode_as_otlp_json() {
    let body = encode(
        &[span("blade.agent.server.command", Some([0x02; 8]), "acme")],
        "agent-runtime-gateway",
        false,
    );
    let resource = &body["resourceSpans"][0];
    assert_eq!(
        resource["resource"]["attributes"][0],
        json!({ "key": "service.name", "value": { "stringValue": "agent-runtime-gateway" } })
    );
    let encoded = &resource["scopeSpans"][0]["spans"][0];
    assert_eq!(encoded["traceId"], "abababababababababababababababab");
    assert_eq!(encoded["spanId"], "0101010101010101");
    assert_eq!(encoded["parentSpanId"], "0202020202020202");
    assert_eq!(encoded["name"], "blade.agent.server.command");
    assert_eq!(encoded["kind"], 2);
    assert_eq!(encoded["startTimeUnixNano"], "1700000000000000000");
    assert_eq!(encoded["endTimeUnixNano"], "1700000000500000000");
    assert_eq!(encoded["status"]["code"], 2);
    assert_eq!(
        encoded["attributes"],
        json!([
            { "key": "blade.agent.command.type", "value": { "stringValue": "input.submit" } },
            { "key": "gen_ai.usage.input_tokens", "value": { "intValue": "12" } },
            { "key": "blade.agent.command.idempotent_replay", "value": { "boolValue": true } },
        ])
    );
    assert!(!body.to_string().contains("acme"), "no tenant by default");

    let root = encode(&[span("root", None, "acme")], "svc", true);
    let encoded = &root["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    assert!(encoded.get("parentSpanId").is_none());
    assert!(
        encoded["attributes"].as_array().unwrap().contains(
            &json!({ "key": "blade.agent.tenant.id", "value": { "stringValue": "acme" } })
        )
    );
}

/// A stand-in collector: records the bodies POSTed to `/v1/traces`.
async fn collector() -> (String, Arc<Mutex<Vec<Value>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                sink.lock()
                    .unwrap()
                    .push(serde_json::from_slice::<Value>(&body).unwrap());
                "{}"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/v1/traces"), received)
}

fn exported_names(received: &Mutex<Vec<Value>>) -> Vec<String> {
    received
        .lock()
        .unwrap()
        .iter()
        .flat_map(|body| {
            body["resourceSpans"][0]["scopeSpans"][0]["spans"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|span| span["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn spans_are_exported_in_batches_and_flushed_on_shutdown() {
    let (url, received) = collector().await;
    let (exporter, worker) = start(OtlpConfig {
        traces_url: url,
        service_name: "agent-runtime-test".to_owned(),
        include_tenant: false,
        flush_interval: Duration::from_millis(50),
    })
    .unwrap();
    let telemetry: SharedTelemetry = exporter.clone();
    let parent = Span::start(&telemetry, "parent", SpanKind::Server, None);
    Span::start(
        &telemetry,
        "child",
        SpanKind::Client,
        Some(parent.context()),
    )
    .end(SpanStatus::Ok);
    parent.end(SpanStatus::Ok);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while exported_names(&received).len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "spans exported");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(exported_names(&received), ["child", "parent"]);
    assert_eq!(received.lock().unwrap().len(), 1, "one batch");

    // Spans still queued at shutdown are sent before the worker stops.
    let mut late = Span::start(&telemetry, "late", SpanKind::Internal, None);
    late.set(
        "blade.agent.command.type",
        AttributeValue::Str("session.close"),
    );
    late.end(SpanStatus::Ok);
    worker.shutdown().await;
    assert_eq!(exported_names(&received), ["child", "parent", "late"]);
    assert_eq!(exporter.dropped(), 0);
}

#[tokio::test]
async fn an_unreachable_collector_changes_nothing_for_the_caller() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (exporter, worker) = start(OtlpConfig {
        traces_url: format!("http://127.0.0.1:{port}/v1/traces"),
        service_name: "agent-runtime-test".to_owned(),
        include_tenant: false,
        flush_interval: Duration::from_millis(10),
    })
    .unwrap();
    let parent = TraceContext::new_root();
    let telemetry: SharedTelemetry = exporter;
    for _ in 0..3 {
        Span::start(&telemetry, "span", SpanKind::Server, Some(&parent)).end(SpanStatus::Ok);
    }
    worker.shutdown().await;
}
