//! B6, fan-out: `subscribers` SSE connections on one session, which then streams stamped deltas
//! at `rate` per second for `duration` (`demo:deltas=N demo:interval=MS demo:stamp`). A warm-up
//! request first proves every subscriber connected and delivering. Figures: whether every event
//! reached every subscriber, and the delivery latency (arrival minus the delta's wall-clock
//! stamp) over all subscribers.
//!
//! Subscribers read with the client's HTTP stack and a lean frame splitter: a thousand strictly
//! validating clients on the server's own two cores would measure the validation (B4's
//! `validatedEventsPerSecond` is that client's rate), not the server's fan-out.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime_client::http_client_builder;
use anyhow::Result;
use futures_util::StreamExt;
use tokio::sync::Semaphore;

use super::frames::{FrameSplitter, contains, stamp};
use super::{RunArgs, per_second, submit};
use crate::outcome::Outcome;
use crate::stats::Latencies;
use crate::target::{Target, error_code, last_sequence, unix_micros};

/// Longest wait for every subscriber to see the warm-up request.
const WARM_UP_TIMEOUT: Duration = Duration::from_secs(120);
/// Connections being opened at once.
const OPEN_CONCURRENCY: usize = 256;
const RESULT: &[u8] = b"\"type\":\"result\"";

// Stays whole: the scenario, phase by phase, as docs/benchmarks.md describes it.
pub async fn run(args: &RunArgs, target: &Arc<Target>, outcome: &mut Outcome) -> Result<()> {
    let subscribers = args.subscribers.max(1);
    let (interval_ms, deltas) = args.pace(200);
    outcome.param("subscribers", subscribers);
    outcome.param("eventsPerSecond", 1000 / interval_ms);
    outcome.param("deltas", deltas);

    let session = target
        .create_sessions(1, 1, "b6")
        .await?
        .pop()
        .expect("one session");
    let after = last_sequence(&session).await?;
    let url = format!(
        "{}/sessions/{}/events?after={after}",
        session.client().base_url(),
        session.session_id()
    );
    let http = http_client_builder()
        .connect_timeout(Duration::from_secs(60))
        .build()?;
    let opening = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let ready = Arc::new(Semaphore::new(0));
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        let request = http.get(&url).bearer_auth(target.token(0));
        let (opening, ready) = (Arc::clone(&opening), Arc::clone(&ready));
        tasks.push(tokio::spawn(async move {
            let slot = opening.acquire_owned().await;
            let response = request.send().await;
            drop(slot);
            let response = match response {
                Ok(response) if response.status().is_success() => response,
                Ok(response) => return Err(format!("HTTP_{}", response.status().as_u16())),
                Err(_) => return Err("TRANSPORT".to_owned()),
            };
            subscribe(response, &ready).await
        }));
    }
    let warm_up = submit(&session, "demo:deltas=1")
        .await
        .map_err(|e| anyhow::anyhow!(error_code(&e)))?;
    let all_ready =
        tokio::time::timeout(WARM_UP_TIMEOUT, ready.acquire_many(subscribers as u32)).await;
    anyhow::ensure!(
        all_ready.is_ok(),
        "not every subscriber saw the warm-up input {}",
        warm_up.input_id
    );

    let started = std::time::Instant::now();
    submit(
        &session,
        &format!("demo:deltas={deltas} demo:interval={interval_ms} demo:stamp"),
    )
    .await
    .map_err(|e| anyhow::anyhow!(error_code(&e)))?;
    let mut latencies = Latencies::new();
    let mut complete = 0u64;
    let (mut first_stamp, mut last_stamp) = (u64::MAX, 0);
    for task in tasks {
        match task.await? {
            Ok(seen) => {
                complete += u64::from(seen.latencies.len() as u64 == deltas);
                latencies.merge(seen.latencies);
                first_stamp = first_stamp.min(seen.first_stamp);
                last_stamp = last_stamp.max(seen.last_stamp);
            }
            Err(code) => outcome.error(&code),
        }
    }
    // The rate the session streamed at: a server that stops taking deltas (a full channel from
    // the provider) slows the producer down.
    if last_stamp > first_stamp && deltas > 1 {
        let streamed = Duration::from_micros(last_stamp - first_stamp);
        outcome.figure("streamedEventsPerSecond", per_second(deltas - 1, streamed));
    }
    let elapsed = started.elapsed();
    let expected = deltas * subscribers as u64;
    let delivered = latencies.len() as u64;
    outcome.figure("deliveredPerSecond", per_second(delivered, elapsed));
    outcome.latency("latency", &latencies.summary());
    outcome.count("expected", expected);
    outcome.count("delivered", delivered);
    outcome.count("missing", expected.saturating_sub(delivered));
    outcome.count("completeSubscribers", complete);
    Ok(())
}

/// What one subscriber saw of the streamed request.
struct Seen {
    latencies: Latencies,
    /// The earliest and latest stamp: how fast the session actually streamed.
    first_stamp: u64,
    last_stamp: u64,
}

/// Reads one subscription: a permit on `ready` at the end of the warm-up request, then the
/// latency of every stamped delta until the next request ends.
async fn subscribe(response: reqwest::Response, ready: &Semaphore) -> Result<Seen, String> {
    let mut body = response.bytes_stream();
    let mut frames = FrameSplitter::default();
    let mut seen = Seen {
        latencies: Latencies::new(),
        first_stamp: u64::MAX,
        last_stamp: 0,
    };
    let mut ends = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|_| "TRANSPORT".to_owned())?;
        let received = unix_micros();
        frames.push(&chunk, |data| {
            if contains(data, RESULT) {
                ends += 1;
                if ends == 1 {
                    ready.add_permits(1);
                }
            } else if let Some(stamp) = stamp(data) {
                seen.latencies.record_micros(received.saturating_sub(stamp));
                seen.first_stamp = seen.first_stamp.min(stamp);
                seen.last_stamp = seen.last_stamp.max(stamp);
            }
        });
        if ends >= 2 {
            return Ok(seen);
        }
    }
    Err("STREAM_ENDED".to_owned())
}
