//! The global worker registry (docs/storage.md §4.5).

use async_trait::async_trait;

use super::{Backend, Ctx, State, StoreEngine};
use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::journal::JournalEntry;
use crate::model::{RegisterWorker, WorkerRecord, WorkerStatus};
use crate::ports::WorkerRegistry;
use crate::rules::{validate_worker_ttl, worker_invalid};

impl State {
    /// A registered worker that is not offline (active or draining).
    fn live_worker(&self, worker_id: &str) -> Option<&WorkerRecord> {
        self.workers
            .get(worker_id)
            .filter(|w| w.status != WorkerStatus::Offline)
    }

    pub(super) fn put_worker(&mut self, cx: &mut Ctx<'_>, worker: WorkerRecord) {
        self.workers
            .insert(worker.worker_id.clone(), worker.clone());
        cx.record(JournalEntry::Worker { worker });
    }
}

#[async_trait]
impl<B: Backend> WorkerRegistry for StoreEngine<B> {
    async fn register_worker(&self, request: RegisterWorker) -> StoreResult<WorkerRecord> {
        if request.worker_id.trim().is_empty() || request.capacity == 0 {
            return Err(worker_invalid(
                "Worker registration needs a worker id and a capacity of at least 1",
            ));
        }
        validate_worker_ttl(request.ttl_ms)?;
        self.write(|state, cx| {
            // Registering again revives the worker (even an offline one) but keeps its first
            // registration time.
            let registered_at_ms = state
                .workers
                .get(&request.worker_id)
                .map_or(cx.now, |w| w.registered_at_ms);
            let worker = WorkerRecord {
                worker_id: request.worker_id,
                status: WorkerStatus::Active,
                capacity: request.capacity,
                metadata: request.metadata,
                registered_at_ms,
                last_heartbeat_at_ms: cx.now,
                lease_expires_at_ms: cx.now.saturating_add(request.ttl_ms),
                draining_at_ms: None,
            };
            state.put_worker(cx, worker.clone());
            Ok(worker)
        })
    }

    async fn heartbeat_worker(&self, worker_id: &str, ttl_ms: u64) -> StoreResult<WorkerRecord> {
        validate_worker_ttl(ttl_ms)?;
        self.write(|state, cx| {
            let Some(current) = state.live_worker(worker_id) else {
                return Err(StoreError::runtime(
                    RuntimeErrorCode::WorkerUnavailable,
                    format!("Worker {worker_id} is not registered or is offline"),
                ));
            };
            let mut worker = current.clone();
            worker.last_heartbeat_at_ms = cx.now;
            worker.lease_expires_at_ms = cx.now.saturating_add(ttl_ms);
            state.put_worker(cx, worker.clone());
            Ok(worker)
        })
    }

    async fn drain_worker(&self, worker_id: &str) -> StoreResult<WorkerRecord> {
        self.write(|state, cx| {
            let Some(current) = state.live_worker(worker_id) else {
                return Err(StoreError::runtime(
                    RuntimeErrorCode::WorkerNotFound,
                    format!("Worker {worker_id} was not found or is offline"),
                ));
            };
            if current.status == WorkerStatus::Draining {
                return Ok(current.clone());
            }
            let mut worker = current.clone();
            worker.status = WorkerStatus::Draining;
            worker.draining_at_ms = Some(cx.now);
            state.put_worker(cx, worker.clone());
            Ok(worker)
        })
    }

    async fn get_worker(&self, worker_id: &str) -> StoreResult<Option<WorkerRecord>> {
        self.read(|state, _| Ok(state.workers.get(worker_id).cloned()))
    }

    async fn list_workers(&self) -> StoreResult<Vec<WorkerRecord>> {
        self.read(|state, _| Ok(state.workers.values().cloned().collect()))
    }
}
