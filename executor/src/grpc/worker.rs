//! Worker registration: an executor announces itself (id, gRPC address, capacity) in the shared
//! store and keeps its heartbeat going; gateways route only to workers whose heartbeat is fresh.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime::protocol::JsonObject;
use agent_runtime_store::{RegisterWorker, Store, StoreError, WorkerRecord, WorkerStatus};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The metadata key under which a worker publishes its gRPC address.
pub const GRPC_ADDRESS_KEY: &str = "grpcAddress";

/// Registers the worker; returns its record.
pub async fn register(
    store: &Arc<dyn Store>,
    worker_id: &str,
    grpc_address: &str,
    capacity: u32,
    ttl: Duration,
) -> Result<WorkerRecord, StoreError> {
    let mut metadata = JsonObject::new();
    metadata.insert(GRPC_ADDRESS_KEY.to_owned(), Value::from(grpc_address));
    store
        .register_worker(RegisterWorker {
            worker_id: worker_id.to_owned(),
            capacity,
            ttl_ms: ttl.as_millis() as u64,
            metadata,
        })
        .await
}

/// Heartbeats every third of the TTL until aborted. A failed heartbeat is retried at the next tick;
/// if the worker went offline meanwhile it registers again. A heartbeat that finds the worker
/// draining (an operator's drain) cancels `drain`.
pub fn spawn_heartbeat(
    store: Arc<dyn Store>,
    worker_id: String,
    grpc_address: String,
    capacity: u32,
    ttl: Duration,
    drain: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval((ttl / 3).max(Duration::from_millis(50)));
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let ttl_ms = ttl.as_millis() as u64;
            match store.heartbeat_worker(&worker_id, ttl_ms).await {
                Ok(record) if record.status == WorkerStatus::Draining && !drain.is_cancelled() => {
                    tracing::info!("the worker was marked as draining; draining");
                    drain.cancel();
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(error = %error, "worker heartbeat failed; registering again");
                    if let Err(error) =
                        register(&store, &worker_id, &grpc_address, capacity, ttl).await
                    {
                        tracing::warn!(error = %error, "registering the worker failed");
                    }
                }
            }
        }
    })
}
