//! Which executor serves which session.
//!
//! A new session goes to a live executor (fresh heartbeat, not draining) with the fewest
//! sessions. A session command goes to the executor whose route holds the session; when that
//! executor is gone (its lease expired, or it is offline), any live executor takes the session
//! over: it claims the route with the next fencing token and resumes from the store (decision P12).

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_runtime::clock::SharedClock;
use agent_runtime::secret::Secret;
use agent_runtime_grpc::MAX_MESSAGE_BYTES;
use agent_runtime_grpc::session_executor_client::SessionExecutorClient;
use agent_runtime_store::{RouteState, Store, WorkerRecord, WorkerStatus};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use super::route_cache::RouteCache;

/// Adds the cluster secret to every call.
#[derive(Clone)]
pub struct SecretInterceptor {
    value: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
}

impl SecretInterceptor {
    pub fn new(secret: &Secret) -> Self {
        let value = format!("Bearer {}", secret.expose())
            .parse()
            .expect("a cluster secret is ASCII");
        Self { value }
    }
}

impl tonic::service::Interceptor for SecretInterceptor {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("authorization", self.value.clone());
        Ok(request)
    }
}

pub type ExecutorClient = SessionExecutorClient<InterceptedService<Channel, SecretInterceptor>>;

/// The metadata key under which executors publish their gRPC address.
const GRPC_ADDRESS_KEY: &str = "grpcAddress";

/// How often an idle or busy connection to an executor is pinged, and how long a ping may go
/// unanswered before the connection (and every call on it) fails.
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);
const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

pub struct Router {
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: SharedClock,
    secret: SecretInterceptor,
    clients: Mutex<HashMap<String, (String, ExecutorClient)>>,
    /// Owners read lately, for commands (`route_cache.rs`).
    recent: RouteCache,
}

/// An executor picked for a call.
pub struct Target {
    pub worker_id: String,
    pub client: ExecutorClient,
}

impl Router {
    pub fn new(store: Arc<dyn Store>, clock: SharedClock, secret: &Secret) -> Self {
        Self {
            store,
            clock,
            secret: SecretInterceptor::new(secret),
            clients: Mutex::new(HashMap::new()),
            recent: RouteCache::default(),
        }
    }

    pub(super) fn live(&self, worker: &WorkerRecord) -> bool {
        worker.status == WorkerStatus::Active && worker.lease_expires_at_ms > self.clock.now_ms()
    }

