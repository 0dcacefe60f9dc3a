//! B1, command throughput and latency: `clients` workers send `input.submit` round-robin over
//! their share of the sessions, as fast as they can (phase 1), then paced at half the rate phase 1
//! reached, or at `--paced-rate` (phase 2). Each submission starts a request (the demo echo); a session gets its next
//! input only after its previous request ended (a reader per session watches for the `result`),
//! so requests never pile up behind the measured commands.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_runtime_client::{CancellationToken, EventsOptions, RemoteSession};
use anyhow::Result;
use futures_util::StreamExt;
use tokio::sync::{Mutex, Semaphore};

use super::{RunArgs, per_second, submit};
use crate::outcome::Outcome;
use crate::stats::Latencies;
use crate::target::{Target, error_code};

/// How long the requests still running after a phase may take to end.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The input of every submission: the demo provider echoes it in a few deltas.
const INPUT: &str = "bench b1 command";

struct Tracked {
    session: RemoteSession,
    /// One permit while the session has no request running.
    idle: Arc<Semaphore>,
}

#[derive(Default)]
struct Shared {
    delivered: AtomicU64,
    ended: AtomicU64,
    stream_errors: AtomicU64,
}

#[derive(Default)]
struct Phase {
    latencies: Latencies,
    accepted: u64,
    errors: Vec<String>,
    elapsed: Duration,
}

pub async fn run(args: &RunArgs, target: &Arc<Target>, outcome: &mut Outcome) -> Result<()> {
    let clients = args.clients.max(1);
    let sessions = args.sessions.unwrap_or(clients * 8).max(clients);
    outcome.param("clients", clients);
    outcome.param("sessions", sessions);
    outcome.param("durationS", args.duration);
    outcome.param("input", INPUT);

    // The receiver may have counted an earlier run's deliveries.
    let webhooks_before = match &args.webhook_receiver {
        Some(receiver) => crate::receiver::count(receiver).await?,
        None => 0,
    };
    let created = target.create_sessions(sessions, clients, "b1").await?;
    let shared = Arc::new(Shared::default());
    let stop = CancellationToken::new();
    let mut tracked = Vec::new();
    for session in created {
        let idle = Arc::new(Semaphore::new(1));
        tokio::spawn(watch(
            session.clone(),
            Arc::clone(&idle),
            Arc::clone(&shared),
            stop.clone(),
        ));
        tracked.push(Tracked { session, idle });
    }
    let tracked = Arc::new(tracked);
    let counters = match &args.database_url {
        Some(url) => Some(crate::pgstats::read(url).await?),
        None => None,
    };

    let server = args.pids.first().map(|named| named.pid);
    let cpu_before = server.map(crate::procmem::cpu_ms).transpose()?;
    let mut max = run_phase(&tracked, clients, args.duration(), None).await;
    let max_rate = per_second(max.accepted, max.elapsed);
    if let (Some(pid), Some(before)) = (server, cpu_before) {
        let used = crate::procmem::cpu_ms(pid)? - before;
        outcome.figure("serverCpuMsPerCommand", used / max.accepted.max(1) as f64);
    }
    drain(&shared, &tracked).await;
    let half_rate = args.paced_rate.unwrap_or(max_rate / 2.0);
    let mut half = run_phase(&tracked, clients, args.duration(), Some(half_rate)).await;
    drain(&shared, &tracked).await;
    stop.cancel();

    let accepted = max.accepted + half.accepted;
    if let (Some(url), Some(before)) = (&args.database_url, counters) {
        tokio::time::sleep(crate::pgstats::SETTLE).await;
        let after = crate::pgstats::read(url).await?;
        for (name, value) in after.per(&before, accepted) {
            outcome.figure(&format!("{name}PerCommand"), value);
        }
    }
    let ended = shared.ended.load(Ordering::Relaxed);
    if let Some(receiver) = &args.webhook_receiver {
        let (delivered, waited) = webhooks_delivered(receiver, webhooks_before, ended).await?;
        outcome.count("webhooksDelivered", delivered);
        outcome.figure("webhooksLastDeliveredAfterS", waited.as_secs_f64());
    }
    outcome.figure("commandsPerSecond", max_rate);
    outcome.latency("latency", &max.latencies.summary());
    outcome.figure("halfRateTarget", half_rate);
    outcome.figure(
        "halfRateCommandsPerSecond",
        per_second(half.accepted, half.elapsed),
    );
    outcome.latency("halfRateLatency", &half.latencies.summary());
    outcome.figure(
        "eventsDeliveredPerSecond",
        per_second(
            shared.delivered.load(Ordering::Relaxed),
            max.elapsed + half.elapsed,
        ),
    );
    let failed = (max.errors.len() + half.errors.len()) as u64;
    outcome.count("submitted", accepted + failed);
    outcome.count("accepted", accepted);
    outcome.count("failed", failed);
    outcome.count("requestsEnded", ended);
    outcome.count("streamErrors", shared.stream_errors.load(Ordering::Relaxed));
    for code in max.errors.iter().chain(&half.errors) {
        outcome.error(code);
    }
    Ok(())
}

