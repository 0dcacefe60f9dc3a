//! A cluster of real processes on one PostgreSQL database: two executors and two gateways,
//! started by the process tests (cli/tests/cluster/processes.rs, cli/tests/cluster/catalogue.rs) with the same subcommands
//! and flags as `scripts/cluster.sh`, plus a short lease TTL and demo pace so faults play out in
//! seconds. Each child's log (stderr) goes to a file of the cluster's log directory.

use agent_runtime_store::EventReader;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Served, wait_for_exit};

pub const SECRET: &str = "cluster-secret-of-the-process-tests";
pub const TOKEN: &str = "cluster-test-token";
/// The tenant of [`TOKEN`].
pub const TENANT: &str = "tenant-a";
/// An operator token of every gateway (the admin API).
pub const OPERATOR_TOKEN: &str = "op-cluster-test-operator-token";
pub const LEASE_TTL_MS: &str = "1500";
/// Writes the store refused because the writer's lease was stale (per process).
pub const FENCED_WRITES: &str = "agent_runtime_store_fenced_writes_total";
const SESSIONS_LOADED: &str = "agent_runtime_executor_sessions_loaded";
const GATEWAY_SERVING: &str = "agent-runtime gateway is serving on ";

/// The executors' lease TTL.
pub fn lease_ttl() -> Duration {
    Duration::from_millis(LEASE_TTL_MS.parse().unwrap())
}

/// An `agent-runtime executor` child process.
pub struct Executor {
    pub worker_id: String,
    pub child: Child,
    /// Its gRPC `HOST:PORT`.
    pub address: String,
    /// Its `GET /metrics` URL (`--metrics-listen`).
    pub metrics_url: String,
}

/// An `agent-runtime gateway` child process.
pub struct Gateway {
    pub child: Child,
    /// Its `--listen` address, kept so that a restart serves the same URL.
    pub listen: String,
}

pub struct Cluster {
    pub database_url: String,
    pub config: tempfile::NamedTempFile,
    /// What every executor reads with `--config` (e.g. a model provider), if anything.
    pub executor_config: Option<PathBuf>,
    /// `<name>.log` per child: its stderr.
    pub logs: tempfile::TempDir,
    pub executors: Vec<Executor>,
    pub gateways: Vec<Gateway>,
    pub gateway_urls: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for executor in &mut self.executors {
            let _ = executor.child.kill();
            let _ = executor.child.wait();
        }
        for gateway in &mut self.gateways {
            let _ = gateway.child.kill();
            let _ = gateway.child.wait();
        }
    }
}

