//! The `agent-runtime` binary: `serve` runs the gateway, an in-process executor and the embedded
//! store in one process; `chat` talks to a running server from the terminal.

pub mod admin;
mod auth_config;
pub mod bundle;
pub mod chat;
pub mod cluster;
pub mod cluster_cmd;
pub mod config;
mod dev_token;
pub mod serve;
mod telemetry;
mod webhooks;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use crate::config::ServeConfig;
pub use crate::serve::{Overrides, RunningServer, start, start_with};

#[derive(Debug, Parser)]
#[command(
    name = "agent-runtime",
    version,
    about = "Multi-tenant agent session server"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run everything in one process on the embedded store (or PostgreSQL).
    Serve(ServeArgs),
    /// Run a cluster executor: sessions over gRPC, on PostgreSQL.
    Executor(cluster_cmd::ExecutorArgs),
    /// Run a cluster gateway: the HTTP API in front of executors, on PostgreSQL.
    Gateway(cluster_cmd::GatewayArgs),
    /// Chat with a session of a running server from the terminal.
    Chat(chat::ChatArgs),
    /// Apply the embedded schema migrations to a PostgreSQL database, then exit.
    Migrate(MigrateArgs),
    /// The operator's tools: reconcile commands, close sessions, drain executors, manage webhooks,
    /// delete a tenant (through a server's admin API, with an operator token).
    Admin(admin::AdminArgs),
    /// Write a store's tenants and sessions to a session bundle (from a stopped server).
    Export(bundle::ExportArgs),
    /// Read a session bundle into a store: checked whole first, each part verified after.
    Import(bundle::ImportArgs),
    /// Make an Ed25519 key pair to sign bundles with (`export --sign-with`) and to require
    /// their signature (`import --require-signature`).
    BundleKey(bundle::KeyArgs),
}

/// Arguments of `migrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// PostgreSQL URL, e.g. postgres://user:password@host/db (never printed).
    #[arg(long, env = "AGENT_RUNTIME_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
}

/// Flags override the environment, which overrides the config file, which overrides defaults.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "AGENT_RUNTIME_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:8787 (port 0 picks a free port).
    #[arg(long, env = "AGENT_RUNTIME_LISTEN")]
    pub listen: Option<String>,
    /// Directory of the embedded store and the development token.
    #[arg(long, env = "AGENT_RUNTIME_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// `jsonl` (durable, default), `memory` (lost on exit) or `postgres` (shared).
    #[arg(long, env = "AGENT_RUNTIME_STORE")]
    pub store: Option<String>,
    /// PostgreSQL URL for `--store postgres` (never printed).
    #[arg(long, env = "AGENT_RUNTIME_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// `--store postgres`: `migrate` the schema at start-up (default) or `require` it current.
    #[arg(long, env = "AGENT_RUNTIME_SCHEMA")]
    pub schema: Option<String>,
    /// fsync every store write (survives power loss, slower).
    #[arg(long)]
    pub fsync: bool,
    /// Log format: `text` or `json`.
    #[arg(long, env = "AGENT_RUNTIME_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            init_logging(&args.log_format);
            let config = ServeConfig::load(&args)?;
            serve::run_until_signal(config).await
        }
        Command::Chat(args) => chat::run(args).await,
        Command::Admin(args) => admin::run(args).await,
        Command::Export(args) => bundle::run_export(args).await,
        Command::Import(args) => bundle::run_import(args).await,
        Command::BundleKey(args) => bundle::run_key(args),
        Command::Executor(args) => cluster_cmd::run_executor(args).await,
        Command::Gateway(args) => cluster_cmd::run_gateway(args).await,
        Command::Migrate(args) => {
            init_logging("text");
            let version = agent_runtime_store::postgres::migrate(&args.database_url)
                .await
                .map_err(|error| anyhow::anyhow!("migrating the database failed: {error}"))?;
            println!("agent-runtime: the database schema is at version {version}");
            Ok(())
        }
    }
}

