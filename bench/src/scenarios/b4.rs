//! B4, replay: one session is filled with exactly `events` retained events (two requests: a pilot
//! that measures the events a request adds around its deltas, then one sized to land on the
//! count), then a client connects with `after=0` and reads them all, `repeats` times; the
//! figures are median rates.
//!
//! Two readers: the server's delivery rate is measured with the client's HTTP stack and a frame
//! counter (`data:` lines counted, nothing decoded: at these rates the reader's own parsing, not
//! the server, would be measured), and the rate of the full `agent-runtime-client` event stream
//! (every frame split, parsed and validated strictly) is reported beside it.

use std::sync::Arc;
use std::time::Instant;

use agent_runtime_client::{EventsOptions, RemoteSession, http_client_builder};
use anyhow::Result;
use futures_util::StreamExt;

use super::frames::FrameCounter;
use super::{RunArgs, per_second, submit, until_request_end};
use crate::outcome::Outcome;
use crate::stats::median;
use crate::target::{Target, error_code, last_sequence};

pub async fn run(args: &RunArgs, target: &Arc<Target>, outcome: &mut Outcome) -> Result<()> {
    let wanted = args.events.max(10);
    let repeats = args.repeats.max(1);
    outcome.param("events", wanted);
    outcome.param("repeats", repeats);

    let session = target
        .create_sessions(1, 1, "b4")
        .await?
        .pop()
        .expect("one session");
    let filled = fill(&session, wanted).await?;
    anyhow::ensure!(
        filled == wanted,
        "the session holds {filled} events, not {wanted}"
    );

    // Built once: building a client loads the system's root certificates, which is no part of a
    // replay. Each replay still opens its own connection.
    let http = http_client_builder().build()?;
    let mut raw_rates = Vec::new();
    for _ in 0..repeats {
        let started = Instant::now();
        let received = replay_frames(&http, &session, &target.token(0), wanted).await?;
        anyhow::ensure!(received == wanted, "replayed {received} of {wanted} frames");
        raw_rates.push(per_second(received, started.elapsed()));
    }
    let mut rates = Vec::new();
    for _ in 0..repeats {
        let started = Instant::now();
        let mut events = session.events(EventsOptions::default());
        let mut received = 0u64;
        while let Some(event) = events.next().await {
            let event = event.map_err(|error| anyhow::anyhow!(error_code(&error)))?;
            received += 1;
            if event.sequence() >= wanted {
                break;
            }
        }
        anyhow::ensure!(received == wanted, "replayed {received} of {wanted} events");
        rates.push(per_second(received, started.elapsed()));
    }
    outcome.figure("eventsPerSecond", median(&raw_rates));
    outcome.figure(
        "bestEventsPerSecond",
        raw_rates.iter().copied().fold(0.0, f64::max),
    );
    outcome.figure("validatedEventsPerSecond", median(&rates));
    outcome.count("eventsPerReplay", wanted);
    outcome.count("replays", rates.len() as u64);
    Ok(())
}

/// Reads the session's stream from `after=0` until `wanted` frames with data arrived.
async fn replay_frames(
    http: &reqwest::Client,
    session: &RemoteSession,
    token: &str,
    wanted: u64,
) -> Result<u64> {
    let url = format!(
        "{}/sessions/{}/events?after=0",
        session.client().base_url(),
        session.session_id()
    );
    let response = http
        .get(&url)
        .bearer_auth(token)
        .send()
        .await?
        .error_for_status()?;
    let mut body = response.bytes_stream();
    let mut counter = FrameCounter::new();
    while counter.frames < wanted {
        let Some(chunk) = body.next().await else {
            break;
        };
        counter.push(&chunk?);
    }
    Ok(counter.frames)
}

/// Fills the session up to exactly `wanted` events, returns its last sequence.
async fn fill(session: &RemoteSession, wanted: u64) -> Result<u64> {
    let before = last_sequence(session).await?;
    let mut events = session.events(EventsOptions::after(before));
    let pilot = submit(session, "demo:deltas=1")
        .await
        .map_err(|e| anyhow::anyhow!(error_code(&e)))?;
    until_request_end(&mut events, &pilot, |_| {}).await?;
    let after_pilot = last_sequence(session).await?;
    // A request adds its deltas plus a fixed number of events around them.
    let overhead = after_pilot.saturating_sub(before).saturating_sub(1);
    let missing = wanted.saturating_sub(after_pilot);
    anyhow::ensure!(missing > overhead, "{wanted} events are too few to measure");
    let request = submit(session, &format!("demo:deltas={}", missing - overhead))
        .await
        .map_err(|e| anyhow::anyhow!(error_code(&e)))?;
    until_request_end(&mut events, &request, |_| {}).await?;
    last_sequence(session).await
}
