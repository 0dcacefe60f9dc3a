//! `serve`: the gateway, an in-process executor and the embedded store in one process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::{self, SharedClock};
use agent_runtime::telemetry::SharedTelemetry;
use agent_runtime_executor::profiles::{AgentProfile, DEFAULT_PROFILE};
use agent_runtime_executor::provider::{ProviderConfig, ProviderKind, build_provider};
use agent_runtime_executor::tools::mcp::McpServer;
use agent_runtime_executor::tools::{DemoApprovalTool, Tool};
use agent_runtime_executor::{
    ExecutorDeps, InProcessExecutor, NoLeases, StoreSink, StoredEffects, TracedExecutor,
};
use agent_runtime_gateway::auth::JwtKeySource;
use agent_runtime_gateway::reconcile::{Reconciled, reconcile_sealed_commands};
use agent_runtime_gateway::{
    AuditConfig, AuditLog, AuthMode, Gateway, GatewayDeps, ReadinessDetails, TokenGrant,
    build_authenticator,
};
use agent_runtime_store::follow::{HandOff, LocalSignals};
use agent_runtime_store::{
    JsonlStore, MemoryStore, PostgresOptions, PostgresStore, Store, StoreOptions, TimedStore,
};
use agent_runtime_telemetry::{Process, TelemetryStack};
use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{ServeConfig, StoreKind};
use crate::dev_token;
use crate::telemetry::start_telemetry;
use crate::webhooks::RunningWebhooks;

/// A started server.
pub struct RunningServer {
    pub address: SocketAddr,
    /// The generated development token, when no token was configured.
    pub dev_token: Option<String>,
    /// Where `GET /metrics` is served when `[telemetry] metrics_listen` moved it off `address`.
    pub metrics_address: Option<SocketAddr>,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl RunningServer {
    /// Serves `gateway` on `listener` in a task until [`shutdown`](Self::shutdown); `close`
    /// then releases what the process holds. Serving's failure is reported before closing's.
    pub(crate) fn spawn(
        gateway: Gateway,
        listener: TcpListener,
        dev_token: Option<String>,
        metrics_address: Option<SocketAddr>,
        close: impl Future<Output = anyhow::Result<()>> + Send + 'static,
    ) -> anyhow::Result<Self> {
        let address = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let serving = shutdown.clone();
        let task = tokio::spawn(async move {
            let served = gateway.serve(listener, serving).await;
            let closed = close.await;
            served.context("serving HTTP")?;
            closed
        });
        Ok(Self {
            address,
            dev_token,
            metrics_address,
            shutdown,
            task,
        })
    }

    /// Asks the server to stop: stop accepting, end SSE streams, drain commands, close the store.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Waits until the server has stopped and the store is closed.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("the server task panicked")?
    }
}

/// Parts a caller may supply instead of the ones `config` describes (tests inject stores with
/// faults, or share one store between two servers).
#[derive(Default)]
pub struct Overrides {
    pub store: Option<Arc<dyn Store>>,
    /// Another telemetry adapter, next to the configured metrics and trace export.
    pub telemetry: Option<SharedTelemetry>,
}

/// Opens the store and starts serving on `listener`.
pub async fn start(config: ServeConfig, listener: TcpListener) -> anyhow::Result<RunningServer> {
    start_with(config, listener, Overrides::default()).await
}

