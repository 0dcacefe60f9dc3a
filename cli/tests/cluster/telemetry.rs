//! Telemetry of a real cluster: PostgreSQL, one gateway and one executor as child processes,
//! exporting spans over OTLP/HTTP (protobuf) to an independent receiver (the OpenTelemetry
//! project's Python protobuf definitions). One command yields one trace from the client's
//! `traceparent` through the gateway, the gRPC hop and the executor to the model call, while a
//! command without one is not recorded by either process (`parentbased_always_off`); both
//! processes' `/metrics` count what the test did.

use std::process::Child;

use crate::support::cluster::{SECRET, TENANT, TOKEN, gateway_config, printed_address, spawn};
use crate::support::otlp::OtlpReceiver;
use crate::support::{Served, events_until, stream_type};
use serde_json::{Value, json};

/// The client's trace: every span of its commands must belong to it.
const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

/// Child processes, killed when the test ends however it ends.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

/// The one span of `service` named `name` with this command type.
fn span<'a>(spans: &'a [Value], service: &str, name: &str, kind: &str) -> &'a Value {
    let found: Vec<&Value> = spans
        .iter()
        .filter(|span| {
            span["service"] == service
                && span["name"] == name
                && attribute(span, "blade.agent.command.type") == Some(kind)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} {kind} span of {service}: {spans:#?}"
    );
    found[0]
}

async fn traced_command(served: &Served, kind: &str, data: Value) -> Value {
    let id = agent_runtime::ids::nanoid();
    let traceparent = ("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"));
    let (_, value) = crate::support::post_command(served, &id, kind, data, &[traceparent]).await;
    assert_eq!(value["ok"], true, "{kind}: {value}");
    value["data"].clone()
}

async fn scrape(url: &str) -> String {
    let response = agent_runtime_executor::provider::client_builder()
        .build()
        .unwrap()
        .get(url)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "{url}");
    response.text().await.unwrap()
}