    pub(super) fn client_for(&self, worker: &WorkerRecord) -> Option<ExecutorClient> {
        let address = worker.metadata.get(GRPC_ADDRESS_KEY)?.as_str()?.to_owned();
        let mut clients = self.clients.locked();
        if let Some((known, client)) = clients.get(&worker.worker_id)
            && *known == address
        {
            return Some(client.clone());
        }
        // A lazy channel connects on first use and reconnects by itself.
        let endpoint = Endpoint::from_shared(format!("http://{address}")).ok()?;
        // HTTP/2 pings find an executor whose host died or froze (no answer, no reset) within
        // seconds; without them a call to it waits for its whole timeout.
        let channel = endpoint
            .connect_timeout(std::time::Duration::from_secs(2))
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .connect_lazy();
        let client = SessionExecutorClient::with_interceptor(channel, self.secret.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        clients.insert(worker.worker_id.clone(), (address, client.clone()));
        Some(client)
    }

    /// A live executor for a new session: the one with the fewest sessions.
    pub async fn pick_new(&self, avoid: Option<&str>) -> Option<Target> {
        let workers = self.store.list_workers().await.ok()?;
        let loads = self.store.count_worker_sessions().await.ok()?;
        let mut best: Option<(u64, &WorkerRecord)> = None;
        for worker in workers
            .iter()
            .filter(|w| self.live(w) && Some(w.worker_id.as_str()) != avoid)
        {
            let load = loads.get(&worker.worker_id).copied().unwrap_or(0);
            if best.is_none_or(|(best_load, _)| load < best_load) {
                best = Some((load, worker));
            }
        }
        let worker = best?.1;
        Some(Target {
            worker_id: worker.worker_id.clone(),
            client: self.client_for(worker)?,
        })
    }

    /// The tools a live executor offers new sessions of `tenant_id`; none when it cannot say.
    pub async fn tenant_tools(&self, tenant_id: &str) -> Vec<(String, String)> {
        let Some(mut target) = self.pick_new(None).await else {
            return Vec::new();
        };
        let request = agent_runtime_grpc::TenantRequest {
            tenant_id: tenant_id.to_owned(),
        };
        match target.client.tools(request).await {
            Ok(reply) => reply
                .into_inner()
                .tools
                .into_iter()
                .map(|tool| (tool.name, tool.description))
                .collect(),
            Err(status) => {
                tracing::warn!(worker_id = %target.worker_id, code = ?status.code(), "an executor did not list its tools");
                Vec::new()
            }
        }
    }

    /// For a command: the owner read lately when there is one (`route_cache.rs`); a failed
    /// call to it must be reported with [`Router::call_failed`].
    pub async fn owner_for_command(&self, tenant_id: &str, session_id: &str) -> Option<Target> {
        if let Some(worker) = self.recent.owner(tenant_id, session_id)
            && self.live(&worker)
            && let Some(client) = self.client_for(&worker)
        {
            return Some(Target {
                worker_id: worker.worker_id,
                client,
            });
        }
        self.owner_of(tenant_id, session_id).await
    }

    /// A call to `worker_id` for the session failed: its owner is read anew next time.
    /// Whether `worker_id` still holds the session's execution lease (by the store's clock): while
    /// it does, it may still store what it runs.
    pub async fn held_by(
        &self,
        tenant_id: &str,
        session_id: &str,
        worker_id: &str,
    ) -> agent_runtime_store::StoreResult<bool> {
        let lease = self
            .store
            .get_execution_lease(tenant_id, session_id)
            .await?;
        Ok(lease.is_some_and(|lease| {
            lease.owner_id == worker_id && lease.is_active(self.clock.now_ms())
        }))
    }

    pub fn call_failed(&self, tenant_id: &str, session_id: &str, worker_id: &str) {
        self.recent.forget(tenant_id, session_id, worker_id);
    }

    /// The executor that holds the session as the store says now, or a live one to take it over.
    pub async fn owner_of(&self, tenant_id: &str, session_id: &str) -> Option<Target> {
        let route = self
            .store
            .get_session_route(tenant_id, session_id)
            .await
            .ok()
            .flatten();
        let holder =
            route.filter(|route| route.state.is_active() || route.state == RouteState::Queued);
        if let Some(worker_id) = holder.and_then(|route| route.worker_id)
            && let Ok(Some(worker)) = self.store.get_worker(&worker_id).await
            && self.live(&worker)
            && let Some(client) = self.client_for(&worker)
        {
            self.recent.remember(tenant_id, session_id, &worker);
            return Some(Target { worker_id, client });
        }
        self.pick_new(None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_runtime_store::hooked::Call;
    use agent_runtime_store::{
        ClaimSession, EnqueueOptions, Hooked, MemoryStore, Operation, RegisterWorker, StoreHooks,
        StoreOptions, StoreResult,
    };
    use async_trait::async_trait;

    /// Records every store operation a placement runs.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<Operation>>>);

    #[async_trait]
    impl StoreHooks for Recorded {
        async fn around<T: Send>(&self, operation: Operation, call: Call<'_, T>) -> StoreResult<T> {
            self.0.locked().push(operation);
            call.await
        }
    }

    async fn register(store: &dyn Store, worker_id: &str) {
        let mut metadata = serde_json::Map::new();
        metadata.insert(GRPC_ADDRESS_KEY.to_owned(), "127.0.0.1:9".into());
        let worker = RegisterWorker {
            worker_id: worker_id.to_owned(),
            capacity: 1000,
            ttl_ms: 60_000,
            metadata,
        };
        store.register_worker(worker).await.unwrap();
    }

    /// Placing a session asked the store for every route of every worker, so its cost grew
    /// with the sessions of the cluster; it asks for the workers and one count of their routes.
    #[tokio::test]
    async fn placing_a_session_counts_routes_instead_of_reading_them() {
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
        register(&*memory, "worker-a").await;
        register(&*memory, "worker-b").await;
        for n in 0..20 {
            let session = format!("session-{n}");
            memory
                .enqueue_session("t", &session, EnqueueOptions::default())
                .await
                .unwrap();
            let claim = ClaimSession {
                owner_id: "worker-a".to_owned(),
                lease_id: format!("lease-{n}"),
                ttl_ms: 60_000,
                tenant_id: Some("t".to_owned()),
                session_id: Some(session),
                orphans_only: false,
            };
            memory.claim_session(claim).await.unwrap().expect("claimed");
        }
        let recorded = Recorded::default();
        let store: Arc<dyn Store> = Arc::new(Hooked::with_hooks(memory, recorded.clone()));
        let router = Router::new(
            store,
            agent_runtime::clock::system(),
            &Secret::new("cluster-secret"),
        );

        let target = router.pick_new(None).await.expect("a live executor");

        assert_eq!(target.worker_id, "worker-b", "the one with fewer sessions");
        assert_eq!(
            *recorded.0.locked(),
            [Operation::ListWorkers, Operation::CountWorkerSessions]
        );
    }
}
