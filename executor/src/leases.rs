//! Execution leases of the sessions an executor runs (storage.md §4).
//!
//! In a cluster every session an executor loads is claimed through its route: the claim bumps the
//! fencing token and the attempt, and every later write of the session carries the fence, so once
//! another executor takes the session over the store rejects anything the old one still tries
//! (invariant 5). Leases are renewed in the background; a lease that cannot be renewed is reported
//! as lost, and the executor drops the session without writing.
//!
//! `serve` runs a single process and takes no leases.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::ProtocolError;
use agent_runtime_store::{
    ClaimSession, EnqueueOptions, ExecutionLease, RouteState, RouteTransition, RuntimeErrorCode,
    Store, StoreError,
};
use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::config::SessionCaps;

/// How an executor holds its sessions.
#[async_trait]
pub trait SessionLeases: Send + Sync {
    /// Takes the session for this executor. `None` when this deployment does not fence.
    async fn acquire(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<Option<ExecutionLease>, ProtocolError>;

    /// Gives the session up: `closed` settles its route as completed, otherwise it is handed off
    /// (suspended) so that another executor can take it.
    async fn release(&self, tenant_id: &str, lease: &ExecutionLease, closed: bool);
}

/// Single process: no leases, no fences.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoLeases;

#[async_trait]
impl SessionLeases for NoLeases {
    async fn acquire(&self, _: &str, _: &str) -> Result<Option<ExecutionLease>, ProtocolError> {
        Ok(None)
    }

    async fn release(&self, _: &str, _: &ExecutionLease, _: bool) {}
}

type Key = (String, String);

/// A cluster executor's leases, renewed in the background.
pub struct WorkerLeases {
    store: Arc<dyn Store>,
    worker_id: String,
    ttl: Duration,
    /// Decision P11: the cap counts the tenant's sessions on every live executor.
    session_caps: SessionCaps,
    held: Mutex<HashMap<Key, ExecutionLease>>,
    lost: mpsc::UnboundedSender<Key>,
}

impl WorkerLeases {
    /// Returns the leases and the stream of sessions whose lease was lost.
    pub fn new(
        store: Arc<dyn Store>,
        worker_id: &str,
        ttl: Duration,
        session_caps: SessionCaps,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<Key>) {
        let (lost, lost_sessions) = mpsc::unbounded_channel();
        let leases = Arc::new(Self {
            store,
            worker_id: worker_id.to_owned(),
            ttl,
            session_caps,
            held: Mutex::new(HashMap::new()),
            lost,
        });
        (leases, lost_sessions)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Key, ExecutionLease>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn count(&self) -> usize {
        self.held().len()
    }

    /// The fencing tokens of every held session, for the load report.
    pub fn snapshot(&self) -> Vec<(String, String, u64)> {
        self.held()
            .iter()
            .map(|((tenant, session), lease)| {
                (tenant.clone(), session.clone(), lease.fencing_token)
            })
            .collect()
    }

    /// Renews every lease once; reports the ones that are gone.
    pub async fn renew_all(&self) {
        let leases: Vec<(Key, ExecutionLease)> = self
            .held()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let ttl_ms = self.ttl.as_millis() as u64;
        for ((tenant, session), lease) in leases {
            match self
                .store
                .renew_session_lease(&tenant, &lease, ttl_ms)
                .await
            {
                Ok(claim) => {
                    self.held().insert((tenant, session), claim.lease);
                }
                Err(StoreError::Runtime {
                    code: RuntimeErrorCode::LeaseLost | RuntimeErrorCode::SessionRouteNotFound,
                    ..
                }) => {
                    tracing::warn!(session_id = %session, "execution lease lost; dropping the session");
                    self.held().remove(&(tenant.clone(), session.clone()));
                    let _ = self.lost.send((tenant, session));
                }
                Err(error) => {
                    // Transient: the lease still runs until its expiry; try again next round.
                    tracing::warn!(session_id = %session, error = %error, "renewing an execution lease failed");
                }
            }
        }
    }

    /// Renews leases every third of their TTL until the returned task is aborted.
    pub fn spawn_renewal(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let leases = Arc::clone(self);
        let period = (self.ttl / 3).max(Duration::from_millis(50));
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                leases.renew_all().await;
            }
        })
    }

    /// Claims one orphaned session (suspended after its owner died or drained), if any and if
    /// there is capacity; the caller loads it under the returned lease.
    pub async fn adopt_next(&self) -> Result<Option<ExecutionLease>, StoreError> {
        let claim = self
            .store
            .claim_session(ClaimSession {
                owner_id: self.worker_id.clone(),
                lease_id: nanoid(),
                ttl_ms: self.ttl.as_millis() as u64,
                tenant_id: None,
                session_id: None,
                orphans_only: true,
            })
            .await?;
        let Some(claim) = claim else {
            return Ok(None);
        };
        let tenant_id = claim.route.tenant_id.clone();
        self.store
            .transition_session(
                &tenant_id,
                &claim.lease,
                RouteTransition {
                    expected_state: Some(RouteState::Provisioning),
                    state: RouteState::Running,
                    metadata: None,
                    failure: None,
                },
            )
            .await?;
        self.held().insert(
            (tenant_id, claim.lease.session_id.clone()),
            claim.lease.clone(),
        );
        Ok(Some(claim.lease))
    }

    /// The tenant of a held lease.
    pub fn tenant_of(&self, lease: &ExecutionLease) -> Option<String> {
        self.held()
            .iter()
            .find(|(_, held)| held.lease_id == lease.lease_id)
            .map(|((tenant, _), _)| tenant.clone())
    }

    /// Hands every held session off (drain / shutdown).
    pub async fn release_all(&self) {
        let leases: Vec<(Key, ExecutionLease)> = self.held().drain().collect();
        for ((tenant, _), lease) in leases {
            if let Err(error) = self.store.handoff_session(&tenant, &lease, None).await {
                tracing::warn!(error = %error, "handing a session off failed; its lease will expire");
            }
        }
    }
}