/// Waits (at most [`DRAIN_TIMEOUT`]) until the receiver counted `requests` deliveries more than
/// `before`: every request's `request.completed`. Returns the count and how long after the load
/// it was reached.
async fn webhooks_delivered(receiver: &str, before: u64, requests: u64) -> Result<(u64, Duration)> {
    let started = Instant::now();
    loop {
        let delivered = crate::receiver::count(receiver)
            .await?
            .saturating_sub(before);
        if delivered >= requests || started.elapsed() > DRAIN_TIMEOUT {
            return Ok((delivered, started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Follows one session and gives its permit back at the end of each request.
async fn watch(
    session: RemoteSession,
    idle: Arc<Semaphore>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let mut events = session.events(EventsOptions {
        cancel: Some(stop.clone()),
        ..EventsOptions::default()
    });
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                shared.delivered.fetch_add(1, Ordering::Relaxed);
                if event.is_request_end() {
                    shared.ended.fetch_add(1, Ordering::Relaxed);
                    idle.add_permits(1);
                }
            }
            Err(_) if stop.is_cancelled() => return,
            Err(_) => {
                shared.stream_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// One phase: every worker loops over its sessions until `duration` has passed; with a `rate`
/// (commands per second over all workers) each worker keeps a fixed schedule.
async fn run_phase(
    tracked: &Arc<Vec<Tracked>>,
    clients: usize,
    duration: Duration,
    rate: Option<f64>,
) -> Phase {
    let phase = Arc::new(Mutex::new(Phase::default()));
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + duration;
    let mut workers = Vec::new();
    for worker in 0..clients {
        let tracked = Arc::clone(tracked);
        let phase = Arc::clone(&phase);
        let interval = rate.map(|rate| Duration::from_secs_f64(clients as f64 / rate.max(1e-3)));
        workers.push(tokio::spawn(async move {
            let mut local = Phase::default();
            let mine: Vec<&Tracked> = tracked.iter().skip(worker).step_by(clients).collect();
            // Spread the workers' schedules over one interval.
            let mut next = tokio::time::Instant::now()
                + interval.map_or(Duration::ZERO, |i| i * worker as u32 / clients as u32);
            'outer: loop {
                for session in &mine {
                    if let Some(interval) = interval {
                        tokio::time::sleep_until(next).await;
                        next += interval;
                    }
                    if tokio::time::Instant::now() >= deadline {
                        break 'outer;
                    }
                    let Ok(permit) = session.idle.acquire().await else {
                        break 'outer;
                    };
                    permit.forget();
                    let sent = Instant::now();
                    match submit(&session.session, INPUT).await {
                        Ok(_) => {
                            local.latencies.record(sent.elapsed());
                            local.accepted += 1;
                        }
                        Err(error) => {
                            // No request started: the session is idle again.
                            session.idle.add_permits(1);
                            local.errors.push(error_code(&error));
                        }
                    }
                }
            }
            let mut phase = phase.lock().await;
            phase.latencies.merge(local.latencies);
            phase.accepted += local.accepted;
            phase.errors.extend(local.errors);
        }));
    }
    for worker in workers {
        let _ = worker.await;
    }
    let mut phase = std::mem::take(&mut *phase.lock().await);
    phase.elapsed = started.elapsed();
    phase
}

/// Waits until no request is running (every session has its permit back).
async fn drain(shared: &Shared, tracked: &[Tracked]) {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    while Instant::now() < deadline {
        if tracked.iter().all(|t| t.idle.available_permits() == 1) {
            return;
        }
        if shared.stream_errors.load(Ordering::Relaxed) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
