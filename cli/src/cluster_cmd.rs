//! The `executor` and `gateway` subcommands: the two processes of a cluster, on PostgreSQL.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::{self, SharedClock};
use agent_runtime::ids::nanoid;
use agent_runtime::secret::Secret;
use agent_runtime_gateway::AuthMode;
use agent_runtime_store::postgres::RECALIBRATE_EVERY;
use agent_runtime_store::{DatabaseClock, PostgresOptions, PostgresStore, SchemaPolicy, Store};
use anyhow::{Context, bail};
use tokio::net::TcpListener;

use crate::cluster::{ExecutorProcessConfig, GatewayProcessConfig, start_executor, start_gateway};
use crate::config::{ServeConfig, TelemetryConfig};
use crate::serve::wait_for_signal;
use crate::{ServeArgs, init_logging};

/// What both cluster processes need.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// PostgreSQL URL of the shared store (a secret: never printed).
    #[arg(long, env = "AGENT_RUNTIME_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Shared secret between gateways and executors (16+ characters).
    #[arg(long, env = "AGENT_RUNTIME_CLUSTER_SECRET", hide_env_values = true)]
    pub cluster_secret: String,
    /// Address to listen on.
    #[arg(long)]
    pub listen: String,
    /// `migrate` the schema at start-up, or `require` it to be current.
    #[arg(long, default_value = "migrate")]
    pub schema: String,
    /// Log format: `text` or `json`.
    #[arg(long, env = "AGENT_RUNTIME_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
    /// Serve `GET /metrics` on this address (overrides `[telemetry] metrics_listen`). The
    /// executor serves metrics only there; a gateway then no longer serves them on `--listen`.
    #[arg(long, env = "AGENT_RUNTIME_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
}

