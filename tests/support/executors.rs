//! The processes of in-process cluster tests: executors with the demo model and its approval
//! tool, and gateways, with the settings every cluster test shares.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime::secret::Secret;
use agent_runtime_cli::cluster::{
    ExecutorProcessConfig, GatewayProcessConfig, RunningExecutor, start_executor, start_gateway,
};
use agent_runtime_cli::config::TelemetryConfig;
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::provider::DemoProvider;
use agent_runtime_executor::tools::{DemoApprovalTool, Tool, ToolRegistry};
use agent_runtime_gateway::cluster::router::{ExecutorClient, SecretInterceptor};
use agent_runtime_gateway::{AuthMode, GatewayConfig};
use agent_runtime_grpc::session_executor_client::SessionExecutorClient;
use agent_runtime_store::{PostgresOptions, PostgresStore, Store};
use tokio::net::TcpListener;
use tonic::transport::Channel;

/// A PostgreSQL store on `url` with the default options.
pub async fn postgres_store(url: &str) -> Arc<dyn Store> {
    Arc::new(
        PostgresStore::connect(url, PostgresOptions::default())
            .await
            .expect("PostgreSQL store"),
    )
}

/// An executor's process settings: capacity 100, a 2 s lease TTL and drain grace, default
/// executor and telemetry settings; callers change what their case needs.
pub fn executor_config(
    worker_id: &str,
    advertise: impl ToString,
    secret: &str,
) -> ExecutorProcessConfig {
    ExecutorProcessConfig {
        worker_id: worker_id.to_owned(),
        advertise: advertise.to_string(),
        capacity: 100,
        lease_ttl: Duration::from_secs(2),
        secret: Secret::new(secret),
        executor: ExecutorConfig::default(),
        drain_grace: Duration::from_secs(2),
    }
}

/// Starts an executor on `listener` with the demo model (50 ms slow deltas) and its approval tool.
pub async fn start_demo_executor(
    config: ExecutorProcessConfig,
    store: Arc<dyn Store>,
    clock: &SharedClock,
    listener: TcpListener,
) -> RunningExecutor {
    let runtime = agent_runtime_cli::serve::AgentRuntime {
        provider: Arc::new(DemoProvider {
            slow_delta_interval: Duration::from_millis(50),
        }),
        tools: ToolRegistry::new([Arc::new(DemoApprovalTool) as Arc<dyn Tool>]),
        profiles: Vec::new(),
    };
    let telemetry = TelemetryConfig::default();
    start_executor(config, &telemetry, runtime, store, clock.clone(), listener)
        .await
        .unwrap()
}

/// A gateway's settings for tests: 200 ms SSE heartbeats and a 2 s shutdown grace.
pub fn gateway_config() -> GatewayConfig {
    GatewayConfig {
        heartbeat_interval: Duration::from_millis(200),
        shutdown_grace: Duration::from_secs(2),
        ..GatewayConfig::default()
    }
}

/// Starts a cluster gateway on a free port with the test tokens (static authentication) and a
/// 10 s failover window.
pub async fn start_test_gateway(
    gateway: GatewayConfig,
    store: Arc<dyn Store>,
    clock: &SharedClock,
    secret: &str,
) -> super::TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = GatewayProcessConfig {
        gateway,
        tokens: super::test_tokens(),
        auth_mode: AuthMode::Static,
        audit: None,
        secret: Secret::new(secret),
        failover_window: Duration::from_secs(10),
        telemetry: TelemetryConfig::default(),
        webhooks: None,
    };
    let server = start_gateway(config, store, clock.clone(), listener)
        .await
        .unwrap();
    super::TestServer::from_running(server)
}

/// A gRPC client of an executor on `channel`, authorized with `secret` (the gateway's own
/// interceptor).
pub fn authorized_client(channel: Channel, secret: &str) -> ExecutorClient {
    SessionExecutorClient::with_interceptor(channel, SecretInterceptor::new(&Secret::new(secret)))
}
