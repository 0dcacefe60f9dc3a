//! Execution leases of the sessions an executor runs (docs/storage.md §4).
//!
//! In a cluster every session an executor loads is claimed through its route: the claim bumps the
//! fencing token and the attempt, and every later write of the session carries the fence, so once
//! another executor takes the session over the store rejects anything the old one still tries
//! (invariant 5). Leases are renewed in the background; a lease that cannot be renewed is reported
//! as lost, and the executor drops the session without writing.
//!
//! Lost is also decided locally (the self-fence, reliability catalogue LEASE-03/04): an executor
//! cut off from the store cannot hear that its lease ran out, so each lease carries a deadline on
//! the monotonic clock, `SELF_FENCE` of the TTL after the last claim or renewal the store
//! confirmed was *sent*. Past it the lease counts as lost without asking the store: the session is
//! dropped before the store could have given it to another executor. Nothing the executor does
//! for gateways over gRPC moves that deadline; only the store's confirmation does.
//!
//! `serve` runs a single process and takes no leases.

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use agent_runtime::clock::SharedClock;
use agent_runtime::ids::nanoid;
use agent_runtime::protocol::ProtocolError;
use agent_runtime_store::{
    ClaimSession, ExecutionLease, RouteState, RouteTransition, RuntimeErrorCode, Store, StoreError,
};
use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::config::SessionCaps;

mod acquire;

use acquire::{Attempt, HANDOFF_MARGIN, HANDOFF_POLL, executor_at_capacity, held_elsewhere};

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

/// Leases renewed per store call.
const RENEWAL_BATCH: usize = 500;

/// The local deadline of a lease, as a fraction (numerator, denominator) of its TTL counted from
/// the moment the last confirmed claim or renewal was sent: shorter than the TTL, so the session
/// is dropped before the store can hand it to another executor, and longer than two renewal
/// periods (a third of the TTL each), so one slow or failed renewal does not drop it.
const SELF_FENCE: (u32, u32) = (3, 4);

/// A cluster executor's leases, renewed in the background.
pub struct WorkerLeases {
    store: Arc<dyn Store>,
    worker_id: String,
    ttl: Duration,
    /// Decision P11: the cap counts the tenant's sessions on every live executor.
    session_caps: SessionCaps,
    held: Mutex<HashMap<Key, ExecutionLease>>,
    /// The local (monotonic) deadline of each held lease, by lease id.
    deadlines: Mutex<HashMap<String, Instant>>,
    clock: SharedClock,
    lost: mpsc::UnboundedSender<Key>,
}

