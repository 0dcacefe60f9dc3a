//! The Prometheus side of deploy/, checked with Prometheus itself (Debian's `prometheus` package,
//! installed by scripts/test.sh): `promtool` checks the alert rules, runs their unit tests and
//! checks the example scrape configuration; a real Prometheus server scrapes `serve` and every
//! process of a cluster, evaluates the alert rules on what it scraped, and answers every query of
//! the Grafana dashboard. The README's metric table is checked against what the processes expose.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::cluster::{Cluster, create_session, free_port, submit};
use crate::support::{EventStream, Served, ends_request, serve};

fn deploy(path: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy")).join(path)
}

fn promtool(args: &[&str]) -> String {
    let output = Command::new("promtool")
        .args(args)
        .output()
        .expect("promtool is installed by scripts/test.sh (Debian's prometheus package)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let rules = deploy("prometheus/alerts.yml");
    let checked = promtool(&["check", "rules", rules.to_str().unwrap()]);
    let expected = format!("SUCCESS: {} rules found", alert_rules());
    assert!(checked.contains(&expected), "{checked}");
    let tests = deploy("prometheus/alerts.test.yml");
    let tested = promtool(&["test", "rules", tests.to_str().unwrap()]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    let config = deploy("prometheus/prometheus.yml");
    promtool(&["check", "config", config.to_str().unwrap()]);
}

/// How many alert rules deploy/prometheus/alerts.yml defines.
fn alert_rules() -> usize {
    let text = std::fs::read_to_string(deploy("prometheus/alerts.yml")).unwrap();
    text.lines()
        .filter(|line| line.trim_start().starts_with("- alert:"))
        .count()
}

/// A Prometheus server on a free port with a private data directory, scraping `jobs` every
/// second and evaluating deploy/prometheus/alerts.yml.
struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    async fn start(jobs: &[(&str, Vec<String>)]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let scrape_configs: Vec<Value> = jobs
            .iter()
            .map(
                |(job, targets)| json!({"job_name": job, "static_configs": [{"targets": targets}]}),
            )
            .collect();
        // JSON is YAML: no YAML writer needed.
        let config = json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [deploy("prometheus/alerts.yml")],
            "scrape_configs": scrape_configs,
        });
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={listen}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus is installed by scripts/test.sh (Debian's prometheus package)");
        let prometheus = Prometheus {
            child,
            url: format!("http://{listen}"),
            _dir: dir,
        };
        let ready = format!("{}/-/ready", prometheus.url);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = reqwest::get(&ready).await;
            if answer.is_ok_and(|answer| answer.status().is_success()) {
                return prometheus;
            }
            assert!(Instant::now() < deadline, "prometheus never got ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// An instant query's `data` (its status must be `success`: the query parses and runs).
    async fn query(&self, promql: &str) -> Value {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", self.url),
            &[("query", promql)],
        )
        .unwrap();
        let answer: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
        assert_eq!(answer["status"], "success", "{promql}: {answer}");
        answer["data"].clone()
    }

    /// Waits (up to 30 s) until `promql` returns at least `series` series.
    async fn wait_for(&self, promql: &str, series: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let data = self.query(promql).await;
            let result = data["result"].as_array().cloned().unwrap_or_default();
            if result.len() >= series {
                return result;
            }
            assert!(Instant::now() < deadline, "{promql}: {data}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Every query of the Grafana dashboard runs, and every alert rule evaluates cleanly.
    async fn answers_the_dashboard_and_the_rules(&self) {
        for query in dashboard_queries() {
            self.query(&query).await;
        }
        self.rules_evaluate_cleanly().await;
    }

    /// Checks that every family scraped is in the README's table; returns the documented and
    /// the scraped families.
    async fn documented_families_only(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let documented = documented_families();
        let scraped = scraped_families(self).await;
        let undocumented: Vec<&String> = scraped.difference(&documented).collect();
        assert!(
            undocumented.is_empty(),
            "not in the README's table: {undocumented:?}"
        );
        (documented, scraped)
    }

    /// Waits until every alert rule was evaluated on the scraped data without an error.
    async fn rules_evaluate_cleanly(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer: Value = reqwest::get(format!("{}/api/v1/rules", self.url))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let rules: Vec<&Value> = answer["data"]["groups"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|group| group["rules"].as_array().unwrap())
                .collect();
            assert_eq!(rules.len(), alert_rules(), "{answer}");
            let evaluated = rules
                .iter()
                .all(|rule| rule["lastEvaluation"].as_str() != Some("0001-01-01T00:00:00Z"));
            if evaluated {
                for rule in rules {
                    assert_eq!(rule["health"], "ok", "{rule}");
                }
                return;
            }
            assert!(Instant::now() < deadline, "rules never evaluated: {answer}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// `HOST:PORT` of a URL.
fn target(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// Every query of the Grafana dashboard, its variables replaced by what they select.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(deploy("grafana/agent-runtime.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let queries: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| panel["targets"].as_array().unwrap())
        .map(|target| {
            target["expr"]
                .as_str()
                .unwrap()
                .replace("$job", "agent-runtime.*")
                .replace("$__rate_interval", "1m")
        })
        .collect();
    assert!(queries.len() >= 20, "{queries:?}");
    queries
}

/// The metric families the README's Observability table names.
fn documented_families() -> BTreeSet<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let mut families = BTreeSet::new();
    for row in readme
        .lines()
        .filter(|line| line.starts_with("| `agent_runtime_"))
    {
        let cell = row.split('|').nth(1).unwrap();
        let names: Vec<&str> = cell
            .split('`')
            .filter(|part| part.starts_with("agent_runtime_") || part.starts_with('_'))
            .collect();
        // `name` / `_total`: a second family named by its suffix.
        for name in &names {
            families.insert(match name.strip_prefix('_') {
                Some(suffix) => format!("{}_{suffix}", names[0]),
                None => (*name).to_owned(),
            });
        }
    }
    families
}

/// The metric families a Prometheus scraped, by the `__name__` of its series.
async fn scraped_families(prometheus: &Prometheus) -> BTreeSet<String> {
    let data = prometheus
        .query(r#"count by (__name__) ({__name__=~"agent_runtime_.+"})"#)
        .await;
    data["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|series| {
            let name = series["metric"]["__name__"].as_str().unwrap();
            ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name)
                .to_owned()
        })
        .collect()
}

/// A session whose stream is open before its one request runs, so every family of a healthy
/// run has a series (the live tail lag counts only events appended while a stream was open).
async fn one_request_followed_live(served: &Served) {
    let session = create_session(served).await;
    let mut stream = EventStream::open(served, &session, 0).await;
    let request = submit(served, &session, "hello").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Some(event) = stream.next().await {
        if ends_request(&event, &request) {
            return;
        }
        assert!(Instant::now() < deadline, "the request never ended");
    }
    panic!("the stream ended before the request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_serve_and_answers_the_dashboard() {
    let data = tempfile::tempdir().unwrap();
    let served = serve(data.path());
    one_request_followed_live(&served).await;

    let prometheus =
        Prometheus::start(&[("agent-runtime-serve", vec![target(&served.base)])]).await;
    prometheus
        .wait_for(r#"up{job="agent-runtime-serve"} == 1"#, 1)
        .await;
    let info = prometheus
        .wait_for(r#"agent_runtime_info{job="agent-runtime-serve"}"#, 1)
        .await;
    assert_eq!(info[0]["metric"]["service"], "serve", "{info:?}");
    let created = prometheus
        .wait_for(
            r#"agent_runtime_commands_total{type="session.create",outcome="success"}"#,
            1,
        )
        .await;
    assert_eq!(created[0]["value"][1], "1", "{created:?}");
    prometheus
        .wait_for("agent_runtime_events_appended_total > 0", 1)
        .await;
    prometheus.answers_the_dashboard_and_the_rules().await;
    prometheus.documented_families_only().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_every_process_of_a_cluster() {
    let cluster = Cluster::start().await;
    one_request_followed_live(&cluster.served(0)).await;

    let gateways = cluster.gateways.iter().map(|g| g.listen.clone()).collect();
    let executors = cluster
        .executors
        .iter()
        .map(|executor| target(&executor.metrics_url))
        .collect();
    let prometheus = Prometheus::start(&[
        ("agent-runtime-gateway", gateways),
        ("agent-runtime-executor", executors),
    ])
    .await;
    prometheus
        .wait_for(r#"up{job=~"agent-runtime-.*"} == 1"#, 4)
        .await;
    let services = prometheus
        .wait_for("count by (job, service) (agent_runtime_info)", 2)
        .await;
    let mut seen: Vec<(String, String, String)> = services
        .iter()
        .map(|series| {
            (
                series["metric"]["job"].as_str().unwrap().to_owned(),
                series["metric"]["service"].as_str().unwrap().to_owned(),
                series["value"][1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            (
                "agent-runtime-executor".into(),
                "executor".into(),
                "2".into()
            ),
            ("agent-runtime-gateway".into(), "gateway".into(), "2".into()),
        ]
    );
    prometheus
        .wait_for(
            r#"sum(agent_runtime_events_appended_total{job="agent-runtime-executor"}) > 0"#,
            1,
        )
        .await;
    prometheus
        .wait_for(
            r#"sum(agent_runtime_events_delivered_total{job="agent-runtime-gateway"}) > 0"#,
            1,
        )
        .await;
    prometheus.answers_the_dashboard_and_the_rules().await;
    // Every documented family is exposed by some process of a cluster, and nothing undocumented.
    let (documented, scraped) = prometheus.documented_families_only().await;
    let unexposed: Vec<&String> = documented.difference(&scraped).collect();
    assert!(
        unexposed.iter().all(|name| {
            OBSERVED_ONLY_UNDER_FAULTS.contains(&name.as_str())
                || OBSERVED_ONLY_WITH_MCP.contains(&name.as_str())
                // Only processes with a `[webhooks]` section deliver (cli/tests/serve/webhooks.rs).
                || name.starts_with("agent_runtime_webhook")
        }),
        "documented but exposed by no process: {unexposed:?}"
    );
}

/// Families with labels that get a series only once something goes wrong (no series without a
/// label set): a healthy cluster's scrape does not show them.
const OBSERVED_ONLY_UNDER_FAULTS: &[&str] = &[
    "agent_runtime_admission_rejections_total",
    "agent_runtime_idempotent_replays_total",
    "agent_runtime_command_claim_refusals_total",
    "agent_runtime_store_fenced_writes_total",
    "agent_runtime_provider_errors_total",
    "agent_runtime_limit_hits_total",
];

/// Families sampled per configured MCP server; the scraped cluster has none.
const OBSERVED_ONLY_WITH_MCP: &[&str] = &[
    "agent_runtime_mcp_servers",
    "agent_runtime_mcp_server_up",
    "agent_runtime_mcp_server_tools",
];
