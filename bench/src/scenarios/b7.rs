//! B7, footprint: the resident memory of every `--pid` process while idle (run first, on freshly
//! started servers), then after `sessions` idle sessions were created and loaded. The memory per
//! session is the growth of all processes together divided by the session count.
//!
//! That growth also holds what the first burst of work leaves behind once, whatever the number of
//! sessions (connection pools grown to the load, allocator arenas, buffers), so a second batch of
//! as many sessions is created and measured too: its growth per session is what each further
//! loaded session holds (`marginalBytesPerSession`).

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
    let loaded = rss_of(args)?;
    for (named, rss) in args.pids.iter().zip(&loaded) {
        outcome.figure(&format!("loadedRssKiB.{}", named.name), *rss as f64);
    }
    outcome.figure(
        "sessionsCreatedPerSecond",
        per_second(sessions as u64, elapsed),
    );
    target.create_sessions(sessions, args.clients, "b7").await?;
    tokio::time::sleep(SETTLE).await;
    let doubled = rss_of(args)?;
    if !args.pids.is_empty() {
        let per_session = |from: &[u64], to: &[u64]| {
            let growth: u64 = from.iter().zip(to).map(|(a, b)| b.saturating_sub(*a)).sum();
            growth as f64 * 1024.0 / sessions as f64
        };
        outcome.figure("bytesPerSession", per_session(&before, &loaded));
        outcome.figure("marginalBytesPerSession", per_session(&loaded, &doubled));
    }
    outcome.count("sessions", 2 * sessions as u64);
    Ok(())
}

/// The resident KiB of every `--pid` process, in order.
fn rss_of(args: &RunArgs) -> Result<Vec<u64>> {
    args.pids.iter().map(|named| rss_kib(named.pid)).collect()
}