impl WorkerLeases {
    /// Returns the leases and the stream of sessions whose lease was lost.
    pub fn new(
        store: Arc<dyn Store>,
        worker_id: &str,
        ttl: Duration,
        session_caps: SessionCaps,
        clock: SharedClock,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<Key>) {
        let (lost, lost_sessions) = mpsc::unbounded_channel();
        let leases = Arc::new(Self {
            store,
            worker_id: worker_id.to_owned(),
            ttl,
            session_caps,
            held: Mutex::new(HashMap::new()),
            deadlines: Mutex::new(HashMap::new()),
            clock,
            lost,
        });
        (leases, lost_sessions)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Key, ExecutionLease>> {
        self.held.locked()
    }

    pub fn count(&self) -> usize {
        self.held().len()
    }

    /// A claim for this executor: of one session, or (`None`) of the next orphan.
    fn claim_request(&self, session: Option<(&str, &str)>) -> ClaimSession {
        ClaimSession {
            owner_id: self.worker_id.clone(),
            lease_id: nanoid(),
            ttl_ms: self.ttl.as_millis() as u64,
            tenant_id: session.map(|(tenant, _)| tenant.to_owned()),
            session_id: session.map(|(_, session)| session.to_owned()),
            orphans_only: session.is_none(),
        }
    }

    fn held_lease(&self, tenant_id: &str, session_id: &str) -> Option<ExecutionLease> {
        self.held()
            .get(&(tenant_id.to_owned(), session_id.to_owned()))
            .cloned()
    }

    fn deadlines(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.deadlines.locked()
    }

    /// The local deadline of a lease whose claim or renewal was sent at `sent`.
    fn local_deadline(&self, sent: Instant) -> Instant {
        sent + self.ttl * SELF_FENCE.0 / SELF_FENCE.1
    }

    /// Holds a lease the store granted to a claim sent at `claimed_at`.
    fn hold(&self, tenant_id: &str, lease: &ExecutionLease, claimed_at: Instant) {
        self.deadlines()
            .insert(lease.lease_id.clone(), self.local_deadline(claimed_at));
        self.held().insert(
            (tenant_id.to_owned(), lease.session_id.clone()),
            lease.clone(),
        );
    }

    fn forget_deadline(&self, lease_id: &str) {
        self.deadlines().remove(lease_id);
    }

    /// Self-fence: every held lease past its local deadline is dropped and reported lost, without
    /// asking the store (which may be the thing that cannot be reached).
    pub fn expire_overdue(&self) {
        let now = Instant::now();
        let overdue: Vec<String> = self
            .deadlines()
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(lease_id, _)| lease_id.clone())
            .collect();
        if overdue.is_empty() {
            return;
        }
        let lost: Vec<(Key, ExecutionLease)> = {
            let mut held = self.held();
            let keys: Vec<Key> = held
                .iter()
                .filter(|(_, lease)| overdue.contains(&lease.lease_id))
                .map(|(key, _)| key.clone())
                .collect();
            keys.into_iter()
                .filter_map(|key| held.remove(&key).map(|lease| (key, lease)))
                .collect()
        };
        {
            let mut deadlines = self.deadlines();
            for lease_id in &overdue {
                deadlines.remove(lease_id);
            }
        }
        for (key, lease) in lost {
            tracing::warn!(
                session_id = %lease.session_id,
                fencing_token = lease.fencing_token,
                "execution lease not confirmed by the store before its local deadline; dropping the session"
            );
            let _ = self.lost.send(key);
        }
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

    /// Renews the leases that are due (last confirmed a renewal period, a third of the TTL, ago
    /// or more), in batches (one store call, on PostgreSQL one commit, per batch); reports the
    /// ones that are gone. Leases come due at the pace they were claimed, so their writes spread
    /// over the period: renewing thousands at once is a burst of row updates that stalls other
    /// sessions' commands.
    pub async fn renew_due(&self) {
        // Confirmed at `deadline - TTL * SELF_FENCE`: due once that is a period ago.
        let due_by =
            Instant::now() + self.ttl * SELF_FENCE.0 / SELF_FENCE.1 - self.renewal_period();
        let leases: Vec<(String, ExecutionLease)> = {
            let held = self.held();
            let deadlines = self.deadlines();
            held.iter()
                .filter(|(_, lease)| {
                    deadlines
                        .get(&lease.lease_id)
                        .is_none_or(|deadline| *deadline <= due_by)
                })
                .map(|((tenant, _), lease)| (tenant.clone(), lease.clone()))
                .collect()
        };
        let ttl_ms = self.ttl.as_millis() as u64;
        for batch in leases.chunks(RENEWAL_BATCH) {
            let sent = Instant::now();
            let answers = match self.store.renew_session_leases(batch, ttl_ms).await {
                Ok(answers) => answers,
                Err(error) => {
                    // Transient: the leases still run until their expiry; the next tick tries again.
                    tracing::warn!(error = %error, leases = batch.len(), "renewing execution leases failed");
                    continue;
                }
            };
            for ((tenant, lease), answer) in batch.iter().zip(answers) {
                self.renewed(tenant, lease, answer, sent);
            }
        }
    }

    /// How often each lease is renewed: a third of the TTL.
    fn renewal_period(&self) -> Duration {
        self.ttl / 3
    }

    /// Applies one lease's renewal answer.
    fn renewed(
        &self,
        tenant: &str,
        lease: &ExecutionLease,
        answer: Result<ExecutionLease, StoreError>,
        sent: Instant,
    ) {
        let key = (tenant.to_owned(), lease.session_id.clone());
        match answer {
            Ok(renewed) => {
                let mut held = self.held();
                // Unless it was released, replaced or self-fenced while the renewal ran.
                if held
                    .get(&key)
                    .is_some_and(|current| current.lease_id == renewed.lease_id)
                {
                    if let Some(deadline) = self.deadlines().get_mut(&renewed.lease_id) {
                        *deadline = (*deadline).max(self.local_deadline(sent));
                    }
                    held.insert(key, renewed);
                }
            }
            Err(StoreError::Runtime {
                code: RuntimeErrorCode::LeaseLost | RuntimeErrorCode::SessionRouteNotFound,
                ..
            }) => {
                let mut held = self.held();
                if held
                    .get(&key)
                    .is_some_and(|current| current.lease_id == lease.lease_id)
                {
                    held.remove(&key);
                    drop(held);
                    self.forget_deadline(&lease.lease_id);
                    tracing::warn!(session_id = %lease.session_id, "execution lease lost; dropping the session");
                    let _ = self.lost.send(key);
                }
            }
            Err(error) => {
                tracing::warn!(session_id = %lease.session_id, error = %error, "renewing an execution lease failed");
            }
        }
    }

    /// Renews each lease every third of its TTL (looking for due leases every thirtieth), and
    /// checks their local deadlines every twentieth, until the returned task is aborted. The
    /// check runs apart from the renewals, so a renewal stuck on an unreachable store does not
    /// hold it up.
    pub fn spawn_renewal(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let leases = Arc::clone(self);
        let tick = (self.renewal_period() / 10).max(Duration::from_millis(10));
        let renewal = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(tick);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                leases.renew_due().await;
            }
        });
        let leases = Arc::clone(self);
        let check = (self.ttl / 20).max(Duration::from_millis(10));
        tokio::spawn(async move {
            // Aborting this task drops the guard, which stops the renewals too.
            let _renewal = AbortOnDrop(renewal);
            let mut ticker = tokio::time::interval(check);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                leases.expire_overdue();
            }
        })
    }

    /// Claims one orphaned session (suspended after its owner died or drained), if any and if
    /// there is capacity; the caller loads it under the returned lease.
    pub async fn adopt_next(&self) -> Result<Option<ExecutionLease>, StoreError> {
        let sent = Instant::now();
        let claim = self.store.claim_session(self.claim_request(None)).await?;
        let Some(claim) = claim else {
            return Ok(None);
        };
        let tenant_id = claim.route.tenant_id.clone();
        self.hold(&tenant_id, &claim.lease, sent);
        if let Err(error) = self.start_running(&tenant_id, &claim.lease).await {
            self.release(&tenant_id, &claim.lease, false).await;
            return Err(error);
        }
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
        self.deadlines().clear();
        for ((tenant, _), lease) in leases {
            if let Err(error) = self.store.handoff_session(&tenant, &lease, None).await {
                tracing::warn!(error = %error, "handing a session off failed; its lease will expire");
            }
        }
    }
}

