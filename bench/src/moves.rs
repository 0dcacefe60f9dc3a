//! B8: a deployment moved with session bundles (docs/bundles.md). A JSONL deployment of
//! `sessions` sessions with `events` events each is written straight into its store; then the
//! product's own binary runs the four steps of a move there and back: `export` from JSONL,
//! `import` into PostgreSQL, `export` from PostgreSQL, `import` into a new JSONL directory. Each
//! step is timed and its peak resident memory (`VmHWM`) sampled, and held against the same bytes
//! moved without the product in the same run: the JSONL journal copied and synced (the file
//! steps), and the bundle's lines `COPY`ed into and out of a one-column PostgreSQL table (the
//! PostgreSQL steps). Run at two sizes, the peak memory shows what grows with the deployment.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use agent_runtime::protocol::{EventType, JsonObject, SessionStatus};
use agent_runtime_store::jsonl::JOURNAL_FILE;
use agent_runtime_store::{
    EventLog, JsonlStore, NewEvent, SessionRecord, SessionRecords, StoreLifecycle, StoreOptions,
};
use anyhow::{Context, bail};
use serde_json::Value;
use tokio::process::Command;

use crate::outcome::{Kind, Outcome};

#[derive(Debug, Clone, clap::Args)]
pub struct MoveArgs {
    /// The `agent-runtime` binary whose `export` and `import` are measured.
    #[arg(long)]
    pub binary: PathBuf,
    /// A directory for the deployments and bundles (created; left for inspection).
    #[arg(long)]
    pub work: PathBuf,
    /// An empty PostgreSQL database to import into.
    #[arg(long, env = "AGENT_RUNTIME_BENCH_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    #[arg(long, default_value_t = 10_000)]
    pub sessions: u64,
    #[arg(long, default_value_t = 20)]
    pub events: u64,
    #[arg(long, default_value_t = 10)]
    pub tenants: u64,
    /// Writes `b8-<step>@<sessions>.json` here.
    #[arg(long)]
    pub out_dir: PathBuf,
}

/// Writes the deployment; returns the size of its journal.
async fn deployment(dir: &Path, args: &MoveArgs) -> anyhow::Result<u64> {
    let store = JsonlStore::open(dir, StoreOptions::default()).await?;
    let text = "x".repeat(120);
    for n in 0..args.sessions {
        let tenant_id = format!("tenant-{:02}", n % args.tenants);
        let session_id = format!("session-{n:06}");
        store
            .put_session(&SessionRecord {
                tenant_id: tenant_id.clone(),
                created_by: "bench".to_owned(),
                session_id: session_id.clone(),
                status: SessionStatus::Active,
                created_at: "2026-01-01T00:00:00.000Z".to_owned(),
                updated_at: "2026-01-01T00:00:00.000Z".to_owned(),
                metadata: None,
                profile: None,
            })
            .await?;
        let events = (0..args.events)
            .map(|turn| NewEvent {
                session_id: session_id.clone(),
                request_id: Some(format!("request-{}", turn / 5)),
                occurred_at: String::new(),
                event_type: EventType::SessionStream,
                data: JsonObject::from_iter([
                    ("type".to_owned(), Value::from("content")),
                    ("delta".to_owned(), Value::from(format!("{turn} {text}"))),
                ]),
            })
            .collect();
        store
            .append_events(&tenant_id, &session_id, events, None)
            .await?;
    }
    store.close().await?;
    Ok(std::fs::metadata(dir.join(JOURNAL_FILE))?.len())
}

/// `VmHWM` (peak resident memory) of a running process, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Runs `binary ARGS` to its end; returns the wall time and the last peak memory sampled.
async fn measured(binary: &Path, args: &[&str]) -> anyhow::Result<(Duration, u64)> {
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting agent-runtime")?;
    let pid = child.id().context("the child's pid")?;
    let mut peak = 0;
    let status = loop {
        if let Some(sampled) = peak_rss_kib(pid) {
            peak = peak.max(sampled);
        }
        tokio::select! {
            status = child.wait() => break status?,
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    };
    if !status.success() {
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = pipe.read_to_string(&mut stderr).await;
        }
        bail!("agent-runtime {args:?} failed: {stderr}");
    }
    Ok((started.elapsed(), peak))
}

/// The seconds it takes to copy `from` to `to` and sync it: moving the bytes without the product.
fn copy_synced(from: &Path, to: &Path) -> anyhow::Result<f64> {
    let started = Instant::now();
    std::fs::copy(from, to)?;
    std::fs::File::open(to)?.sync_all()?;
    Ok(started.elapsed().as_secs_f64())
}

/// Every part of a bundle, concatenated (what `COPY` moves).
fn concatenated(bundle: &Path, to: &Path) -> anyhow::Result<u64> {
    let mut out = std::fs::File::create(to)?;
    let mut parts: Vec<PathBuf> = std::fs::read_dir(bundle.join("parts"))?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()?;
    parts.sort();
    let mut bytes = 0;
    for part in parts {
        bytes += std::io::copy(&mut std::fs::File::open(part)?, &mut out)?;
    }
    out.sync_all()?;
    Ok(bytes)
}

