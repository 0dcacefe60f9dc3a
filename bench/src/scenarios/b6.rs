//! B6, fan-out: `subscribers` event streams on one session, which then streams stamped deltas at
//! `rate` per second for `duration` (`demo:deltas=N demo:interval=MS demo:stamp`). A warm-up
//! request first proves every subscriber connected and delivering. Figures: whether every event
//! reached every subscriber, and the delivery latency (arrival minus the delta's wall-clock
//! stamp) over all subscribers.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime_client::EventsOptions;
use futures_util::StreamExt;
use tokio::sync::Semaphore;

use super::{RunArgs, content_delta, per_second, submit};
use crate::outcome::Outcome;
use crate::stats::Latencies;
use crate::target::{Target, delta_stamp, error_code, last_sequence, unix_micros};

/// Longest wait for every subscriber to see the warm-up request.
const WARM_UP_TIMEOUT: Duration = Duration::from_secs(120);

pub async fn run(
    args: &RunArgs,
    target: &Arc<Target>,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let subscribers = args.subscribers.max(1);
    let rate = args.rate.unwrap_or(200).clamp(1, 1000);
    let interval_ms = (1000 / rate).max(1);
    let deltas = ((args.duration * 1000.0) as u64 / interval_ms).max(1);
    outcome.param("subscribers", subscribers);
    outcome.param("eventsPerSecond", 1000 / interval_ms);
    outcome.param("deltas", deltas);

    let session = target
        .create_sessions(1, 1, "b6")
        .await?
        .pop()
        .expect("one session");
    let after = last_sequence(&session).await?;
    let ready = Arc::new(Semaphore::new(0));
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        let mut events = session.events(EventsOptions::after(after));
        let ready = Arc::clone(&ready);
        tasks.push(tokio::spawn(async move {
            let mut ends = 0;
            let mut latencies = Latencies::new();
            while let Some(event) = events.next().await {
                let event = event.map_err(|error| error_code(&error))?;
                let received = unix_micros();
                if let Some(stamp) = content_delta(&event).and_then(delta_stamp) {
                    latencies.record_micros(received.saturating_sub(stamp));
                }
                if event.is_request_end() {
                    ends += 1;
                    if ends == 1 {
                        ready.add_permits(1);
                    } else {
                        return Ok(latencies);
                    }
                }
            }
            Err("STREAM_ENDED".to_owned())
        }));
    }
    let warm_up = submit(&session, "demo:deltas=1")
        .await
        .map_err(|e| anyhow::anyhow!(error_code(&e)))?;
    let all_ready =
        tokio::time::timeout(WARM_UP_TIMEOUT, ready.acquire_many(subscribers as u32)).await;
    anyhow::ensure!(
        all_ready.is_ok(),
        "not every subscriber saw the warm-up request {warm_up}"
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
    for task in tasks {
        match task.await? {
            Ok(samples) => {
                complete += u64::from(samples.len() as u64 == deltas);
                latencies.merge(samples);
            }
            Err(code) => outcome.error(&code),
        }
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
