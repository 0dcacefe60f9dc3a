//! The benchmark tool, briefly, against a real server (`serve` on the memory store, in this
//! process, over real HTTP and SSE) and against the baseline server: every scenario's JSON is
//! well-formed and its counts add up, and the report renders from the results. No timing is
//! asserted: this machine's speed is what the tool measures, not what the tests check.

use std::path::Path;
use std::process::Command;

use agent_runtime_bench::config_file::{ConfigArgs, DEFAULT_TOKEN_PREFIX, render};
use agent_runtime_bench::outcome::{Kind, Outcome};
use agent_runtime_cli::ServeArgs;
use tokio::net::TcpListener;

const HEARTBEAT_MS: u64 = 200;

/// Runs `agent-runtime-bench run SCENARIO` with `args`, checks the JSON it prints and the file it
/// writes agree, and returns it.
fn run(base: &str, deployment: &str, out: &Path, scenario: &str, args: &[&str]) -> Outcome {
    let file = out.join(format!("{scenario}-{deployment}.json"));
    let output = Command::new(env!("CARGO_BIN_EXE_agent-runtime-bench"))
        .args([
            "run",
            scenario,
            "--base",
            base,
            "--tenants",
            "2",
            "--deployment",
            deployment,
        ])
        .args(["--pid", &format!("server={}", std::process::id())])
        .arg("--out")
        .arg(&file)
        .args(args)
        .output()
        .expect("the bench binary runs");
    assert!(
        output.status.success(),
        "{scenario} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Outcome =
        serde_json::from_slice(&output.stdout).expect("stdout is the JSON result");
    let written: Outcome = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
        .expect("the file is the JSON result");
    assert_eq!(printed, written);
    assert_eq!(printed.kind, Kind::Scenario);
    assert_eq!(printed.name, scenario);
    assert_eq!(printed.deployment, deployment);
    assert!(
        printed.command.starts_with("agent-runtime-bench run "),
        "{}",
        printed.command
    );
    assert!(
        printed.figures.values().all(|v| v.is_finite() && *v >= 0.0),
        "{:?}",
        printed.figures
    );
    printed
}

fn count(outcome: &Outcome, name: &str) -> u64 {
    *outcome
        .counts
        .get(name)
        .unwrap_or_else(|| panic!("{} has no count {name}: {:?}", outcome.name, outcome.counts))
}

/// Every scenario, briefly, with the consistency its counts must show.
fn every_scenario(base: &str, deployment: &str, out: &Path) {
    let b1 = run(
        base,
        deployment,
        out,
        "b1",
        &["--duration", "0.5", "--clients", "2"],
    );
    assert_eq!(
        count(&b1, "submitted"),
        count(&b1, "accepted") + count(&b1, "failed")
    );
    assert_eq!(count(&b1, "failed"), 0, "{:?}", b1.errors);
    assert!(count(&b1, "accepted") > 0);
    assert_eq!(
        count(&b1, "requestsEnded"),
        count(&b1, "accepted"),
        "every request ended"
    );
    assert_eq!(
        count(&b1, "latencySamples") + count(&b1, "halfRateLatencySamples"),
        count(&b1, "accepted")
    );

    let b2 = run(
        base,
        deployment,
        out,
        "b2",
        &["--duration", "0.5", "--clients", "2", "--deltas", "50"],
    );
    assert!(count(&b2, "requests") > 0);
    assert_eq!(count(&b2, "eventsDelivered"), count(&b2, "eventsAppended"));
    assert!(count(&b2, "eventsAppended") >= 50 * count(&b2, "requests"));

    let b3 = run(
        base,
        deployment,
        out,
        "b3",
        &["--duration", "0.3", "--clients", "2", "--rate", "50"],
    );
    assert_eq!(count(&b3, "received"), count(&b3, "expected"));
    assert_eq!(count(&b3, "latencySamples"), count(&b3, "received"));

    let b4 = run(
        base,
        deployment,
        out,
        "b4",
        &["--events", "300", "--repeats", "2"],
    );
    assert_eq!(count(&b4, "eventsPerReplay"), 300);
    assert_eq!(count(&b4, "replays"), 2);

    let b5 = run(
        base,
        deployment,
        out,
        "b5",
        &[
            "--connections",
            "20",
            "--sessions",
            "4",
            "--heartbeat-ms",
            &HEARTBEAT_MS.to_string(),
        ],
    );
    assert_eq!(
        count(&b5, "held") + count(&b5, "closedEarly") + count(&b5, "failed"),
        20
    );
    assert_eq!(count(&b5, "held"), 20);
    assert!(
        count(&b5, "heartbeats") >= 20,
        "every connection saw heartbeats"
    );

    let b6 = run(
        base,
        deployment,
        out,
        "b6",
        &["--subscribers", "5", "--rate", "100", "--duration", "0.3"],
    );
    assert_eq!(
        count(&b6, "delivered") + count(&b6, "missing"),
        count(&b6, "expected")
    );
    assert_eq!(count(&b6, "missing"), 0);
    assert_eq!(count(&b6, "completeSubscribers"), 5);

    let b7 = run(
        base,
        deployment,
        out,
        "b7",
        &["--sessions", "20", "--batches", "3"],
    );
    // Three batches: the first from idle, the growth over the other two for the marginal figure.
    assert_eq!(count(&b7, "sessions"), 60);
    assert!(b7.figures.contains_key("idleRssKiB.server"));
    assert!(b7.figures.contains_key("bytesPerSession"));
    assert!(b7.figures.contains_key("marginalBytesPerSession"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_against_a_real_server_and_the_baseline_then_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("bench.toml");
    let config_args = ConfigArgs {
        tenants: 2,
        token_prefix: DEFAULT_TOKEN_PREFIX.to_owned(),
        heartbeat_ms: HEARTBEAT_MS,
        max_events_per_session: 10_000,
        webhook_url: None,
    };
    // B1 with webhooks reads the same configuration with an endpoint per tenant.
    let with_webhooks = ConfigArgs {
        webhook_url: Some("http://127.0.0.1:9/receiver".to_owned()),
        ..config_args.clone()
    };
    let webhooks_path = dir.path().join("bench-webhooks.toml");
    std::fs::write(&webhooks_path, render(&with_webhooks)).unwrap();
    let webhooks = agent_runtime_cli::ServeConfig::load(&ServeArgs {
        config: Some(webhooks_path),
        ..ServeArgs::default()
    })
    .unwrap()
    .webhooks
    .expect("a [webhooks] section");
    assert_eq!(webhooks.endpoints.len(), 2);
    std::fs::write(&config_path, render(&config_args)).unwrap();
    let config = agent_runtime_cli::ServeConfig::load(&ServeArgs {
        config: Some(config_path),
        store: Some("memory".to_owned()),
        ..ServeArgs::default()
    })
    .unwrap();
    // B5 holds 10,000 streams on one gateway and B6 1,000 on one tenant's session: the generated
    // configuration must lift the SSE caps (defaults 100 per tenant, 10,000 per process).
    assert!(config.gateway.max_sse_connections_per_tenant >= 100_000);
    assert!(config.gateway.max_sse_connections >= 100_000);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = agent_runtime_cli::start(config, listener).await.unwrap();
    let base = format!("http://{}/v1/agent", server.address);

    let baseline_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let baseline = agent_runtime_bench::baseline::start(
        baseline_listener,
        std::time::Duration::from_millis(HEARTBEAT_MS),
    )
    .unwrap();
    let baseline_base = format!("http://{}/v1/agent", baseline.address);

    let results = dir.path().join("results");
    std::fs::create_dir(&results).unwrap();
    let out = results.clone();
    tokio::task::spawn_blocking(move || {
        every_scenario(&base, "memory", &out);
        every_scenario(&baseline_base, "baseline", &out);
    })
    .await
    .unwrap();

    let report = Command::new(env!("CARGO_BIN_EXE_agent-runtime-bench"))
        .arg("report")
        .arg(&results)
        .args(["--load-at-start", "0.10 0.20 0.30"])
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let markdown = String::from_utf8(report.stdout).unwrap();
    for heading in [
        "## Targets",
        "## Limits measured in this run",
        "## B1",
        "## B4",
        "## B7",
    ] {
        assert!(
            markdown.contains(heading),
            "the report has {heading}:\n{markdown}"
        );
    }
    assert!(
        markdown.contains("agent-runtime-bench run b1 "),
        "commands are listed"
    );

    server.shutdown();
    server.wait().await.unwrap();
    baseline.shutdown.cancel();
}

/// B8 at a few sessions: the product's `export` and `import` (the workspace's `agent-runtime`
/// binary, beside this one) move a deployment there and back through a real PostgreSQL, every
/// step's figures and limit are recorded, and the report shows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_moves_a_small_deployment_there_and_back_and_the_report_shows_it() {
    let bench = Path::new(env!("CARGO_BIN_EXE_agent-runtime-bench"));
    let binary = bench.with_file_name("agent-runtime");
    assert!(binary.exists(), "the workspace builds {}", binary.display());
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    let output = Command::new(bench)
        .args(["move", "--sessions", "30", "--tenants", "3"])
        .arg("--binary")
        .arg(&binary)
        .arg("--work")
        .arg(dir.path().join("work"))
        .args(["--database-url", &url])
        .arg("--out-dir")
        .arg(&results)
        .output()
        .expect("the bench binary runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut steps = Vec::new();
    for entry in std::fs::read_dir(&results).unwrap() {
        let outcome: Outcome =
            serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        assert_eq!(count(&outcome, "sessions"), 30);
        assert_eq!(count(&outcome, "events"), 600);
        for figure in ["sessionsPerSecond", "peakRssMiB", "limitMegabytesPerSecond"] {
            let value = outcome.figures[figure];
            assert!(value.is_finite() && value > 0.0, "{figure}: {value}");
        }
        steps.push(outcome.deployment);
    }
    steps.sort();
    assert_eq!(
        steps,
        [
            "jsonl-export@30",
            "jsonl-import@30",
            "postgres-export@30",
            "postgres-import@30"
        ]
    );
    let report = Command::new(bench)
        .arg("report")
        .arg(&results)
        .args(["--load-at-start", "0.10 0.20 0.30"])
        .output()
        .unwrap();
    let markdown = String::from_utf8(report.stdout).unwrap();
    assert!(markdown.contains("## B8"), "{markdown}");
    assert!(
        markdown.contains("agent-runtime import --quiet --bundle"),
        "{markdown}"
    );
}
