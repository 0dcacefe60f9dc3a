//! `GET /metrics` scraped while a real server (real HTTP and SSE) serves a known workload: every
//! counter equals what the test did.

use std::time::Duration;

use crate::support::*;
use agent_runtime_cli::config::StoreKind;
use serde_json::json;

const CREATES: usize = 3;
const SUBMITS: usize = 3;
/// Tenant A's admitted commands: the creates, the submits and the failing read.
const TENANT_A_ADMITTED: usize = CREATES + SUBMITS + 1;

/// A scraped exposition.
struct Scrape(String);

impl Scrape {
    /// The value of one series, written exactly as rendered (`name{label="value",…}`).
    fn value(&self, series: &str) -> f64 {
        self.value_if_any(series)
            .unwrap_or_else(|| panic!("no series {series} in\n{}", self.0))
    }

    fn value_if_any(&self, series: &str) -> Option<f64> {
        self.0
            .lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map(|value| value.parse().unwrap())
    }

    /// The sum of every series of a family (all label sets).
    fn total(&self, family: &str) -> f64 {
        self.0
            .lines()
            .filter(|line| {
                line.strip_prefix(family)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    }
}

async fn scrape(server: &TestServer) -> Scrape {
    let root = server.base.trim_end_matches("/v1/agent");
    // No token: metrics are for the scraper, not for tenants.
    let response = server
        .client
        .get(format!("{root}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    Scrape(response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_exactly_what_the_clients_did() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.gateway.commands_per_minute = TENANT_A_ADMITTED;
    let server = TestServer::start(config).await;

    // Tenant B spends its budget at once: one command over the limit is rate limited.
    for n in 0..=TENANT_A_ADMITTED {
        let (_, body) = server
            .command(
                TOKEN_B,
                &format!("init-{n}"),
                "initialize",
                json!({ "client": { "name": "metrics-test", "version": "1" } }),
            )
            .await;
        let expected_ok = n < TENANT_A_ADMITTED;
        assert_eq!(body["ok"], expected_ok, "initialize {n}: {body}");
        if !expected_ok {
            assert_eq!(body["error"]["code"], "RATE_LIMITED");
        }
    }

    // Tenant A: creates, one of them replayed with the same commandId and body.
    let mut sessions = Vec::new();
    for n in 0..CREATES {
        let (status, body) = server
            .command(TOKEN_A, &format!("create-{n}"), "session.create", json!({}))
            .await;
        assert_eq!(status, 200, "{body}");
        sessions.push(
            body["data"]["session"]["sessionId"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let (_, replayed) = server
        .command(TOKEN_A, "create-0", "session.create", json!({}))
        .await;
    assert_eq!(replayed["data"]["session"]["sessionId"], sessions[0]);

    // One SSE connection, open before any event exists: everything it gets is the live tail.
    let response = server.events(TOKEN_A, &sessions[0], "", None).await;
    assert_eq!(response.status().as_u16(), 200);
    let mut reader = SseReader::new(response);
    let during = scrape(&server).await;
    assert_eq!(during.value("agent_runtime_sse_connections_open"), 1.0);
    assert_eq!(during.value("agent_runtime_sse_connections_total"), 1.0);

    let mut delivered = 0;
    for n in 0..SUBMITS {
        server
            .submit(TOKEN_A, &sessions[0], &format!("hello {n}"))
            .await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let frame = tokio::time::timeout_at(deadline, reader.next_event())
                .await
                .expect("events before the deadline")
                .expect("the stream stays open");
            delivered += 1;
            if is_result(&frame.data) {
                break;
            }
        }
    }

    // One failing command.
    let (_, failed) = server
        .command(
            TOKEN_A,
            "read-missing",
            "session.read",
            json!({ "sessionId": "no-such-session" }),
        )
        .await;
    assert_eq!(failed["error"]["code"], "SESSION_NOT_FOUND");

    let metrics = scrape(&server).await;
    let commands =
        |labels: &str| metrics.value(&format!("agent_runtime_commands_total{{{labels}}}"));
    assert_eq!(
        commands(r#"type="initialize",outcome="success""#),
        TENANT_A_ADMITTED as f64
    );
    assert_eq!(
        commands(r#"type="initialize",outcome="error",code="RATE_LIMITED""#),
        1.0
    );
    assert_eq!(
        commands(r#"type="session.create",outcome="success""#),
        CREATES as f64
    );
    assert_eq!(
        commands(r#"type="input.submit",outcome="success""#),
        SUBMITS as f64
    );
    assert_eq!(
        commands(r#"type="session.read",outcome="error",code="SESSION_NOT_FOUND""#),
        1.0
    );
    let all_commands = 2 * TENANT_A_ADMITTED + 1;
    assert_eq!(
        metrics.total("agent_runtime_commands_total"),
        all_commands as f64
    );
    assert_eq!(
        metrics.value(
            r#"agent_runtime_command_duration_seconds_count{type="input.submit",outcome="success"}"#
        ),
        SUBMITS as f64
    );
    assert_eq!(
        metrics.value(r#"agent_runtime_idempotent_replays_total{type="session.create"}"#),
        1.0
    );
    assert_eq!(
        metrics.value(r#"agent_runtime_admission_rejections_total{reason="rate_limited"}"#),
        1.0
    );
    // Every write was claimed once, the replay included (sealed in the same call when a slot
    // was free); reads keep no receipt (ATK-02).
    let claims = ["claim_command", "claim_and_seal_command"].map(|operation| {
        metrics
            .value_if_any(&format!(
                r#"agent_runtime_store_call_duration_seconds_count{{operation="{operation}",outcome="success"}}"#
            ))
            .unwrap_or(0.0)
    });
    assert_eq!(claims.iter().sum::<f64>(), (CREATES + 1 + SUBMITS) as f64);

    // Events: all of them are in the streamed session; each was appended and delivered once,
    // with its live-tail lag.
    assert_eq!(
        metrics.total("agent_runtime_events_appended_total"),
        delivered as f64
    );
    assert_eq!(
        metrics.value(r#"agent_runtime_events_delivered_total{type="session.stream"}"#),
        delivered as f64
    );
    assert_eq!(
        metrics.value("agent_runtime_live_tail_lag_seconds_count"),
        delivered as f64
    );

    // The executor: one demo model call per submit, every created session loaded.
    assert_eq!(
        metrics.value(
            r#"agent_runtime_provider_request_duration_seconds_count{provider="demo",outcome="success"}"#
        ),
        SUBMITS as f64
    );
    assert_eq!(
        metrics.value("agent_runtime_executor_sessions_loaded"),
        CREATES as f64
    );
    assert_eq!(metrics.total("agent_runtime_provider_errors_total"), 0.0);
    assert!(
        !metrics.0.contains("tenant-a") && !metrics.0.contains(&sessions[0]),
        "no tenant or session ids in metrics by default"
    );
    independent_parsers_accept_both_formats(&server).await;

    // The connection closes; the gauge follows once the server notices (at the next heartbeat).
    drop(reader);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while scrape(&server)
        .await
        .value("agent_runtime_sse_connections_open")
        != 0.0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed connection is no longer counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

/// Scrapes `GET /metrics` with an `Accept` header; returns the content type and the body.
async fn scrape_as(server: &TestServer, accept: &str) -> (String, String) {
    let root = server.base.trim_end_matches("/v1/agent");
    let response = server
        .client
        .get(format!("{root}/metrics"))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    (content_type, response.text().await.unwrap())
}

/// Both formats, as a scraper negotiates them, pass parsers nobody here wrote: the Prometheus
/// project's Python parsers (the OpenMetrics one is strict: name clashes, suffixes, buckets,
/// `# EOF`) and `promtool check metrics`; and they expose the same families.
async fn independent_parsers_accept_both_formats(server: &TestServer) {
    let (text_type, text) = scrape_as(server, "text/plain;version=0.0.4;q=0.5,*/*;q=0.1").await;
    assert_eq!(text_type, "text/plain; version=0.0.4; charset=utf-8");
    // What Prometheus 3 sends.
    let (openmetrics_type, openmetrics) = scrape_as(
        server,
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
         application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    )
    .await;
    assert_eq!(
        openmetrics_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");

    let dir = tempfile::tempdir().unwrap();
    let (text_file, openmetrics_file) = (dir.path().join("text"), dir.path().join("openmetrics"));
    std::fs::write(&text_file, &text).unwrap();
    std::fs::write(&openmetrics_file, &openmetrics).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/metrics/parse.py");
    let parsed = std::process::Command::new(python_with("prometheus_client"))
        .arg(script)
        .args([&text_file, &openmetrics_file])
        .output()
        .unwrap();
    assert!(
        parsed.status.success(),
        "the Prometheus parsers refused the exposition:\n{}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&parsed.stdout).unwrap();
    let families = |format: &str| -> Vec<(String, String)> {
        let mut families: Vec<(String, String)> = report[format]
            .as_object()
            .unwrap()
            .iter()
            .map(|(name, family)| (name.clone(), family["type"].as_str().unwrap().to_owned()))
            .collect();
        families.sort();
        families
    };
    assert_eq!(families("prometheus"), families("openmetrics"));
    assert!(
        families("openmetrics")
            .contains(&("agent_runtime_commands".to_owned(), "counter".to_owned())),
        "{report}"
    );

    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is installed by scripts/test.sh (Debian's prometheus package)");
    use std::io::Write as _;
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let linted = promtool.wait_with_output().unwrap();
    assert!(
        linted.status.success(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&linted.stdout),
        String::from_utf8_lossy(&linted.stderr)
    );
}

#[tokio::test]
async fn metrics_can_move_to_their_own_listener_or_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.telemetry.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let server = TestServer::start(config).await;
    let address = server
        .server
        .as_ref()
        .unwrap()
        .metrics_address
        .expect("a metrics listener");
    let root = server.base.trim_end_matches("/v1/agent").to_owned();
    let separate = server
        .client
        .get(format!("http://{address}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(separate.status().as_u16(), 200);
    assert!(
        separate
            .text()
            .await
            .unwrap()
            .contains("agent_runtime_info{service=\"serve\"")
    );
    // The API listener no longer has it: an unknown route there needs a token.
    let api = server
        .client
        .get(format!("{root}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status().as_u16(), 401);
    server.stop().await;

    let mut config = test_config(StoreKind::Memory, dir.path());
    config.telemetry.metrics = false;
    let server = TestServer::start(config).await;
    let root = server.base.trim_end_matches("/v1/agent").to_owned();
    let off = server
        .client
        .get(format!("{root}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(off.status().as_u16(), 401);
    assert!(server.server.as_ref().unwrap().metrics_address.is_none());
    server.stop().await;
}