#[async_trait]
impl SessionLeases for WorkerLeases {
    async fn acquire(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<Option<ExecutionLease>, ProtocolError> {
        self.check_tenant_cap(tenant_id, session_id).await?;
        let route = self
            .store
            .get_session_route(tenant_id, session_id)
            .await
            .map_err(|e| unavailable(&e))?;
        let needs_enqueue = route
            .as_ref()
            .is_none_or(|route| matches!(route.state, RouteState::Suspended | RouteState::Idle));
        if needs_enqueue {
            self.store
                .enqueue_session(tenant_id, session_id, EnqueueOptions::default())
                .await
                .map_err(|e| unavailable(&e))?;
        }
        let claim = self
            .store
            .claim_session(ClaimSession {
                owner_id: self.worker_id.clone(),
                lease_id: nanoid(),
                ttl_ms: self.ttl.as_millis() as u64,
                tenant_id: Some(tenant_id.to_owned()),
                session_id: Some(session_id.to_owned()),
                orphans_only: false,
            })
            .await
            .map_err(|e| unavailable(&e))?;
        let Some(claim) = claim else {
            // At capacity, or another executor holds the session right now.
            return Err(ProtocolError::session_limit());
        };
        self.store
            .transition_session(
                tenant_id,
                &claim.lease,
                RouteTransition {
                    expected_state: Some(RouteState::Provisioning),
                    state: RouteState::Running,
                    metadata: None,
                    failure: None,
                },
            )
            .await
            .map_err(|e| unavailable(&e))?;
        self.held().insert(
            (tenant_id.to_owned(), session_id.to_owned()),
            claim.lease.clone(),
        );
        Ok(Some(claim.lease))
    }

    async fn release(&self, tenant_id: &str, lease: &ExecutionLease, closed: bool) {
        let key = (tenant_id.to_owned(), lease.session_id.clone());
        let current = self.held().remove(&key).unwrap_or_else(|| lease.clone());
        let outcome = if closed {
            self.store
                .settle_session(
                    tenant_id,
                    &current,
                    RouteTransition {
                        expected_state: None,
                        state: RouteState::Completed,
                        metadata: None,
                        failure: None,
                    },
                )
                .await
        } else {
            self.store.handoff_session(tenant_id, &current, None).await
        };
        if let Err(error) = outcome {
            tracing::warn!(error = %error, "releasing a session route failed; its lease will expire");
        }
    }
}

impl WorkerLeases {
    /// Sessions of `tenant_id` held anywhere in the cluster (routes owned by any worker), other
    /// than `session_id` itself. Best effort: two executors loading at the same instant may both
    /// pass, so the cap can be exceeded by the number of concurrent loads.
    async fn check_tenant_cap(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<(), ProtocolError> {
        let workers = self
            .store
            .list_workers()
            .await
            .map_err(|e| unavailable(&e))?;
        let mut held = 0usize;
        for worker in workers {
            let routes = self
                .store
                .list_worker_sessions(&worker.worker_id)
                .await
                .map_err(|e| unavailable(&e))?;
            held += routes
                .iter()
                .filter(|route| route.tenant_id == tenant_id && route.session_id != session_id)
                .filter(|route| route.state.is_active())
                .count();
        }
        if held >= self.session_caps.for_tenant(tenant_id) {
            return Err(ProtocolError::session_limit());
        }
        Ok(())
    }
}

fn unavailable(error: &StoreError) -> ProtocolError {
    tracing::warn!(error = %error, "taking a session lease failed");
    ProtocolError::internal()
}
