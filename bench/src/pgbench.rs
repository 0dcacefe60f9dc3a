//! PostgreSQL limits: `pgbench` with the benchmark's two transaction shapes (`bench/sql/`), on
//! the database the product uses, with the same client count as the scenario it bounds.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use tokio::process::Command;

use crate::outcome::{Kind, Outcome};
use crate::stats::Latencies;

pub const SCHEMA_SQL: &str = include_str!("../sql/schema.sql");
pub const INSERT_SQL: &str = include_str!("../sql/insert.sql");
pub const COMMAND_SQL: &str = include_str!("../sql/command.sql");
pub const B1_ROWS_SQL: &str = include_str!("../sql/b1-rows.sql");

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Script {
    /// One-row insert per transaction (`bench/sql/insert.sql`).
    Insert,
    /// Insert a command row, update it, insert an event (`bench/sql/command.sql`).
    Command,
    /// Every row one B1 command writes, in the product's three transactions, as plain SQL
    /// (`bench/sql/b1-rows.sql`): B1's bound with the server's own CPU taken as zero.
    B1Rows,
}

#[derive(Debug, Clone, clap::Args)]
pub struct PgbenchArgs {
    /// The transaction shape.
    #[arg(long, value_enum)]
    pub script: Script,
    /// PostgreSQL URL (the benchmark's own instance).
    #[arg(long, env = "AGENT_RUNTIME_BENCH_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Clients (`pgbench -c`).
    #[arg(long, default_value_t = 8)]
    pub clients: u32,
    /// Threads (`pgbench -j`).
    #[arg(long, default_value_t = 2)]
    pub jobs: u32,
    /// Seconds (`pgbench -T`).
    #[arg(long, default_value_t = 10)]
    pub duration: u32,
    /// Paces all clients together at this many transactions a second (`pgbench -R`) and
    /// reports the latency percentiles from pgbench's per-transaction log: what one commit costs
    /// at a scenario's rate, rather than at saturation. The limit is named `NAME-paced`.
    #[arg(long)]
    pub rate: Option<u32>,
    /// Also write the JSON result to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub async fn run(args: PgbenchArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("agent-runtime-bench-sql-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let schema = dir.join("schema.sql");
    std::fs::write(&schema, SCHEMA_SQL)?;
    let (name, sql) = match args.script {
        Script::Insert => ("pgbench-insert", INSERT_SQL),
        Script::Command => ("pgbench-command", COMMAND_SQL),
        Script::B1Rows => ("pgbench-b1-rows", B1_ROWS_SQL),
    };
    let name = match args.rate {
        Some(_) => format!("{name}-paced"),
        None => name.to_owned(),
    };
    let script = dir.join(format!("{name}.sql"));
    std::fs::write(&script, sql)?;