#[async_trait]
impl SessionLeases for WorkerLeases {
    /// Takes the session, waiting out a handoff: when another executor still holds it (it is
    /// draining and ending its requests, or it died and its lease has not run out yet), this tries
    /// again until the lease TTL has passed, by which time the claim's own sweep frees the route.
    async fn acquire(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<Option<ExecutionLease>, ProtocolError> {
        if self.held_lease(tenant_id, session_id).is_none() {
            // Once, not on every attempt: it lists the routes of every executor.
            self.check_tenant_cap(tenant_id, session_id).await?;
        }
        let deadline = tokio::time::Instant::now() + self.ttl + HANDOFF_MARGIN;
        loop {
            match self.try_acquire(tenant_id, session_id).await? {
                Attempt::Taken(lease) => return Ok(Some(lease)),
                Attempt::AtCapacity => return Err(executor_at_capacity()),
                Attempt::HeldElsewhere if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(HANDOFF_POLL).await;
                }
                Attempt::HeldElsewhere | Attempt::HeldByLiveExecutor => {
                    return Err(held_elsewhere());
                }
            }
        }
    }

    async fn release(&self, tenant_id: &str, lease: &ExecutionLease, closed: bool) {
        let key = (tenant_id.to_owned(), lease.session_id.clone());
        // The held copy carries the latest renewal; a newer lease on the same session (taken
        // after this one ran out) stays held.
        let current = {
            let mut held = self.held();
            match held.get(&key) {
                Some(current) if current.lease_id == lease.lease_id => held.remove(&key),
                _ => None,
            }
        }
        .unwrap_or_else(|| lease.clone());
        self.forget_deadline(&lease.lease_id);
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

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests;