/// Runs one `psql` statement (COPY with `\copy`); returns its seconds.
async fn psql(url: &str, statement: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    // The PostgreSQL binaries scripts/with-postgres.sh names, else the `psql` on PATH.
    let psql =
        std::env::var("PG_BIN_DIR").map_or_else(|_| "psql".into(), |dir| format!("{dir}/psql"));
    let output = Command::new(psql)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", statement])
        .output()
        .await
        .context("running psql")?;
    if !output.status.success() {
        bail!("psql failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(started.elapsed().as_secs_f64())
}

fn bundle_bytes(bundle: &Path) -> anyhow::Result<u64> {
    let manifest: Value = serde_json::from_slice(&std::fs::read(bundle.join("manifest.json"))?)?;
    let index = manifest["index"]["bytes"].as_u64().unwrap_or(0);
    let parts: u64 = std::fs::read_dir(bundle.join("parts"))?
        .filter_map(|entry| entry.ok()?.metadata().ok())
        .map(|meta| meta.len())
        .sum();
    Ok(index + parts)
}

pub async fn run(args: MoveArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.work)?;
    std::fs::create_dir_all(&args.out_dir)?;
    let size = args.sessions;
    let dir = |name: &str| args.work.join(format!("{name}-{size}"));
    let source = dir("source");
    let journal_bytes = deployment(&source, &args).await?;
    let events = args.sessions * args.events;

    // The file steps' limit: the journal's bytes copied and synced.
    let journal = source.join(JOURNAL_FILE);
    let copy_seconds = copy_synced(&journal, &args.work.join(format!("journal-copy-{size}")))?;
    let file_limit = journal_bytes as f64 / copy_seconds / 1e6;

    let to_postgres = dir("bundle-to-postgres");
    let back = dir("bundle-to-jsonl");
    let target = dir("target");
    let (to_postgres_arg, back_arg, target_arg) = (
        to_postgres.to_str().unwrap_or_default(),
        back.to_str().unwrap_or_default(),
        target.to_str().unwrap_or_default(),
    );
    let url = args.database_url.as_str();
    let steps: [(&str, Vec<&str>, &Path); 4] = [
        (
            "jsonl-export",
            vec![
                "export",
                "--quiet",
                "--data-dir",
                source.to_str().unwrap_or_default(),
                "--out",
                to_postgres_arg,
            ],
            &to_postgres,
        ),
        (
            "postgres-import",
            vec![
                "import",
                "--quiet",
                "--bundle",
                to_postgres_arg,
                "--store",
                "postgres",
                "--database-url",
                url,
            ],
            &to_postgres,
        ),
        (
            "postgres-export",
            vec![
                "export",
                "--quiet",
                "--store",
                "postgres",
                "--database-url",
                url,
                "--out",
                back_arg,
            ],
            &back,
        ),
        (
            "jsonl-import",
            vec![
                "import",
                "--quiet",
                "--bundle",
                back_arg,
                "--data-dir",
                target_arg,
            ],
            &back,
        ),
    ];
    for (step, command, bundle) in steps {
        let (elapsed, peak_kib) = measured(&args.binary, &command).await?;
        let bytes = bundle_bytes(bundle)?;
        let limit = match step {
            "jsonl-export" | "jsonl-import" => file_limit,
            _ => {
                let lines = args.work.join(format!("lines-{size}.jsonl"));
                let line_bytes = concatenated(bundle, &lines)?;
                let path = lines.to_str().unwrap_or_default();
                // CSV with quote and delimiter bytes no JSON line holds: each line one raw value.
                let raw = "(FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')";
                psql(url, "DROP TABLE IF EXISTS bench_bundle_lines").await?;
                psql(url, "CREATE TABLE bench_bundle_lines (line text)").await?;
                let seconds = match step {
                    "postgres-import" => {
                        psql(
                            url,
                            &format!("\\copy bench_bundle_lines FROM '{path}' WITH {raw}"),
                        )
                        .await?
                    }
                    _ => {
                        psql(
                            url,
                            &format!("\\copy bench_bundle_lines FROM '{path}' WITH {raw}"),
                        )
                        .await?;
                        let out = args.work.join(format!("lines-out-{size}.jsonl"));
                        let out = out.to_str().unwrap_or_default();
                        psql(
                            url,
                            &format!("\\copy bench_bundle_lines TO '{out}' WITH {raw}"),
                        )
                        .await?
                    }
                };
                psql(url, "DROP TABLE bench_bundle_lines").await?;
                line_bytes as f64 / seconds / 1e6
            }
        };
        let seconds = elapsed.as_secs_f64();
        let mut outcome = Outcome::new(Kind::Scenario, "b8", &format!("{step}@{size}"));
        outcome.elapsed_s = seconds;
        outcome.param("sessions", size);
        outcome.param("eventsPerSession", args.events);
        outcome.param("tenants", args.tenants);
        outcome.count("sessions", size);
        outcome.count("events", events);
        outcome.count("bundleBytes", bytes);
        outcome.figure("sessionsPerSecond", size as f64 / seconds);
        outcome.figure("eventsPerSecond", events as f64 / seconds);
        outcome.figure("megabytesPerSecond", bytes as f64 / seconds / 1e6);
        outcome.figure("peakRssMiB", peak_kib as f64 / 1024.0);
        outcome.figure("limitMegabytesPerSecond", limit);
        outcome.command = format!("agent-runtime {}", command.join(" "));
        eprintln!("{}", outcome.human());
        outcome.emit(Some(&args.out_dir.join(format!("b8-{step}@{size}.json"))))?;
    }
    Ok(())
}
