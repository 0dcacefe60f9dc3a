//! The scenarios B1 … B7 (docs/benchmarks.md). Each one creates its own sessions on the server
//! under test, drives it with `agent-runtime-client` for a fixed time, and returns an [`Outcome`].
//!
//! The same code loads the product and the baseline server (`baseline-server`), so that a ratio
//! between the two compares servers, not load generators.

mod b1;
mod b2;
mod b3;
mod b4;
mod b5;
mod b6;
mod b7;
mod frames;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent_runtime::protocol::StreamMessage;
use agent_runtime_client::{ClientError, EventStream, RemoteSession, SessionEvent, SubmitOptions};
use anyhow::Context;
use futures_util::StreamExt;

use crate::config_file::DEFAULT_TOKEN_PREFIX;
use crate::outcome::Outcome;
use crate::procmem::NamedPid;
use crate::target::Target;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Command throughput and latency (`input.submit` and the request it starts).
    B1,
    /// Event throughput: requests streaming many small deltas.
    B2,
    /// Live latency: from an event's production to its arrival at an SSE client.
    B3,
    /// Replay of a session's retained events from `after=0`.
    B4,
    /// Idle SSE connections: memory per connection, heartbeats on time.
    B5,
    /// Fan-out: many subscribers of one streaming session.
    B6,
    /// Footprint: idle resident memory, memory per loaded idle session.
    B7,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    pub scenario: Scenario,
    /// API base URL, e.g. `http://127.0.0.1:8787/v1/agent`. Repeat it to spread the sessions over
    /// several gateways (b5 holds every connection on the first).
    #[arg(long = "base", required = true)]
    pub bases: Vec<String>,
    /// Tenant `i` authenticates with `{prefix}{i}` (see `config`).
    #[arg(long, default_value = DEFAULT_TOKEN_PREFIX)]
    pub token_prefix: String,
    /// Tenants the sessions are spread over.
    #[arg(long, default_value_t = 4)]
    pub tenants: usize,
    /// Name of the deployment under test, recorded in the result.
    #[arg(long, default_value = "unnamed")]
    pub deployment: String,
    /// Measurement time of each phase (seconds).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Concurrent clients: b1 command senders, b2/b3 streaming sessions, b5/b6/b7 connections or
    /// creations in flight.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Sessions (b1: default 8 per client; b5: default 100; b7: default 1000 per batch).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// b2: content deltas per request.
    #[arg(long, default_value_t = 2000)]
    pub deltas: u64,
    /// Events per second: b3 per session (default 50), b6 of the one session (default 200).
    #[arg(long)]
    pub rate: Option<u64>,
    /// b4: retained events to replay.
    #[arg(long, default_value_t = 10_000)]
    pub events: u64,
    /// b4: replays; the median is the figure.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// b7: batches of `sessions` created one after another, the memory read after each.
    #[arg(long, default_value_t = 5)]
    pub batches: usize,
    /// b5: SSE connections to hold.
    #[arg(long, default_value_t = 10_000)]
    pub connections: usize,
    /// b5: the server's heartbeat interval (milliseconds), as configured.
    #[arg(long, default_value_t = 2000)]
    pub heartbeat_ms: u64,
    /// b6: subscribers of the one session.
    #[arg(long, default_value_t = 1000)]
    pub subscribers: usize,
    /// `NAME=PID` of a server process whose resident memory is reported (b5: the gateway under
    /// load; b7: every process), or whose CPU time per command is (b1: the first). Repeatable.
    #[arg(long = "pid")]
    pub pids: Vec<NamedPid>,
    /// b1, b2: the server's PostgreSQL database; its counters give the transactions, rows and
    /// WAL flushes per command (b1) or per event (b2). Adds ~11 s (see `pgstats::SETTLE`).
    #[arg(long, env = "AGENT_RUNTIME_BENCH_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// b1: the webhook receiver the server delivers to (`agent-runtime-bench webhook-receiver`);
    /// the run waits for every request's `request.completed` to arrive and reports how long the
    /// last took after the load ended.
    #[arg(long)]
    pub webhook_receiver: Option<String>,
    /// B1: the rate of the paced phase, commands per second (default: half the rate the first
    /// phase reached). Two deployments paced at the same rate compare their latency under the
    /// same load.
    #[arg(long)]
    pub paced_rate: Option<f64>,
    /// Also write the JSON result to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl RunArgs {
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration.max(0.1))
    }

    /// A paced stream for the phase: the interval between deltas in ms (from `rate` per second,
    /// `default_rate` when unset, 1..=1000) and how many deltas fill `duration`.
    pub fn pace(&self, default_rate: u64) -> (u64, u64) {
        let rate = self.rate.unwrap_or(default_rate).clamp(1, 1000);
        let interval_ms = (1000 / rate).max(1);
        let deltas = ((self.duration * 1000.0) as u64 / interval_ms).max(1);
        (interval_ms, deltas)
    }
}