/// Spawns the binary with `envs`, its stderr appended to `log`; returns it with every stdout line
/// up to the first that contains `ready`. A child that exits before it is ready fails the test
/// with its log, so that a CI failure says why.
pub fn spawn(
    args: &[&str],
    envs: &[(&str, &str)],
    ready: &str,
    log: &Path,
) -> (Child, Vec<String>) {
    let stderr = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("a log file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .args(args)
        .envs(envs.iter().copied())
        .env("AGENT_RUNTIME_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    loop {
        let Some(line) = lines.next().transpose().unwrap() else {
            let status = child.wait().unwrap();
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!(
                "`{args:?}` exited ({status}) before it was ready; stdout {seen:?}, log:\n{log}"
            );
        };
        let done = line.contains(ready);
        seen.push(line);
        if done {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (child, seen)
}

/// The address a child printed after `marker` on one of its start-up `lines`.
pub fn printed_address<'a>(lines: &'a [String], marker: &str) -> &'a str {
    lines
        .iter()
        .find_map(|line| Some(line.split_once(marker)?.1.trim()))
        .unwrap_or_else(|| panic!("no {marker:?} in {lines:?}"))
}

/// A `--config` file with [`TOKEN`] (an admin of [`TENANT`]), [`OPERATOR_TOKEN`], a 500 ms
/// heartbeat and `extra` sections.
pub fn gateway_config(extra: &str) -> tempfile::NamedTempFile {
    let config = tempfile::NamedTempFile::new().unwrap();
    let hash = agent_runtime_gateway::token_sha256(TOKEN);
    let operator = agent_runtime_gateway::token_sha256(OPERATOR_TOKEN);
    std::fs::write(
        config.path(),
        format!(
            "[gateway]\nheartbeat_interval_ms = 500\noperator_token_sha256 = [\"{operator}\"]\n\n{extra}[[auth.tokens]]\nsha256 = \"{hash}\"\ntenant = \"{TENANT}\"\nsubject = \"user-a\"\nscopes = [\"session:admin\"]\n"
        ),
    )
    .unwrap();
    config
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The sum of every series of metric `name` in a Prometheus text exposition (0 when absent).
pub fn metric_total(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

impl Cluster {
    pub async fn start() -> Cluster {
        Cluster::start_with(None).await
    }

    /// A cluster whose executors read `executor_config` (`--config`).
    pub async fn start_with(executor_config: Option<&Path>) -> Cluster {
        Cluster::start_configured(executor_config, "").await
    }

    /// [`Cluster::start_with`], with `gateway_extra` sections in every gateway's configuration.
    pub async fn start_configured(executor_config: Option<&Path>, gateway_extra: &str) -> Cluster {
        let database_url = agent_runtime_store::testing::postgres::fresh_database_url()
            .await
            .expect("a test database");
        let mut cluster = Cluster {
            database_url,
            config: gateway_config(gateway_extra),
            executor_config: executor_config.map(Path::to_path_buf),
            logs: tempfile::tempdir().unwrap(),
            executors: Vec::new(),
            gateways: Vec::new(),
            gateway_urls: Vec::new(),
        };
        for n in 1..=2 {
            cluster.start_executor(&format!("executor-{n}"));
        }
        for _ in 0..2 {
            cluster.start_gateway();
        }
        cluster
    }

    /// Starts an executor on ports of its own choosing (port 0: nothing can take them between
    /// a probe and the bind) and reads its addresses from what it prints.
    pub fn start_executor(&mut self, worker_id: &str) {
        let mut args = vec![
            "executor",
            "--listen",
            "127.0.0.1:0",
            "--worker-id",
            worker_id,
            "--lease-ttl-ms",
            LEASE_TTL_MS,
            "--demo-slow-delta-interval-ms",
            "100",
            "--metrics-listen",
            "127.0.0.1:0",
        ];
        if let Some(config) = &self.executor_config {
            args.extend(["--config", config.to_str().unwrap()]);
        }
        let log = self.log_path(worker_id);
        let (child, lines) = spawn(&args, &self.envs(), " is serving gRPC on ", &log);
        self.executors.push(Executor {
            worker_id: worker_id.to_owned(),
            child,
            address: printed_address(&lines, " is serving gRPC on ").to_owned(),
            metrics_url: printed_address(&lines, ": metrics on ").to_owned(),
        });
    }

    /// Starts a gateway on a port of its own choosing; a restart reuses that port.
    pub fn start_gateway(&mut self) -> usize {
        let index = self.gateways.len();
        let (child, listen) = self.spawn_gateway(index, "127.0.0.1:0");
        self.gateway_urls.push(format!("http://{listen}/v1/agent"));
        self.gateways.push(Gateway { child, listen });
        index
    }

    /// Returns the child and the address it serves on.
    fn spawn_gateway(&self, index: usize, listen: &str) -> (Child, String) {
        let config = self.config.path().to_str().unwrap().to_owned();
        let (child, lines) = spawn(
            &["gateway", "--listen", listen, "--config", &config],
            &self.envs(),
            GATEWAY_SERVING,
            &self.log_path(&format!("gateway-{index}")),
        );
        let url = printed_address(&lines, GATEWAY_SERVING);
        let served = url.strip_prefix("http://").unwrap_or(url).to_owned();
        (child, served)
    }

    fn envs(&self) -> [(&str, &str); 2] {
        [
            ("AGENT_RUNTIME_DATABASE_URL", self.database_url.as_str()),
            ("AGENT_RUNTIME_CLUSTER_SECRET", SECRET),
        ]
    }

    /// Stops gateway `index` the way an orchestrator does (SIGTERM) and waits until it exited.
    pub fn stop_gateway(&mut self, index: usize) -> ExitStatus {
        let child = &mut self.gateways[index].child;
        signal(child, "-TERM");
        wait_for_exit(child)
    }

    /// Starts gateway `index` again on its address: its clients reconnect to the URL they had.
    pub fn restart_gateway(&mut self, index: usize) {
        let listen = self.gateways[index].listen.clone();
        let (child, served) = self.spawn_gateway(index, &listen);
        assert_eq!(served, listen);
        self.gateways[index].child = child;
    }

    pub fn served(&self, gateway: usize) -> Served {
        Served::remote(&self.gateway_urls[gateway], TOKEN)
    }

    pub fn executor(&mut self, worker_id: &str) -> &mut Child {
        &mut self.process_of(worker_id).child
    }

    fn process_of(&mut self, worker_id: &str) -> &mut Executor {
        self.executors
            .iter_mut()
            .find(|executor| executor.worker_id == worker_id)
            .unwrap()
    }

    /// The sum of metric `name` on executor `worker_id`'s `/metrics`.
    pub async fn executor_metric(&mut self, worker_id: &str, name: &str) -> f64 {
        let url = self.process_of(worker_id).metrics_url.clone();
        let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        metric_total(&text, name)
    }

    /// Waits (bounded) until executor `worker_id`, woken after its sessions moved, had the store
    /// refuse at least one of its writes as stale and let every session go: from then on it has
    /// nothing left to write. Returns how many writes were refused.
    pub async fn wait_until_fenced_off(&mut self, worker_id: &str) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let fenced = self.executor_metric(worker_id, FENCED_WRITES).await;
            let loaded = self.executor_metric(worker_id, SESSIONS_LOADED).await;
            if fenced > 0.0 && loaded == 0.0 {
                return fenced;
            }
            assert!(
                Instant::now() < deadline,
                "fenced writes {fenced}, sessions loaded {loaded}; {worker_id}'s log:\n{}",
                self.log(worker_id)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.logs.path().join(format!("{name}.log"))
    }

    /// What process `name` (a worker id, or `gateway-N`) logged so far.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    /// The session's event log as the store holds it, as the JSON envelopes clients receive.
    pub async fn stored_events(&self, session: &str) -> Vec<Value> {
        use agent_runtime_store::{PostgresOptions, PostgresStore, StoreLifecycle};
        let store = PostgresStore::connect(&self.database_url, PostgresOptions::default())
            .await
            .expect("the cluster's database");
        let mut events: Vec<Value> = Vec::new();
        loop {
            let after = events.last().map_or(0, |e| e["sequence"].as_u64().unwrap());
            let page = store
                .read_events(TENANT, session, after, 1000)
                .await
                .unwrap();
            events.extend(page.events.iter().map(|e| serde_json::to_value(e).unwrap()));
            if !page.has_more {
                break;
            }
        }
        store.close().await.unwrap();
        events
    }
}

/// Sends a signal (`-TERM`, `-STOP`, `-CONT`, …) to a child process.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The session's route as `session.read` reports it: (owner, fencing token); `None` while no
/// executor owns it (between the recovery sweep freeing a dead owner's route and the next claim).
pub async fn read_route(served: &Served, session: &str) -> Option<(String, u64)> {
    let read = super::command(served, "session.read", json!({ "sessionId": session })).await;
    let owner = read["recovery"]["workerId"].as_str()?.to_owned();
    let token = read["recovery"]["fencingToken"]
        .as_u64()
        .expect("a fencing token with the owner");
    Some((owner, token))
}

/// [`read_route`] of a session that has an owner.
pub async fn route(served: &Served, session: &str) -> (String, u64) {
    read_route(served, session)
        .await
        .expect("a route with an owner")
}

/// Waits (bounded) until an executor other than `old` owns the session.
pub async fn route_after(served: &Served, session: &str, old: &str) -> (String, u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(current) = read_route(served, session).await
            && current.0 != old
        {
            return current;
        }
        assert!(
            Instant::now() < deadline,
            "the session never moved off {old}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a session through `served`; returns its id.
pub async fn create_session(served: &Served) -> String {
    super::command(served, "session.create", json!({})).await["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Submits `input` to `session` through `served`; returns the request id.
pub async fn submit(served: &Served, session: &str, input: &str) -> String {
    let submitted = super::command(
        served,
        "input.submit",
        json!({ "sessionId": session, "input": input }),
    )
    .await;
    submitted["requestId"].as_str().unwrap().to_owned()
}
