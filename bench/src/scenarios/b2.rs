//! B2, event throughput: `clients` sessions each run requests of `deltas` content deltas (the
//! demo provider's benchmark mode: no pause between deltas) back to back for `duration`, with one
//! SSE reader each. Appended events are the growth of each session's last sequence as the server
//! reports it (`session.read`); delivered events are those the readers received. Both are divided
//! by the time from the first submission to the end of the last request.

use std::sync::Arc;
use std::time::Instant;

use agent_runtime_client::EventsOptions;
use anyhow::Result;

use super::{RunArgs, per_second, submit, until_request_end};
use crate::outcome::Outcome;
use crate::target::{Target, error_code, last_sequence};

pub async fn run(args: &RunArgs, target: &Arc<Target>, outcome: &mut Outcome) -> Result<()> {
    let clients = args.clients.max(1);
    let deltas = args.deltas.max(1);
    outcome.param("clients", clients);
    outcome.param("deltasPerRequest", deltas);
    outcome.param("durationS", args.duration);

    let sessions = target.create_sessions(clients, clients, "b2").await?;
    let mut before = Vec::new();
    for session in &sessions {
        before.push(last_sequence(session).await?);
    }
    let counters = match &args.database_url {
        Some(url) => Some(crate::pgstats::read(url).await?),
        None => None,
    };
    let input = format!("demo:deltas={deltas}");
    let started = Instant::now();
    let deadline = started + args.duration();
    let mut tasks = Vec::new();
    for (session, after) in sessions.iter().cloned().zip(before.iter().copied()) {
        let input = input.clone();
        tasks.push(tokio::spawn(async move {
            let mut events = session.events(EventsOptions::after(after));
            let mut delivered = 0u64;
            let mut requests = 0u64;
            while Instant::now() < deadline {
                let request_id = submit(&session, &input)
                    .await
                    .map_err(|error| anyhow::anyhow!(error_code(&error)))?;
                until_request_end(&mut events, &request_id, |_| delivered += 1).await?;
                requests += 1;
            }
            anyhow::Ok((delivered, requests))
        }));
    }
    let mut delivered = 0;
    let mut requests = 0;
    for task in tasks {
        match task.await? {
            Ok((d, r)) => {
                delivered += d;
                requests += r;
            }
            Err(error) => outcome.error(&error.to_string()),
        }
    }
    let elapsed = started.elapsed();
    let mut appended = 0;
    for (session, after) in sessions.iter().zip(before) {
        appended += last_sequence(session).await?.saturating_sub(after);
    }
    if let (Some(url), Some(before)) = (&args.database_url, counters) {
        tokio::time::sleep(crate::pgstats::SETTLE).await;
        let after = crate::pgstats::read(url).await?;
        for (name, value) in after.per(&before, appended) {
            outcome.figure(&format!("{name}PerEvent"), value);
        }
    }
    outcome.figure("eventsAppendedPerSecond", per_second(appended, elapsed));
    outcome.figure("eventsDeliveredPerSecond", per_second(delivered, elapsed));
    outcome.figure("requestsPerSecond", per_second(requests, elapsed));
    outcome.count("eventsAppended", appended);
    outcome.count("eventsDelivered", delivered);
    outcome.count("requests", requests);
    Ok(())
}