fn value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no series {series} in\n{metrics}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_command_yields_connected_spans_from_gateway_and_executor() {
    let receiver = OtlpReceiver::start();
    let database_url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    let config = gateway_config("[telemetry]\notlp_flush_interval_ms = 100\n\n");
    let config_path = config.path().to_str().unwrap().to_owned();
    let envs = [
        ("AGENT_RUNTIME_DATABASE_URL", database_url.as_str()),
        ("AGENT_RUNTIME_CLUSTER_SECRET", SECRET),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        // Records only traces a caller marked sampled: the client's, below.
        ("OTEL_TRACES_SAMPLER", "parentbased_always_off"),
    ];
    let mut children = Children(Vec::new());

    let logs = tempfile::tempdir().unwrap();
    let (executor, lines) = spawn(
        &[
            "executor",
            "--listen",
            "127.0.0.1:0",
            "--worker-id",
            "executor-1",
            "--metrics-listen",
            "127.0.0.1:0",
            "--config",
            &config_path,
        ],
        &envs,
        " is serving gRPC on ",
        &logs.path().join("executor.log"),
    );
    children.0.push(executor);
    let executor_metrics = printed_address(&lines, ": metrics on ").to_owned();
    let (gateway, lines) = spawn(
        &[
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--config",
            &config_path,
        ],
        &envs,
        "agent-runtime gateway is serving on ",
        &logs.path().join("gateway.log"),
    );
    children.0.push(gateway);
    let gateway_url = printed_address(&lines, "agent-runtime gateway is serving on ").to_owned();
    let served = Served::remote(&format!("{gateway_url}/v1/agent"), TOKEN);

    let session =
        traced_command(&served, "session.create", json!({})).await["session"]["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
    // Without a traceparent the gateway starts a trace its sampler drops, and the executor
    // follows the `sampled` flag of the call: no process records a span of it.
    let read = json!({ "sessionId": session });
    let (status, _) =
        crate::support::post_command(&served, "untraced", "session.read", read, &[]).await;
    assert_eq!(status, 200);
    traced_command(
        &served,
        "input.submit",
        json!({ "sessionId": session, "input": "hello over the wire" }),
    )
    .await;
    let events = events_until(&served, &session, |e| stream_type(e) == Some("result")).await;

    // create: gateway span → executor span; submit: gateway → executor → model call.
    let spans = receiver
        .wait_for(
            |span| span["traceId"] == TRACE_ID,
            |spans| spans.len() >= 7 && spans.iter().any(|span| span["name"] == "chat"),
        )
        .await;
    for kind in ["session.create", "input.submit"] {
        let gateway = span(
            &spans,
            "agent-runtime-gateway",
            "blade.agent.server.command",
            kind,
        );
        let executor = span(
            &spans,
            "agent-runtime-executor",
            "blade.agent.executor.command",
            kind,
        );
        assert_eq!(
            gateway["parentSpanId"], CLIENT_SPAN,
            "continues the client's trace"
        );
        assert_eq!(gateway["kind"], 2);
        assert_eq!(
            attribute(gateway, "blade.agent.command.outcome"),
            Some("success")
        );
        // The gRPC hop: the gateway's client span, named after the RPC, between the two.
        let (rpc, method) = (
            agent_runtime_grpc::trace::EXECUTE_SPAN,
            agent_runtime_grpc::trace::EXECUTE_METHOD,
        );
        let hop: Vec<&Value> = spans
            .iter()
            .filter(|span| span["name"] == rpc && span["parentSpanId"] == gateway["spanId"])
            .collect();
        assert_eq!(hop.len(), 1, "one {rpc} span under {kind}: {spans:#?}");
        let hop = hop[0];
        assert_eq!(hop["service"], "agent-runtime-gateway");
        assert_eq!(hop["kind"], 3, "a client span");
        assert_eq!(hop["parentSpanId"], gateway["spanId"]);
        assert_eq!(attribute(hop, "rpc.system"), Some("grpc"));
        assert_eq!(attribute(hop, "rpc.method"), Some(method));
        assert_eq!(attribute(hop, "server.address"), Some("executor-1"));
        assert_eq!(
            executor["parentSpanId"], hop["spanId"],
            "the executor's span continues the hop from the call's metadata ({kind})"
        );
        assert_eq!(
            attribute(executor, "blade.agent.command.outcome"),
            Some("success")
        );
    }
    let submit = span(
        &spans,
        "agent-runtime-executor",
        "blade.agent.executor.command",
        "input.submit",
    );
    let chat = spans.iter().find(|span| span["name"] == "chat").unwrap();
    assert_eq!(chat["service"], "agent-runtime-executor");
    assert_eq!(chat["parentSpanId"], submit["spanId"]);
    assert_eq!(attribute(chat, "gen_ai.system"), Some("demo"));
    // Exported in order by each process, after the untraced read: nothing of it came.
    let stray: Vec<Value> = receiver
        .spans()
        .await
        .into_iter()
        .filter(|span| span["traceId"] != TRACE_ID)
        .collect();
    assert!(stray.is_empty(), "spans of an unsampled trace: {stray:#?}");
    let everything = format!("{spans:?}");
    assert!(
        !everything.contains("hello over the wire") && !everything.contains(TENANT),
        "no prompt and no tenant in spans by default"
    );

    // The executor's metrics, on its own listener: what this one session did.
    let metrics = scrape(&executor_metrics).await;
    let appended: f64 = metrics
        .lines()
        .filter(|line| line.starts_with("agent_runtime_events_appended_total{"))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(appended, events.len() as f64);
    assert_eq!(
        value(&metrics, "agent_runtime_executor_sessions_loaded"),
        1.0
    );
    assert_eq!(value(&metrics, "agent_runtime_executor_leases_held"), 1.0);
    assert_eq!(
        value(
            &metrics,
            r#"agent_runtime_provider_request_duration_seconds_count{provider="demo",outcome="success"}"#
        ),
        1.0
    );
    assert!(metrics.contains("agent_runtime_info{service=\"executor\""));

    // The gateway's, on its API listener: the two commands and the streamed events.
    let metrics = scrape(&format!("{gateway_url}/metrics")).await;
    for kind in ["session.create", "input.submit"] {
        assert_eq!(
            value(
                &metrics,
                &format!(r#"agent_runtime_commands_total{{type="{kind}",outcome="success"}}"#)
            ),
            1.0
        );
    }
    assert_eq!(
        value(
            &metrics,
            r#"agent_runtime_events_delivered_total{type="session.stream"}"#
        ),
        events.len() as f64
    );
}