/// Runs the scenario, prints its summary and JSON.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let target = Target::new(&args.bases, &args.token_prefix, args.tenants)?;
    target.initialize().await?;
    let name = format!("{:?}", args.scenario).to_lowercase();
    let mut outcome = Outcome::new(crate::outcome::Kind::Scenario, &name, &args.deployment);
    outcome.param("tenants", args.tenants);
    outcome.param("gateways", args.bases.len());
    let started = Instant::now();
    match args.scenario {
        Scenario::B1 => b1::run(&args, &target, &mut outcome).await?,
        Scenario::B2 => b2::run(&args, &target, &mut outcome).await?,
        Scenario::B3 => b3::run(&args, &target, &mut outcome).await?,
        Scenario::B4 => b4::run(&args, &target, &mut outcome).await?,
        Scenario::B5 => b5::run(&args, &target, &mut outcome).await?,
        Scenario::B6 => b6::run(&args, &target, &mut outcome).await?,
        Scenario::B7 => b7::run(&args, &target, &mut outcome).await?,
    }
    outcome.elapsed_s = started.elapsed().as_secs_f64();
    outcome.emit(args.out.as_deref())
}

/// An accepted input: the request it started, or `None` when it was queued behind a request
/// still finishing (it then starts its own request, announced by `input.applied`).
pub struct Submitted {
    pub input_id: String,
    pub request_id: Option<String>,
}

/// Submits `text`.
pub async fn submit(session: &RemoteSession, text: &str) -> Result<Submitted, ClientError> {
    let result = session
        .send(text, SubmitOptions::default(), Default::default())
        .await?;
    Ok(Submitted {
        request_id: result.request_id().map(str::to_owned),
        input_id: result.input_id,
    })
}

/// Reads `events` until the `result` of the request that runs `submitted`, handing every event
/// to `on_event`.
pub async fn until_request_end(
    events: &mut EventStream,
    submitted: &Submitted,
    mut on_event: impl FnMut(&SessionEvent),
) -> anyhow::Result<()> {
    let mut request_id = submitted.request_id.clone();
    while let Some(event) = events.next().await {
        let event = event.context("event stream")?;
        on_event(&event);
        if request_id.is_none()
            && let Some(StreamMessage::InputApplied {
                input_id,
                request_id: applied,
                ..
            }) = event.stream_message()
            && *input_id == submitted.input_id
        {
            request_id = Some(applied.clone());
        }
        if event.is_request_end() && request_id.is_some() && event.envelope.request_id == request_id
        {
            return Ok(());
        }
    }
    anyhow::bail!("the event stream ended before the request did")
}

/// The delta of a `content` event.
pub fn content_delta(event: &SessionEvent) -> Option<&str> {
    match event.stream_message()? {
        StreamMessage::Content { delta, .. } => Some(delta),
        _ => None,
    }
}

/// Milliseconds for people.
pub fn per_second(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}
