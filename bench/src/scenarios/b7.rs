//! B7, footprint: the resident memory of every `--pid` process while idle (run first, on freshly
//! started servers), then after `sessions` idle sessions were created and loaded. The memory per
//! session is the growth of all processes together divided by the session count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{RunArgs, per_second};
use crate::outcome::Outcome;
use crate::procmem::rss_kib;
use crate::target::Target;
use anyhow::Result;

/// Let allocators settle before reading memory.
const SETTLE: Duration = Duration::from_secs(1);

pub async fn run(args: &RunArgs, target: &Arc<Target>, outcome: &mut Outcome) -> Result<()> {
    let sessions = args.sessions.unwrap_or(1000).max(1);
    outcome.param("sessions", sessions);
    outcome.param(
        "processes",
        args.pids.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
    );

    tokio::time::sleep(SETTLE).await;
    let mut before = Vec::new();
    for named in &args.pids {
        let rss = rss_kib(named.pid)?;
        outcome.figure(&format!("idleRssKiB.{}", named.name), rss as f64);
        before.push(rss);
    }
    let started = Instant::now();
    target.create_sessions(sessions, args.clients, "b7").await?;
    let elapsed = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    let mut growth = 0u64;
    for (named, before) in args.pids.iter().zip(before) {
        let rss = rss_kib(named.pid)?;
        outcome.figure(&format!("loadedRssKiB.{}", named.name), rss as f64);
        growth += rss.saturating_sub(before);
    }
    outcome.figure(
        "sessionsCreatedPerSecond",
        per_second(sessions as u64, elapsed),
    );
    if !args.pids.is_empty() {
        outcome.figure("bytesPerSession", growth as f64 * 1024.0 / sessions as f64);
    }
    outcome.count("sessions", sessions as u64);
    Ok(())
}