    let created = Command::new("psql")
        .args(["-q", "-X", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(&schema)
        .arg(&args.database_url)
        .output()
        .await
        .context("running psql (is the PostgreSQL client installed?)")?;
    if !created.status.success() {
        bail!("psql failed: {}", String::from_utf8_lossy(&created.stderr));
    }

    let mut outcome = Outcome::new(Kind::Limit, &name, "postgresql");
    outcome.param("clients", args.clients);
    outcome.param("jobs", args.jobs);
    outcome.param("durationS", args.duration);
    let started = Instant::now();
    let mut pgbench = Command::new("pgbench");
    pgbench
        .args(["-n", "-M", "prepared"])
        .args(["-c", &args.clients.to_string()])
        .args(["-j", &args.jobs.to_string()])
        .args(["-T", &args.duration.to_string()]);
    let log_prefix = dir.join("latency");
    if let Some(rate) = args.rate {
        outcome.param("ratePerSecond", rate);
        pgbench
            .args(["-R", &rate.to_string(), "-l", "--log-prefix"])
            .arg(&log_prefix);
    }
    let output = pgbench
        .arg("-f")
        .arg(&script)
        .arg(&args.database_url)
        .output()
        .await
        .context("running pgbench")?;
    let latencies = match args.rate {
        Some(_) => Some(read_latency_logs(&dir)?),
        None => None,
    };
    let _ = std::fs::remove_dir_all(&dir);
    outcome.elapsed_s = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "pgbench failed: {}{}",
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let report = parse(&stdout).context("reading pgbench's report")?;
    outcome.figure("tps", report.tps);
    outcome.figure("latencyMeanMs", report.latency_ms);
    outcome.count("transactions", report.transactions);
    outcome.count("failed", report.failed);
    if let Some(mut latencies) = latencies {
        let summary = latencies.summary();
        outcome.figure("latencyP50Ms", summary.p50_ms);
        outcome.figure("latencyP99Ms", summary.p99_ms);
        outcome.figure("latencyMaxMs", summary.max_ms);
    }
    outcome.emit(args.out.as_deref())
}

/// Every transaction's latency from pgbench's logs in `dir` (one file per thread; the third
/// field of a line is the latency in microseconds).
fn read_latency_logs(dir: &std::path::Path) -> anyhow::Result<Latencies> {
    let mut latencies = Latencies::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let is_log = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("latency."));
        if !is_log {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines() {
            if let Some(micros) = line.split_whitespace().nth(2).and_then(|f| f.parse().ok()) {
                latencies.record_micros(micros);
            }
        }
    }
    anyhow::ensure!(!latencies.is_empty(), "pgbench wrote no latency log");
    Ok(latencies)
}

#[derive(Debug, PartialEq)]
struct Report {
    tps: f64,
    latency_ms: f64,
    transactions: u64,
    failed: u64,
}

fn parse(text: &str) -> Option<Report> {
    let value_after = |prefix: &str| -> Option<&str> {
        let line = text.lines().find(|line| line.starts_with(prefix))?;
        line[prefix.len()..].split_whitespace().next()
    };
    Some(Report {
        tps: value_after("tps = ")?.parse().ok()?,
        latency_ms: value_after("latency average = ")?.parse().ok()?,
        transactions: value_after("number of transactions actually processed: ")?
            .split('/')
            .next()?
            .parse()
            .ok()?,
        failed: value_after("number of failed transactions: ")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_pgbench_report() {
        let text = "transaction type: /tmp/insert.sql\nscaling factor: 1\nquery mode: prepared\nnumber of clients: 8\nnumber of threads: 2\nmaximum number of tries: 1\nduration: 10 s\nnumber of transactions actually processed: 131072\nnumber of failed transactions: 0 (0.000%)\nlatency average = 0.610 ms\ninitial connection time = 12.345 ms\ntps = 13107.2 (without initial connection time)\n";
        assert_eq!(
            parse(text),
            Some(Report {
                tps: 13107.2,
                latency_ms: 0.61,
                transactions: 131_072,
                failed: 0
            })
        );
        assert_eq!(parse("garbage"), None);
    }

    #[test]
    fn reads_every_threads_latency_log() {
        let dir = tempfile::tempdir().unwrap();
        // pgbench -l: client, transaction, latency (µs), script, epoch s, µs; `-R` adds the lag.
        let thread = |n: usize, first: u64| {
            (0..50)
                .map(|i| format!("{n} {i} {} 0 1733497200 123456 12\n", first + i))
                .collect::<String>()
        };
        std::fs::write(dir.path().join("latency.100"), thread(0, 1000)).unwrap();
        std::fs::write(dir.path().join("latency.100.1"), thread(1, 2000)).unwrap();
        std::fs::write(dir.path().join("insert.sql"), "SELECT 1;").unwrap();
        let summary = read_latency_logs(dir.path()).unwrap().summary();
        assert_eq!(summary.count, 100);
        assert_eq!(summary.p50_ms, 1.049);
        assert_eq!(summary.p99_ms, 2.048);
        assert!(read_latency_logs(tempfile::tempdir().unwrap().path()).is_err());
    }
}
