//! B7, footprint: the resident memory of every `--pid` process while idle (run first, on freshly
//! started servers), then after each of `batches` batches of `sessions` idle sessions created and
//! loaded. The memory per session is the growth of all processes together divided by the number
//! of sessions (`bytesPerSession`).
//!
//! The first batch also grows, once, what does not depend on the number of sessions (connection
//! pools grown to the load, allocator arenas, buffers), and a hash table crossing a doubling
//! makes a single batch's growth lumpy. So the cost of each further session is the growth from
//! the end of the first batch to the end of the last, divided by the sessions created in between
//! (`marginalBytesPerSession`): the slope, without the intercept.

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
    let batches = args.batches.max(2);
    outcome.param("sessions", sessions);
    outcome.param("batches", batches);
    outcome.param(
        "processes",
        args.pids.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
    );

    tokio::time::sleep(SETTLE).await;
    let idle = rss_of(args)?;
    for (named, rss) in args.pids.iter().zip(&idle) {
        outcome.figure(&format!("idleRssKiB.{}", named.name), *rss as f64);
    }
    let mut after_first = Vec::new();
    let mut creating = Duration::ZERO;
    let mut last = idle.clone();
    for batch in 0..batches {
        let started = Instant::now();
        target.create_sessions(sessions, args.clients, "b7").await?;
        creating += started.elapsed();
        tokio::time::sleep(SETTLE).await;
        last = rss_of(args)?;
        if batch == 0 {
            after_first = last.clone();
        }
    }
    for (named, rss) in args.pids.iter().zip(&last) {
        outcome.figure(&format!("loadedRssKiB.{}", named.name), *rss as f64);
    }
    let created = (sessions * batches) as u64;
    outcome.figure("sessionsCreatedPerSecond", per_second(created, creating));
    if !args.pids.is_empty() {
        let per_session = |from: &[u64], to: &[u64], count: usize| {
            let growth: u64 = from.iter().zip(to).map(|(a, b)| b.saturating_sub(*a)).sum();
            growth as f64 * 1024.0 / count as f64
        };
        outcome.figure(
            "bytesPerSession",
            per_session(&idle, &last, sessions * batches),
        );
        outcome.figure(
            "marginalBytesPerSession",
            per_session(&after_first, &last, sessions * (batches - 1)),
        );
    }
    outcome.count("sessions", created);
    Ok(())
}

/// The resident KiB of every `--pid` process, in order.
fn rss_of(args: &RunArgs) -> Result<Vec<u64>> {
    args.pids.iter().map(|named| rss_kib(named.pid)).collect()
}
