//! Executor processes for in-process cluster tests: the demo model and its approval tool, with
//! the settings every cluster test shares.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime_cli::cluster::{ExecutorProcessConfig, RunningExecutor, start_executor};
use agent_runtime_cli::config::TelemetryConfig;
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::provider::{DemoProvider, ModelProvider};
use agent_runtime_executor::tools::{DemoApprovalTool, Tool, ToolRegistry};
use agent_runtime_store::Store;
use tokio::net::TcpListener;

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
        secret: secret.to_owned(),
        executor: ExecutorConfig::default(),
        drain_grace: Duration::from_secs(2),
        telemetry: TelemetryConfig::default(),
    }
}

/// Starts an executor on `listener` with the demo model (50 ms slow deltas) and its approval tool.
pub async fn start_demo_executor(
    config: ExecutorProcessConfig,
    store: Arc<dyn Store>,
    clock: &SharedClock,
    listener: TcpListener,
) -> RunningExecutor {
    let runtime: (Arc<dyn ModelProvider>, ToolRegistry) = (
        Arc::new(DemoProvider {
            slow_delta_interval: Duration::from_millis(50),
        }),
        ToolRegistry::new([Arc::new(DemoApprovalTool) as Arc<dyn Tool>]),
    );
    start_executor(config, runtime, store, clock.clone(), listener)
        .await
        .unwrap()
}