/// What a panic log line says about the panic: a literal message (`panic!("…")`) as written; a formatted one is withheld, since it may quote request data, a prompt or a
/// connection string. The location in the same line says where it happened.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &'static str {
    match payload.downcast_ref::<&'static str>() {
        Some(message) => message,
        None => "(formatted message withheld)",
    }
}

/// Standard error for log lines, with every URL cut to its scheme, host and path: a library's
/// own log line (rmcp's transport worker, say) may print a URL whose query holds a key.
struct ScrubbedStderr;

impl std::io::Write for ScrubbedStderr {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        // The formatter writes each event whole, so a URL is never split across calls.
        match std::str::from_utf8(line) {
            Ok(text) if text.contains("://") => {
                let scrubbed = agent_runtime_executor::scrub::scrub_urls(text);
                std::io::stderr().write_all(scrubbed.as_bytes())?;
            }
            _ => std::io::stderr().write_all(line)?,
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The log filter: `AGENT_RUNTIME_LOG` (default `info,tower_http=warn`), with the MCP SDK
/// held at `warn` unless the variable names it: at `info` it logs whatever a server sends (its
/// instructions on every connect, every notification) in full.
fn log_filter(configured: Option<&str>) -> tracing_subscriber::EnvFilter {
    let directives = configured.unwrap_or("info,tower_http=warn");
    let filter = tracing_subscriber::EnvFilter::try_new(directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_http=warn"));
    match directives.contains("rmcp") {
        true => filter,
        false => filter.add_directive("rmcp=warn".parse().expect("a valid directive")),
    }
}

pub(crate) fn init_logging(format: &str) {
    let filter = log_filter(std::env::var("AGENT_RUNTIME_LOG").ok().as_deref());
    // Colour codes only for a terminal: a log file or a collector gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(|| ScrubbedStderr);
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(location = %location, message = %panic_message(info.payload()), "panic");
    }));
    if format == "json" {
        // One JSON object per line: timestamp, level, target, the message and fields at the top
        // level, and the enclosing spans (the command span carries `trace_id`).
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .init();
    } else {
        builder.init();
    }
}

#[cfg(test)]
mod panic_log_tests {
    use super::{log_filter, panic_message};

    #[test]
    fn the_mcp_sdk_logs_at_warn_unless_named() {
        for configured in [None, Some("info"), Some("debug,tower_http=warn")] {
            let filter = log_filter(configured).to_string();
            assert!(filter.contains("rmcp=warn"), "{configured:?}: {filter}");
        }
        let named = log_filter(Some("info,rmcp=debug")).to_string();
        assert!(
            named.contains("rmcp=debug") && !named.contains("rmcp=warn"),
            "{named}"
        );
    }

    #[test]
    fn literal_panic_messages_are_kept_and_formatted_ones_withheld() {
        let literal = std::panic::catch_unwind(|| panic!("a literal message")).unwrap_err();
        assert_eq!(panic_message(literal.as_ref()), "a literal message");
        let secret = "postgres://user:secret@db/app";
        let formatted =
            std::panic::catch_unwind(|| panic!("cannot connect to {secret}")).unwrap_err();
        assert_eq!(
            panic_message(formatted.as_ref()),
            "(formatted message withheld)"
        );
        let unwrapped = std::panic::catch_unwind(|| {
            let parsed: Result<u8, String> = format!("bad input {secret}")
                .parse::<u8>()
                .map_err(|_| format!("bad input {secret}"));
            parsed.unwrap()
        })
        .unwrap_err();
        assert!(!panic_message(unwrapped.as_ref()).contains("secret"));
    }
}

#[cfg(test)]
mod parse_tests {
    use clap::Parser;

    use super::{Cli, Command};

    #[test]
    fn a_session_id_that_starts_with_a_dash_is_a_value() {
        // Nanoids use `-` and `_`: one id in 64 starts with a dash.
        let cli = Cli::try_parse_from([
            "agent-runtime",
            "chat",
            "--session",
            "-LPYIPClGxhWJ8IRlnUqZ",
        ])
        .expect("parsed");
        let Command::Chat(args) = cli.command else {
            panic!("the chat command");
        };
        assert_eq!(args.session.as_deref(), Some("-LPYIPClGxhWJ8IRlnUqZ"));
    }
}
