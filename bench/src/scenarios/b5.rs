//! B5, connection scale: `connections` SSE connections to idle sessions (spread over `sessions`
//! sessions and every tenant) are opened and held on one server, then watched for 2.5 heartbeat
//! intervals. The figures: the server's resident memory per held connection (`VmRSS` of the
//! first `--pid` before and after), and how late heartbeats arrive (the gap between consecutive
//! heartbeats, and from the connection's start to the first one, minus the interval).
//!
//! Heartbeats are SSE comments, which `agent-runtime-client` rightly hides from its callers, so
//! this scenario reads the streams with the client's HTTP stack (`http_client_builder`) directly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runtime_client::{CancellationToken, http_client_builder};
use anyhow::Result;
use futures_util::StreamExt;
use tokio::sync::Semaphore;

use super::RunArgs;
use crate::outcome::Outcome;
use crate::procmem::rss_kib;
use crate::stats::Latencies;
use crate::target::Target;

/// Connections being opened at once.
pub const OPEN_CONCURRENCY: usize = 256;
const HEARTBEAT: &[u8] = b": heartbeat";

struct Held {
    /// Each heartbeat's lateness against the interval, in microseconds.
    lateness: Latencies,
    heartbeats: u64,
    /// Still open when the watch ended.
    open: bool,
}

// Stays whole: the scenario, phase by phase, as docs/benchmarks.md describes it.
pub async fn run(args: &RunArgs, _target: &Arc<Target>, outcome: &mut Outcome) -> Result<()> {
    let connections = args.connections.max(1);
    let sessions = args.sessions.unwrap_or(100).clamp(1, connections);
    let interval = Duration::from_millis(args.heartbeat_ms.max(1));
    let hold = interval * 5 / 2;
    outcome.param("connections", connections);
    outcome.param("sessions", sessions);
    outcome.param("heartbeatMs", args.heartbeat_ms);
    outcome.param("holdMs", hold.as_millis() as u64);

    // Every connection on the first gateway.
    let first = Target::new(&args.bases[..1], &args.token_prefix, args.tenants)?;
    first.initialize().await?;
    let created = first.create_sessions(sessions, args.clients, "b5").await?;
    let gateway = args.pids.first();
    // Let the allocator settle after the session creation burst.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = gateway.map(|named| rss_kib(named.pid)).transpose()?;

    let http = http_client_builder()
        .connect_timeout(Duration::from_secs(60))
        .build()?;
    let open_slots = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let connected = Arc::new(Semaphore::new(0));
    let stop = CancellationToken::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for index in 0..connections {
        let session = &created[index % sessions];
        // Session `i` belongs to client `i`'s tenant (see `create_sessions`).
        let token = first.token(index % sessions);
        let url = format!(
            "{}/sessions/{}/events?after=0",
            session.client().base_url(),
            session.session_id()
        );
        let http = http.clone();
        let (open_slots, connected, stop) = (
            Arc::clone(&open_slots),
            Arc::clone(&connected),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let slot = open_slots.acquire_owned().await.ok();
            let response = http.get(&url).bearer_auth(token).send().await;
            drop(slot);
            let response = match response {
                Ok(response) if response.status().is_success() => response,
                Ok(response) => {
                    connected.add_permits(1);
                    return Err(format!("HTTP_{}", response.status().as_u16()));
                }
                Err(_) => {
                    connected.add_permits(1);
                    return Err("TRANSPORT".to_owned());
                }
            };
            connected.add_permits(1);
            Ok(hold_open(response, interval, stop).await)
        }));
    }
    // Every connection answered (or failed); the watch starts now.
    let _all = connected.acquire_many(connections as u32).await?;
    let open_time = started.elapsed();
    tokio::time::sleep(hold).await;
    let after = gateway.map(|named| rss_kib(named.pid)).transpose()?;
    stop.cancel();

    let mut lateness = Latencies::new();
    let (mut held, mut heartbeats, mut failed) = (0u64, 0u64, 0u64);
    for task in tasks {
        match task.await? {
            Ok(connection) => {
                heartbeats += connection.heartbeats;
                held += u64::from(connection.open);
                lateness.merge(connection.lateness);
            }
            Err(code) => {
                failed += 1;
                outcome.error(&code);
            }
        }
    }
    outcome.figure(
        "connectionsPerSecond",
        connections as f64 / open_time.as_secs_f64().max(1e-9),
    );
    if let (Some(before), Some(after)) = (before, after) {
        outcome.figure("rssBeforeKiB", before as f64);
        outcome.figure("rssAfterKiB", after as f64);
        outcome.figure(
            "bytesPerConnection",
            after.saturating_sub(before) as f64 * 1024.0 / held.max(1) as f64,
        );
    }
    outcome.latency("heartbeatLateness", &lateness.summary());
    outcome.count("connections", connections as u64);
    outcome.count("held", held);
    outcome.count("closedEarly", connections as u64 - held - failed);
    outcome.count("failed", failed);
    outcome.count("heartbeats", heartbeats);
    Ok(())
}

/// Reads one stream until `stop`, timing its heartbeats.
async fn hold_open(
    response: reqwest::Response,
    interval: Duration,
    stop: CancellationToken,
) -> Held {
    let mut body = response.bytes_stream();
    let mut last = Instant::now();
    let mut held = Held {
        lateness: Latencies::new(),
        heartbeats: 0,
        open: true,
    };
    loop {
        let chunk = tokio::select! {
            chunk = body.next() => chunk,
            () = stop.cancelled() => return held,
        };
        match chunk {
            Some(Ok(bytes)) => {
                let beats = bytes
                    .windows(HEARTBEAT.len())
                    .filter(|w| *w == HEARTBEAT)
                    .count();
                if beats > 0 {
                    let now = Instant::now();
                    held.lateness
                        .record(now.duration_since(last).saturating_sub(interval));
                    held.heartbeats += beats as u64;
                    last = now;
                }
            }
            Some(Err(_)) | None => {
                held.open = false;
                return held;
            }
        }
    }
}
