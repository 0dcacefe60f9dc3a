//! Taking a session's route for a command: reuse a lease this executor already holds, else claim
//! the route, and say precisely why when it cannot be claimed (another executor still holds it, or
//! this one is full) instead of one catch-all refusal.

use std::time::Duration;

use agent_runtime::protocol::{ErrorCode, ProtocolError};
use agent_runtime_store::{
    EnqueueOptions, ExecutionLease, RouteState, RouteTransition, SessionRoute, StoreError,
    WorkerStatus,
};

use super::WorkerLeases;

/// How long past the lease TTL a command waits for another executor to let go of its session.
pub(super) const HANDOFF_MARGIN: Duration = Duration::from_secs(1);
/// How often a waiting command tries the claim again.
pub(super) const HANDOFF_POLL: Duration = Duration::from_millis(100);

/// The outcome of one claim attempt.
pub(super) enum Attempt {
    Taken(ExecutionLease),
    /// Another executor's lease is still on the route: it is handing the session off, or its
    /// lease has not run out yet.
    HeldElsewhere,
    /// A live executor that is not draining holds the route and keeps renewing it: waiting for
    /// its lease would only delay the refusal (the command was routed by an owner read before
    /// the session moved, e.g. the gateway's route cache), so the command is refused at once;
    /// the gateway forgets that owner and the retry reaches the holder.
    HeldByLiveExecutor,
    /// The route is free but this executor runs as many sessions as its capacity allows.
    AtCapacity,
}

impl WorkerLeases {
    /// One attempt. A session this executor already holds (adoption may have taken it a moment
    /// ago) is reused rather than claimed a second time.
    pub(super) async fn try_acquire(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<Attempt, ProtocolError> {
        if let Some(lease) = self.held_lease(tenant_id, session_id) {
            return Ok(Attempt::Taken(lease));
        }
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
        let sent = tokio::time::Instant::now();
        let claim = self
            .store
            .claim_session(self.claim_request(Some((tenant_id, session_id))))
            .await
            .map_err(|e| unavailable(&e))?;
        let Some(claim) = claim else {
            if let Some(lease) = self.held_lease(tenant_id, session_id) {
                return Ok(Attempt::Taken(lease));
            }
            return self.why_unclaimed(tenant_id, session_id).await;
        };
        // Held (so renewed) from the claim on; a failed transition hands the route back at once.
        self.hold(tenant_id, &claim.lease, sent);
        if let Err(error) = self.start_running(tenant_id, &claim.lease).await {
            super::SessionLeases::release(self, tenant_id, &claim.lease, false).await;
            return Err(unavailable(&error));
        }
        Ok(Attempt::Taken(claim.lease))
    }

    /// Moves a freshly claimed route from provisioning to running.
    pub(super) async fn start_running(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> Result<SessionRoute, StoreError> {
        self.store
            .transition_session(
                tenant_id,
                lease,
                RouteTransition {
                    expected_state: Some(RouteState::Provisioning),
                    state: RouteState::Running,
                    metadata: None,
                    failure: None,
                },
            )
            .await
    }

    /// Why a claim of a known session came back empty, from its route as it is now. A route
    /// owned by this executor but not held yet is being adopted: the next attempt finds it held.
    async fn why_unclaimed(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<Attempt, ProtocolError> {
        let route = self
            .store
            .get_session_route(tenant_id, session_id)
            .await
            .map_err(|e| unavailable(&e))?;
        let free = route.as_ref().is_some_and(|route| {
            route.worker_id.is_none()
                && matches!(route.state, RouteState::Queued | RouteState::Suspended)
        });
        if free {
            return Ok(Attempt::AtCapacity);
        }
        let holder = route.and_then(|route| route.worker_id);
        if let Some(holder) = holder.filter(|holder| *holder != self.worker_id)
            && self.is_live_and_active(&holder).await
        {
            return Ok(Attempt::HeldByLiveExecutor);
        }
        Ok(Attempt::HeldElsewhere)
    }

    /// Whether `worker_id` is registered active (not draining) and its heartbeat lease runs.
    async fn is_live_and_active(&self, worker_id: &str) -> bool {
        match self.store.get_worker(worker_id).await {
            Ok(Some(worker)) => {
                worker.status == WorkerStatus::Active
                    && worker.lease_expires_at_ms > self.clock.now_ms()
            }
            // Unknown or unreadable: wait for its lease to run out.
            Ok(None) | Err(_) => false,
        }
    }

    /// Sessions of `tenant_id` held anywhere in the cluster (routes owned by any worker, under a
    /// lease that has not run out), other than `session_id` itself. Best effort: two executors
    /// loading at the same instant may both pass, so the cap can be exceeded by the number of
    /// concurrent loads.
    pub(super) async fn check_tenant_cap(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<(), ProtocolError> {
        let held = self
            .store
            .count_held_sessions(tenant_id, session_id, self.clock.now_ms())
            .await
            .map_err(|e| unavailable(&e))?;
        if held >= self.session_caps.for_tenant(tenant_id) as u64 {
            return Err(ProtocolError::session_limit());
        }
        Ok(())
    }
}

/// Another executor kept the session past the wait: the client may retry.
pub(super) fn held_elsewhere() -> ProtocolError {
    ProtocolError::new(
        ErrorCode::Overloaded,
        "The Session is still held by another executor",
    )
    .with_retry_after_ms(1000)
}

/// This executor is full; a retry may be routed to another one.
pub(super) fn executor_at_capacity() -> ProtocolError {
    ProtocolError::new(ErrorCode::Overloaded, "Executor capacity exceeded")
        .with_retry_after_ms(1000)
}

fn unavailable(error: &StoreError) -> ProtocolError {
    tracing::warn!(error = %error, "taking a session lease failed");
    ProtocolError::internal()
}
