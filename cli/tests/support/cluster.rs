//! A cluster of real processes on one PostgreSQL database: two executors and two gateways,
//! started by the process tests (cluster_processes.rs, p0_cluster.rs).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::Served;

pub const SECRET: &str = "cluster-secret-of-the-process-tests";
pub const TOKEN: &str = "cluster-test-token";
pub const LEASE_TTL_MS: &str = "1500";

pub struct Cluster {
    pub database_url: String,
    pub config: tempfile::NamedTempFile,
    /// What every executor reads with `--config` (e.g. a model provider), if anything.
    pub executor_config: Option<PathBuf>,
    pub executors: Vec<(String, Child)>,
    pub gateways: Vec<Child>,
    pub gateway_urls: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.executors {
            let _ = child.kill();
            let _ = child.wait();
        }
        for child in &mut self.gateways {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Spawns a process and returns it with the first stdout line that starts with `ready`.
pub fn spawn(args: &[&str], database_url: &str, ready: &str) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .args(args)
        .env("AGENT_RUNTIME_DATABASE_URL", database_url)
        .env("AGENT_RUNTIME_CLUSTER_SECRET", SECRET)
        .env("AGENT_RUNTIME_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = loop {
        let line = lines
            .next()
            .expect("the process prints when it is ready")
            .unwrap();
        if line.starts_with(ready) {
            break line;
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, line)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    pub async fn start() -> Cluster {
        Cluster::start_with(None).await
    }

    /// A cluster whose executors read `executor_config` (`--config`).
    pub async fn start_with(executor_config: Option<&Path>) -> Cluster {
        let database_url = agent_runtime_store::testing::postgres::fresh_database_url()
            .await
            .expect("a test database");
        let config = tempfile::NamedTempFile::new().unwrap();
        let hash = agent_runtime_gateway::token_sha256(TOKEN);
        std::fs::write(
            config.path(),
            format!(
                "[gateway]\nheartbeat_interval_ms = 500\n\n[[auth.tokens]]\nsha256 = \"{hash}\"\ntenant = \"tenant-a\"\nsubject = \"user-a\"\nscopes = [\"session:admin\"]\n"
            ),
        )
        .unwrap();
        let mut cluster = Cluster {
            database_url,
            config,
            executor_config: executor_config.map(Path::to_path_buf),
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

    pub fn start_executor(&mut self, worker_id: &str) {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut args = vec![
            "executor",
            "--listen",
            &listen,
            "--worker-id",
            worker_id,
            "--lease-ttl-ms",
            LEASE_TTL_MS,
            "--demo-slow-delta-interval-ms",
            "100",
        ];
        if let Some(config) = &self.executor_config {
            args.extend(["--config", config.to_str().unwrap()]);
        }
        let (child, _) = spawn(&args, &self.database_url, "agent-runtime executor");
        self.executors.push((worker_id.to_owned(), child));
    }

    pub fn start_gateway(&mut self) -> usize {
        let listen = format!("127.0.0.1:{}", free_port());
        let config = self.config.path().to_str().unwrap().to_owned();
        let (child, line) = spawn(
            &["gateway", "--listen", &listen, "--config", &config],
            &self.database_url,
            "agent-runtime gateway is serving on ",
        );
        let url = line
            .trim_start_matches("agent-runtime gateway is serving on ")
            .trim()
            .to_owned();
        self.gateways.push(child);
        self.gateway_urls.push(format!("{url}/v1/agent"));
        self.gateway_urls.len() - 1
    }

    pub fn served(&self, gateway: usize) -> Served {
        Served::remote(&self.gateway_urls[gateway], TOKEN)
    }

    pub fn executor(&mut self, worker_id: &str) -> &mut Child {
        &mut self
            .executors
            .iter_mut()
            .find(|(id, _)| id == worker_id)
            .unwrap()
            .1
    }
}