/// [`start`] with some parts supplied by the caller.
/// Stays whole: `serve`'s assembly in dependency order (store, telemetry, executor, gateway).
pub async fn start_with(
    config: ServeConfig,
    listener: TcpListener,
    overrides: Overrides,
) -> anyhow::Result<RunningServer> {
    let clock: SharedClock = clock::system();
    let store = match overrides.store {
        Some(store) => store,
        None => open_store(&config, &clock).await?,
    };
    let (tokens, dev_token) = static_tokens(&config)?;
    let mut config = config;
    if dev_token.is_some() && config.gateway.operator_token_sha256.is_empty() {
        let dir = (config.store != StoreKind::Memory).then_some(config.data_dir.as_path());
        let operator = dev_token::load_or_create_operator(dir)?;
        let hash = agent_runtime_gateway::token_sha256(&operator);
        config.gateway.operator_token_sha256.push(hash);
    }
    let auth = build_authenticator(&config.auth_mode, tokens, clock.clone())?;

    // Bash commands a killed run left behind are swept at the next start (docs/security.md §5).
    // Only where the data directory is this process's alone (the JSONL store's lock): another
    // `serve` sharing it would sweep this one's live commands.
    let record = (config.store == StoreKind::Jsonl).then(|| config.data_dir.join("process-groups"));
    let runtime = build_runtime(&config, record.as_deref()).await?;
    let mcp_servers = runtime.mcp_servers();

    let audit = start_audit(config.audit.as_ref())?;
    let mut adapters: Vec<SharedTelemetry> = overrides.telemetry.into_iter().collect();
    adapters.extend(audit_adapter(audit.as_ref()));
    let stack = TelemetryStack::start(&config.telemetry, Process::Serve, adapters)
        .map_err(anyhow::Error::msg)?;
    let telemetry = stack.telemetry.clone();
    let store: Arc<dyn Store> = Arc::new(TimedStore::new(store, telemetry.clone()));
    // The executor's appends go straight to the gateway's SSE tails as well (ATK-09), and wake
    // them knowing the head: this process is the store's only writer (no leases), so a tail
    // that was handed every event up to it reads nothing back.
    let hand_off = HandOff::new();
    let signals = LocalSignals::new();
    let executor = Arc::new(InProcessExecutor::new(
        config.executor.clone(),
        ExecutorDeps {
            store: Arc::clone(&store),
            sink: Arc::new(
                StoreSink::new(Arc::clone(&store), telemetry.clone())
                    .with_hand_off(Arc::clone(&hand_off))
                    .with_signals(Arc::clone(&signals)),
            ),
            provider: runtime.provider,
            tools: runtime.tools,
            profiles: runtime.profiles,
            clock: clock.clone(),
            leases: Arc::new(NoLeases),
            telemetry: telemetry.clone(),
        },
    ));
    let process_telemetry = start_telemetry(stack, &config.telemetry).await?;
    process_telemetry.sample_loaded_sessions(&executor);
    process_telemetry.sample_mcp_servers(mcp_servers.clone());
    let effects = Arc::new(StoredEffects::new(store.clone()));
    recover_previous_run(&store, &effects, &executor).await;
    let webhooks = RunningWebhooks::start(
        config.webhooks.as_ref(),
        Arc::clone(&store),
        clock.clone(),
        telemetry.clone(),
    )
    .await?;
    let gateway = Gateway::new(
        config.gateway.clone(),
        GatewayDeps {
            store: Arc::clone(&store),
            executor: Arc::new(TracedExecutor::new(executor.clone(), telemetry.clone())),
            auth,
            clock,
            telemetry,
            live: Some(signals),
            metrics: process_telemetry.endpoint(),
            readiness: mcp_readiness(mcp_servers),
            hand_off: Some(hand_off),
            // Also reconciled above, before serving; the sweep decides the commands a failed
            // write leaves uncertain while the process runs.
            effects: Some(effects),
            cluster: None,
            tenant_tools: Some(offered_tools(&executor)),
        },
    );

    let metrics_address = process_telemetry.metrics_address();
    let close = async move {
        // Running requests end with terminal events before the store closes.
        agent_runtime::executor_port::SessionExecutor::shutdown(executor.as_ref()).await;
        RunningWebhooks::stop(webhooks).await;
        let closed = store.close().await;
        process_telemetry.shutdown().await;
        close_audit(audit).await;
        closed.context("closing the store")
    };
    RunningServer::spawn(gateway, listener, dev_token, metrics_address, close)
}

/// The store `config` names (the JSONL directory, memory, or PostgreSQL).
async fn open_store(config: &ServeConfig, clock: &SharedClock) -> anyhow::Result<Arc<dyn Store>> {
    let options = StoreOptions {
        clock: clock.clone(),
        max_events_per_session: config.max_events_per_session,
        fsync: config.fsync,
        ..StoreOptions::default()
    };
    Ok(match config.store {
        StoreKind::Jsonl => Arc::new(
            JsonlStore::open(&config.data_dir, options)
                .await
                .with_context(|| format!("opening the store in {}", config.data_dir.display()))?,
        ),
        StoreKind::Memory => Arc::new(MemoryStore::new(options)),
        StoreKind::Postgres => Arc::new(open_postgres(config, clock.clone()).await?),
    })
}

