//! The global worker registry (docs/storage.md §4.5) in `workers` (not tenant-scoped).

use async_trait::async_trait;
use sqlx::types::Json;

use super::rows::{WorkerRow, worker_status_str};
use super::{PostgresStore, Tx, db_error, to_i64};
use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::model::{RegisterWorker, WorkerRecord, WorkerStatus};
use crate::ports::WorkerRegistry;
use crate::rules::{validate_worker_ttl, worker_invalid};

/// The worker row, locked for the rest of the transaction.
pub(super) async fn lock_worker(tx: &mut Tx, worker_id: &str) -> StoreResult<Option<WorkerRecord>> {
    let row: Option<WorkerRow> =
        sqlx::query_as("SELECT * FROM workers WHERE worker_id = $1 FOR UPDATE")
            .bind(worker_id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?;
    row.map(WorkerRecord::try_from).transpose()
}

async fn put_worker(tx: &mut Tx, worker: &WorkerRecord) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO workers (worker_id, status, capacity, metadata, registered_at_ms, \
         last_heartbeat_at_ms, lease_expires_at_ms, draining_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (worker_id) DO UPDATE SET \
         status = EXCLUDED.status, capacity = EXCLUDED.capacity, metadata = EXCLUDED.metadata, \
         registered_at_ms = EXCLUDED.registered_at_ms, \
         last_heartbeat_at_ms = EXCLUDED.last_heartbeat_at_ms, \
         lease_expires_at_ms = EXCLUDED.lease_expires_at_ms, \
         draining_at_ms = EXCLUDED.draining_at_ms",
    )
    .bind(&worker.worker_id)
    .bind(worker_status_str(worker.status))
    .bind(i64::from(worker.capacity))
    .bind(Json(&worker.metadata))
    .bind(to_i64(worker.registered_at_ms))
    .bind(to_i64(worker.last_heartbeat_at_ms))
    .bind(to_i64(worker.lease_expires_at_ms))
    .bind(worker.draining_at_ms.map(to_i64))
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

impl PostgresStore {
    /// Locks a live (active or draining) worker, applies `change` and stores it.
    async fn change_live_worker(
        &self,
        worker_id: &str,
        missing: impl FnOnce() -> StoreError + Send,
        change: impl FnOnce(&mut WorkerRecord, u64) + Send,
    ) -> StoreResult<WorkerRecord> {
        let mut tx = self.begin().await?;
        let now = self.now();
        let current = lock_worker(&mut tx, worker_id).await?;
        let Some(mut worker) = current.filter(|w| w.status != WorkerStatus::Offline) else {
            return Err(missing());
        };
        change(&mut worker, now);
        put_worker(&mut tx, &worker).await?;
        self.commit(tx).await?;
        Ok(worker)
    }
}

#[async_trait]
impl WorkerRegistry for PostgresStore {
    async fn register_worker(&self, request: RegisterWorker) -> StoreResult<WorkerRecord> {
        self.retrying_conflicts(|| self.register_worker_once(request.clone()))
            .await
    }

    async fn heartbeat_worker(&self, worker_id: &str, ttl_ms: u64) -> StoreResult<WorkerRecord> {
        validate_worker_ttl(ttl_ms)?;
        let missing = || {
            StoreError::runtime(
                RuntimeErrorCode::WorkerUnavailable,
                format!("Worker {worker_id} is not registered or is offline"),
            )
        };
        self.change_live_worker(worker_id, missing, |worker, now| {
            worker.last_heartbeat_at_ms = now;
            worker.lease_expires_at_ms = now.saturating_add(ttl_ms);
        })
        .await
    }

    async fn drain_worker(&self, worker_id: &str) -> StoreResult<WorkerRecord> {
        let missing = || {
            StoreError::runtime(
                RuntimeErrorCode::WorkerNotFound,
                format!("Worker {worker_id} was not found or is offline"),
            )
        };
        self.change_live_worker(worker_id, missing, |worker, now| {
            if worker.status != WorkerStatus::Draining {
                worker.status = WorkerStatus::Draining;
                worker.draining_at_ms = Some(now);
            }
        })
        .await
    }

    async fn get_worker(&self, worker_id: &str) -> StoreResult<Option<WorkerRecord>> {
        self.ensure_open()?;
        let row: Option<WorkerRow> = self
            .reading(|| {
                sqlx::query_as("SELECT * FROM workers WHERE worker_id = $1")
                    .bind(worker_id)
                    .fetch_optional(self.pool())
            })
            .await?;
        row.map(WorkerRecord::try_from).transpose()
    }

    async fn list_workers(&self) -> StoreResult<Vec<WorkerRecord>> {
        self.ensure_open()?;
        let rows: Vec<WorkerRow> = self
            .reading(|| {
                sqlx::query_as("SELECT * FROM workers ORDER BY worker_id").fetch_all(self.pool())
            })
            .await?;
        rows.into_iter().map(WorkerRecord::try_from).collect()
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `register_worker` (re-run whole on a deadlock).
    async fn register_worker_once(&self, request: RegisterWorker) -> StoreResult<WorkerRecord> {
        if request.worker_id.trim().is_empty() || request.capacity == 0 {
            return Err(worker_invalid(
                "Worker registration needs a worker id and a capacity of at least 1",
            ));
        }
        validate_worker_ttl(request.ttl_ms)?;
        let mut tx = self.begin().await?;
        let now = self.now();
        // Registering again revives the worker (even an offline one) but keeps its first
        // registration time.
        let existing = lock_worker(&mut tx, &request.worker_id).await?;
        let worker = WorkerRecord {
            registered_at_ms: existing.map_or(now, |w| w.registered_at_ms),
            worker_id: request.worker_id,
            status: WorkerStatus::Active,
            capacity: request.capacity,
            metadata: request.metadata,
            last_heartbeat_at_ms: now,
            lease_expires_at_ms: now.saturating_add(request.ttl_ms),
            draining_at_ms: None,
        };
        put_worker(&mut tx, &worker).await?;
        self.commit(tx).await?;
        Ok(worker)
    }
}
