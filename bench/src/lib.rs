//! The load tool of the agent session server.
//!
//! * `run SCENARIO` drives a running server through the real HTTP API and SSE with
//!   `agent-runtime-client`, prints a human summary on stderr and the figures as JSON;
//! * `baseline-server` serves the same API from memory with the same HTTP stack (axum, hyper): the
//!   limit the product is compared with, loaded by exactly the same scenario code;
//! * `pgbench` runs PostgreSQL's `pgbench` with one of the two transaction shapes and records its
//!   throughput as a limit;
//! * `config` writes the server configuration of a benchmark (one token per tenant, admission
//!   limits out of the way);
//! * `move` (B8) times the product's `export` and `import` moving a deployment there and back;
//! * `report` turns the JSON results of a run into `docs/benchmarks.md`.

pub mod baseline;
pub mod config_file;
pub mod moves;
pub mod outcome;
pub mod pgbench;
pub mod pgstats;
pub mod procmem;
pub mod receiver;
pub mod report;
pub mod scenarios;
pub mod stats;
pub mod target;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "agent-runtime-bench",
    version,
    about = "Benchmarks of agent-runtime"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs one scenario against a running server (or the baseline server).
    Run(scenarios::RunArgs),
    /// Serves the protocol from memory with the product's HTTP stack: the baseline limit.
    BaselineServer(baseline::BaselineArgs),
    /// Runs pgbench with one of the benchmark's transaction shapes.
    Pgbench(pgbench::PgbenchArgs),
    /// Prints the server configuration (TOML) of a benchmark run.
    Config(config_file::ConfigArgs),
    /// Writes the Markdown report of a run's JSON results.
    Report(report::ReportArgs),
    /// Serves a webhook receiver that counts deliveries (B1 with webhooks).
    WebhookReceiver(receiver::ReceiverArgs),
    /// B8: a deployment moved JSONL -> PostgreSQL -> JSONL with session bundles.
    Move(moves::MoveArgs),
}

/// Runs the chosen subcommand.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => scenarios::run(args).await,
        Command::BaselineServer(args) => baseline::serve(args).await,
        Command::Pgbench(args) => pgbench::run(args).await,
        Command::Config(args) => config_file::print(&args),
        Command::Report(args) => report::write(&args),
        Command::WebhookReceiver(args) => receiver::serve(args).await,
        Command::Move(args) => moves::run(args).await,
    }
}

/// The command line that started this process, quoted for a POSIX shell (recorded with every
/// figure so that it can be re-run).
pub fn command_line() -> String {
    let mut parts = Vec::new();
    for (index, arg) in std::env::args().enumerate() {
        let arg = if index == 0 {
            "agent-runtime-bench".to_owned()
        } else {
            arg
        };
        parts.push(shell_quote(&arg));
    }
    parts.join(" ")
}

fn shell_quote(arg: &str) -> String {
    let plain = arg
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b));
    if plain && !arg.is_empty() {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}