/// The configured static grants; with none (static mode), the development token, kept beside
/// a durable store so that it survives a restart.
fn static_tokens(config: &ServeConfig) -> anyhow::Result<(Vec<TokenGrant>, Option<String>)> {
    let mut tokens = config.tokens.clone();
    if config.auth_mode != AuthMode::Static || !tokens.is_empty() {
        return Ok((tokens, None));
    }
    let dir = (config.store != StoreKind::Memory).then_some(config.data_dir.as_path());
    let token = dev_token::load_or_create(dir)?;
    tokens.push(dev_token::grant(&token));
    Ok((tokens, Some(token)))
}

/// This process owns its store: the commands a crash left unfinished are decided before
/// anything is served (each answers its stored effect's result or runs when retried), and the
/// sessions it left open are recovered now, not on the next command (a follower would otherwise
/// see only heartbeats).
async fn recover_previous_run(
    store: &Arc<dyn Store>,
    effects: &Arc<StoredEffects>,
    executor: &Arc<InProcessExecutor>,
) {
    let reconciled = reconcile_sealed_commands(store.as_ref(), effects.as_ref()).await;
    if reconciled != Reconciled::default() {
        tracing::info!(
            released = reconciled.released,
            completed = reconciled.completed,
            reopened = reconciled.reopened,
            left = reconciled.left,
            "reconciled the commands a previous run left in flight"
        );
    }
    let recovering = Arc::clone(executor);
    tokio::spawn(async move {
        let loaded = recovering.recover_left_open().await;
        if loaded > 0 {
            tracing::info!(loaded, "recovered the sessions a previous run left open");
        }
    });
}

/// Starts the audit log when one is configured; a file that cannot be opened stops start-up.
pub(crate) fn start_audit(config: Option<&AuditConfig>) -> anyhow::Result<Option<Arc<AuditLog>>> {
    let Some(config) = config else {
        return Ok(None);
    };
    let log = AuditLog::start(config).context("opening the audit log")?;
    tracing::info!(audit_target = ?config.target, max_bytes = config.max_bytes, max_files = config.max_files, "audit log enabled");
    Ok(Some(log))
}

/// The audit log as one more adapter behind the telemetry port.
pub(crate) fn audit_adapter(audit: Option<&Arc<AuditLog>>) -> Option<SharedTelemetry> {
    audit.map(|log| Arc::clone(log) as SharedTelemetry)
}

/// Writes out what the audit log still holds (after the last command has completed).
pub(crate) async fn close_audit(audit: Option<Arc<AuditLog>>) {
    if let Some(audit) = audit
        && tokio::task::spawn_blocking(move || audit.close())
            .await
            .is_err()
    {
        tracing::warn!("closing the audit log failed");
    }
}

/// One line saying how requests authenticate (for the start-up banner; no secret in it).
pub(crate) fn auth_summary(mode: &AuthMode) -> String {
    match mode {
        AuthMode::Static => "bearer tokens from the configuration file".to_owned(),
        AuthMode::Jwt(jwt) => {
            let keys = match &jwt.keys {
                JwtKeySource::Secret(_) => "a shared secret".to_owned(),
                JwtKeySource::PemFile(path) => format!("the key in {}", path.display()),
                JwtKeySource::JwksFile(path) => format!("the JWKS in {}", path.display()),
            };
            format!("JWT {} verified with {keys}", jwt.algorithm.as_str())
        }
        AuthMode::TrustedHeaders(_) => {
            "TRUSTED HEADERS from a reverse proxy (identity not verified by this process)"
                .to_owned()
        }
    }
}