impl ClusterArgs {
    /// The `[telemetry]` settings of the config file with `--metrics-listen` applied.
    fn telemetry(&self, file: &ServeConfig) -> anyhow::Result<TelemetryConfig> {
        let mut telemetry = file.telemetry.clone();
        if let Some(listen) = &self.metrics_listen {
            telemetry.metrics_listen = Some(listen_address(listen)?);
        }
        Ok(telemetry)
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct ExecutorArgs {
    #[command(flatten)]
    pub common: ClusterArgs,
    /// Address gateways dial; defaults to the listen address.
    #[arg(long)]
    pub advertise: Option<String>,
    /// Worker id; defaults to a random one.
    #[arg(long)]
    pub worker_id: Option<String>,
    /// Sessions this executor may hold.
    #[arg(long, default_value_t = 100)]
    pub capacity: u32,
    /// Heartbeat and session-lease TTL in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub lease_ttl_ms: u64,
    /// Pause between `demo:slow` deltas in milliseconds (overrides `[executor]
    /// demo_slow_delta_interval_ms`; default 250).
    #[arg(long)]
    pub demo_slow_delta_interval_ms: Option<u64>,
    /// TOML configuration: the `[executor]`, `[provider]`, `[tools]` and `[sandbox]` sections
    /// (the same keys as `serve`).
    #[arg(long, env = "AGENT_RUNTIME_CONFIG")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    #[command(flatten)]
    pub common: ClusterArgs,
    /// TOML configuration: `[gateway]`, `[auth]` (required: a cluster gateway has no development
    /// token) and `[audit]`.
    #[arg(long, env = "AGENT_RUNTIME_CONFIG")]
    pub config: Option<PathBuf>,
    /// How long a command waits for a live executor to own its session (milliseconds).
    #[arg(long, default_value_t = 15_000)]
    pub failover_window_ms: u64,
}

/// Opens the shared store with the database's clock as this process's clock: every lease and TTL
/// of the cluster is then compared on one time base, whatever this host's clock says (LEASE-07).
async fn open_store(common: &ClusterArgs) -> anyhow::Result<(Arc<dyn Store>, SharedClock)> {
    let schema_policy = match common.schema.as_str() {
        "migrate" => SchemaPolicy::Migrate,
        "require" => SchemaPolicy::RequireCurrent,
        other => bail!("--schema {other:?} is not one of: migrate, require"),
    };
    let clock = DatabaseClock::new(clock::monotonic());
    let options = PostgresOptions {
        clock: clock.clone(),
        schema_policy,
        ..PostgresOptions::default()
    };
    let store = PostgresStore::connect(&common.database_url, options)
        .await
        .map_err(|error| anyhow::anyhow!("opening the PostgreSQL store failed: {error}"))?;
    clock
        .calibrate(store.pool())
        .await
        .map_err(|error| anyhow::anyhow!("reading the database clock failed: {error}"))?;
    // Ends by itself when the store closes its pool.
    drop(clock.keep_calibrated(store.pool().clone(), RECALIBRATE_EVERY));
    Ok((Arc::new(store), clock))
}

fn listen_address(value: &str) -> anyhow::Result<SocketAddr> {
    value
        .parse()
        .with_context(|| format!("listen address {value:?} is not HOST:PORT"))
}

pub async fn run_executor(args: ExecutorArgs) -> anyhow::Result<()> {
    init_logging(&args.common.log_format);
    let mut file = ServeConfig::load(&ServeArgs {
        config: args.config.clone(),
        ..ServeArgs::default()
    })?;
    if let Some(interval) = args.demo_slow_delta_interval_ms {
        file.executor.demo_slow_delta_interval = Duration::from_millis(interval);
    }
    // No local record: a cluster executor's data lives in PostgreSQL (docs/security.md §5).
    let runtime = crate::serve::build_runtime(&file, None).await?;
    let (store, clock) = open_store(&args.common).await?;
    let listener = TcpListener::bind(listen_address(&args.common.listen)?).await?;
    let address = listener.local_addr()?;
    let worker_id = args
        .worker_id
        .unwrap_or_else(|| format!("executor-{}", nanoid()));
    let config = ExecutorProcessConfig {
        worker_id: worker_id.clone(),
        advertise: args.advertise.unwrap_or_else(|| address.to_string()),
        capacity: args.capacity,
        lease_ttl: Duration::from_millis(args.lease_ttl_ms.max(100)),
        secret: Secret::new(&args.common.cluster_secret),
        executor: file.executor.clone(),
        drain_grace: file.executor.shutdown_grace,
    };
    let telemetry = args.common.telemetry(&file)?;
    let running =
        start_executor(config, &telemetry, runtime, store.clone(), clock, listener).await?;
    if let Some(metrics) = running.metrics_address {
        println!("agent-runtime executor {worker_id}: metrics on http://{metrics}/metrics");
    }
    println!("agent-runtime executor {worker_id} is serving gRPC on {address}");
    tokio::select! {
        _ = wait_for_signal() => {}
        _ = running.draining() => println!("agent-runtime executor {worker_id}: drained by an operator"),
    }
    println!("agent-runtime executor {worker_id}: draining");
    running.shutdown();
    running.wait().await?;
    store.close().await.context("closing the store")?;
    Ok(())
}

pub async fn run_gateway(args: GatewayArgs) -> anyhow::Result<()> {
    init_logging(&args.common.log_format);
    let file = ServeConfig::load(&ServeArgs {
        config: args.config.clone(),
        ..ServeArgs::default()
    })?;
    if file.auth_mode == AuthMode::Static && file.tokens.is_empty() {
        bail!(
            "a cluster gateway needs authentication in its --config file: [[auth.tokens]], or \
             [auth] mode = \"jwt\" or \"trusted_headers\""
        );
    }
    let (store, clock) = open_store(&args.common).await?;
    let listener = TcpListener::bind(listen_address(&args.common.listen)?).await?;
    let address = listener.local_addr()?;
    let config = GatewayProcessConfig {
        telemetry: args.common.telemetry(&file)?,
        gateway: file.gateway,
        tokens: file.tokens,
        auth_mode: file.auth_mode,
        audit: file.audit,
        secret: Secret::new(&args.common.cluster_secret),
        failover_window: Duration::from_millis(args.failover_window_ms),
        webhooks: file.webhooks,
    };
    let running = start_gateway(config, store.clone(), clock, listener).await?;
    if let Some(metrics) = running.metrics_address {
        println!("agent-runtime gateway: metrics on http://{metrics}/metrics");
    }
    println!("agent-runtime gateway is serving on http://{address}");
    wait_for_signal().await;
    println!("agent-runtime gateway: shutting down");
    running.shutdown();
    running.wait().await?;
    store.close().await.context("closing the store")?;
    Ok(())
}
