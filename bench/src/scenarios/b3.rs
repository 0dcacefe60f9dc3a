//! B3, live latency: `clients` sessions each stream stamped deltas at `rate` per second for
//! `duration` (`demo:deltas=N demo:interval=MS demo:stamp`). The latency of an event is its
//! arrival at the SSE client minus the wall-clock stamp the demo provider put in the delta when it
//! produced it, so it covers the append (commit) as well as the delivery; both clocks are this
//! machine's. A warm-up request on each session first makes sure its stream is connected.

use std::sync::Arc;

use agent_runtime_client::EventsOptions;
use anyhow::Result;

use super::{RunArgs, content_delta, submit, until_request_end};
use crate::outcome::Outcome;
use crate::stats::Latencies;
use crate::target::{Target, delta_stamp, error_code, last_sequence, unix_micros};

pub async fn run(args: &RunArgs, target: &Arc<Target>, outcome: &mut Outcome) -> Result<()> {
    let clients = args.clients.max(1);
    let (interval_ms, deltas) = args.pace(50);
    outcome.param("sessions", clients);
    outcome.param("eventsPerSecondPerSession", 1000 / interval_ms);
    outcome.param("deltasPerSession", deltas);

    let sessions = target.create_sessions(clients, clients, "b3").await?;
    let input = format!("demo:deltas={deltas} demo:interval={interval_ms} demo:stamp");
    let mut tasks = Vec::new();
    for session in sessions {
        let input = input.clone();
        tasks.push(tokio::spawn(async move {
            let after = last_sequence(&session).await?;
            let mut events = session.events(EventsOptions::after(after));
            // A warm-up request first: the stream connects lazily, and the measured deltas must
            // find it live, not be replayed to it once it has connected.
            let warm_up = submit(&session, "demo:deltas=1")
                .await
                .map_err(|error| anyhow::anyhow!(error_code(&error)))?;
            until_request_end(&mut events, &warm_up, |_| {}).await?;
            let mut latencies = Latencies::new();
            let request_id = submit(&session, &input)
                .await
                .map_err(|error| anyhow::anyhow!(error_code(&error)))?;
            until_request_end(&mut events, &request_id, |event| {
                let received = unix_micros();
                if let Some(stamp) = content_delta(event).and_then(delta_stamp) {
                    latencies.record_micros(received.saturating_sub(stamp));
                }
            })
            .await?;
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Latencies::new();
    for task in tasks {
        match task.await? {
            Ok(samples) => latencies.merge(samples),
            Err(error) => outcome.error(&error.to_string()),
        }
    }
    let expected = deltas * clients as u64;
    outcome.count("expected", expected);
    outcome.count("received", latencies.len() as u64);
    outcome.latency("latency", &latencies.summary());
    Ok(())
}