/// What an executor runs sessions with: the default profile's provider and tools, and the
/// operator's other profiles.
pub struct AgentRuntime {
    pub provider: Arc<dyn agent_runtime_executor::provider::ModelProvider>,
    pub tools: agent_runtime_executor::tools::ToolRegistry,
    pub profiles: Vec<AgentProfile>,
}

impl AgentRuntime {
    /// Every MCP server connection, with the profile whose tool set holds it.
    pub fn mcp_servers(&self) -> Vec<(String, Arc<McpServer>)> {
        let default = std::iter::once((DEFAULT_PROFILE, &self.tools));
        let named = self.profiles.iter().map(|p| (p.name.as_str(), &p.tools));
        default
            .chain(named)
            .flat_map(|(profile, tools)| {
                tools
                    .mcp_servers()
                    .iter()
                    .map(move |server| (profile.to_owned(), Arc::clone(server)))
            })
            .collect()
    }
}

/// What `readyz` says of the MCP servers: to a `session:admin` caller each one's profile, name,
/// state, tool count and last error (`mcp_servers`); to anyone, how many are in each state
/// (`mcp_server_states`), since names and errors can say who the customers are.
fn mcp_readiness(servers: Vec<(String, Arc<McpServer>)>) -> Option<ReadinessDetails> {
    if servers.is_empty() {
        return None;
    }
    Some(Arc::new(move |detailed| {
        let healths = servers
            .iter()
            .map(|(profile, server)| (profile, server.health()));
        if !detailed {
            let mut states = serde_json::Map::new();
            for (_, health) in healths {
                let count = states.entry(health.state.as_str()).or_insert(0.into());
                *count = (count.as_u64().unwrap_or(0) + 1).into();
            }
            return serde_json::Map::from_iter([(
                "mcp_server_states".to_owned(),
                serde_json::Value::Object(states),
            )]);
        }
        let list = healths
            .map(|(profile, health)| {
                serde_json::json!({
                    "profile": profile, "server": health.server, "state": health.state.as_str(),
                    "tools": health.tools, "error": health.error, "code": health.code,
                })
            })
            .collect();
        serde_json::Map::from_iter([("mcp_servers".to_owned(), serde_json::Value::Array(list))])
    }))
}

/// One profile's provider and tools. The demo tool exists only for the demo model, which is
/// the only one that asks for it.
async fn build_profile(
    provider: &ProviderConfig,
    tools: &agent_runtime_executor::tools::ToolsConfig,
    demo_slow_delta_interval: Duration,
    process_record: Option<&std::path::Path>,
) -> anyhow::Result<(
    Arc<dyn agent_runtime_executor::provider::ModelProvider>,
    agent_runtime_executor::tools::ToolRegistry,
)> {
    let provider_config = ProviderConfig {
        demo_slow_delta_interval,
        ..provider.clone()
    };
    let model = build_provider(&provider_config)?;
    let extra: Vec<Arc<dyn Tool>> = match provider.kind {
        ProviderKind::Demo => vec![Arc::new(DemoApprovalTool)],
        ProviderKind::OpenAi | ProviderKind::Anthropic => Vec::new(),
    };
    let tools = agent_runtime_executor::tools::ToolsConfig {
        process_record: process_record.map(std::path::Path::to_path_buf),
        ..tools.clone()
    };
    Ok((model, tools.build(extra).await?))
}

/// The model providers and tools the configuration describes. They are built before anything
/// listens: a missing key or a sandbox that cannot run stops start-up with a clear error.
/// `process_record`: where Bash's process groups are recorded and swept at start.
pub(crate) async fn build_runtime(
    config: &ServeConfig,
    process_record: Option<&std::path::Path>,
) -> anyhow::Result<AgentRuntime> {
    let interval = config.executor.demo_slow_delta_interval;
    let record = process_record;
    let (provider, tools) =
        build_profile(&config.provider, &config.tools, interval, record).await?;
    let identity = provider.identity();
    tracing::info!(provider = %identity.provider, model = %identity.model, tools = ?tools.names(), mode = config.executor.permissions.mode.as_str(), "executor configured");
    let mut profiles = Vec::new();
    for profile in &config.profiles {
        let (provider, tools) = build_profile(&profile.provider, &profile.tools, interval, record)
            .await
            .with_context(|| format!("profile {}", profile.name))?;
        let identity = provider.identity();
        tracing::info!(profile = %profile.name, tenants = ?profile.tenants, provider = %identity.provider, model = %identity.model, tools = ?tools.names(), mode = profile.permissions.mode.as_str(), "profile configured");
        profiles.push(AgentProfile {
            name: profile.name.clone(),
            tenants: profile.tenants.clone(),
            provider,
            tools,
            permissions: profile.permissions.clone(),
        });
    }
    Ok(AgentRuntime {
        provider,
        tools,
        profiles,
    })
}

/// Connects to PostgreSQL with the schema policy of the configuration. The URL is a secret: it
/// appears in no error and no log line.
async fn open_postgres(config: &ServeConfig, clock: SharedClock) -> anyhow::Result<PostgresStore> {
    let Some(url) = &config.database_url else {
        anyhow::bail!("store \"postgres\" needs a database URL");
    };
    let options = PostgresOptions {
        clock,
        max_events_per_session: config.max_events_per_session,
        schema_policy: config.schema_policy,
        ..PostgresOptions::default()
    };
    PostgresStore::connect(url.expose(), options)
        .await
        .map_err(|error| anyhow::anyhow!("opening the PostgreSQL store failed: {error}"))
}

/// Runs until SIGINT or SIGTERM, printing where to connect and how to authenticate.
pub async fn run_until_signal(config: ServeConfig) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let base_path = agent_runtime_gateway::normalize_base_path(&config.gateway.base_path);
    let console = config.gateway.console;
    let store_line = match config.store {
        StoreKind::Jsonl => format!("JSONL in {}", config.data_dir.display()),
        StoreKind::Memory => "memory (nothing survives a restart)".to_owned(),
        StoreKind::Postgres => "PostgreSQL (shared)".to_owned(),
    };
    let model_line = match config.provider.kind {
        ProviderKind::Demo => {
            "demo provider (offline, labelled [demo]; set [provider] to use a real model)"
                .to_owned()
        }
        kind => format!(
            "{} {}",
            kind.as_str(),
            config.provider.model.as_deref().unwrap_or_default()
        ),
    };
    let auth_line = auth_summary(&config.auth_mode);
    let metrics_on_api = config.telemetry.metrics;
    // Where `start` keeps the development operator token, when it makes one.
    let operator_file = (config.store != StoreKind::Memory
        && config.gateway.operator_token_sha256.is_empty())
    .then(|| config.data_dir.join(dev_token::OPERATOR_FILE_NAME));
    let server = start(config, listener).await?;
    let url = format!("http://{}", server.address);
    println!("agent-runtime is serving on {url}");
    println!(
        "  API:      {url}{base_path}  (POST {base_path}/commands, GET {base_path}/sessions/ID/events)"
    );
    if console {
        println!("  console:  {url}/  (sign in with the token)");
    }
    println!("  store:    {store_line}");
    match &server.dev_token {
        Some(token) => {
            println!("  token:    {token}");
            println!("            (development token: tenant \"dev\", every scope; send it as");
            println!("             `authorization: Bearer {token}`)");
            if let Some(file) = &operator_file {
                println!(
                    "  operator: token in {} (agent-runtime admin)",
                    file.display()
                );
            }
        }
        None => println!("  auth:     {auth_line}"),
    }
    println!("  model:    {model_line}");
    match server.metrics_address {
        Some(address) => println!("  metrics:  http://{address}/metrics"),
        None if metrics_on_api => println!("  metrics:  {url}/metrics"),
        None => {}
    }
    wait_for_signal().await;
    println!("agent-runtime: shutting down");
    server.shutdown();
    server.wait().await
}

pub(crate) async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// The tools of a tenant's profile, as the gateway lists them for A2A skills.
fn offered_tools(executor: &Arc<InProcessExecutor>) -> agent_runtime_gateway::TenantTools {
    let executor = Arc::clone(executor);
    Arc::new(move |tenant: String| {
        let tools = executor.offered_tools(&tenant);
        Box::pin(std::future::ready(tools))
    })
}
