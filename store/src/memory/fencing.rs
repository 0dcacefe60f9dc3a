//! Execution leases and fencing (docs/storage.md §4.1, §4.2).
//!
//! A session has at most one lease row, overwritten by every acquire; each new holder gets a
//! higher fencing token, so an old fence can never match again. Every fenced write (agent event
//! batches, transcript writes, durable appends, route changes) checks the row under the same
//! state lock as the write itself.

use async_trait::async_trait;

use super::state::{Scope, State, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::StoreResult;
use crate::journal::JournalEntry;
use crate::model::{AcquireLease, ExecutionFence, ExecutionLease};
use crate::ports::ExecutionLeases;
use crate::rules::{
    already_released, check_fence, lease_lost, lease_matches, next_fencing_token, plan_acquire,
    validate_acquire, validate_lease_ttl as validate_ttl,
};

impl State {
    /// The fencing rule of docs/storage.md §4.2 for a write to `key`'s session.
    pub(super) fn check_fence(
        &self,
        key: &Scope,
        fence: Option<&ExecutionFence>,
        now: u64,
    ) -> StoreResult<()> {
        check_fence(self.execution_leases.get(key), fence, &key.1, now)
    }

    /// Whether `lease` is the session's current lease (see [`lease_matches`]).
    pub(super) fn lease_matches(
        &self,
        key: &Scope,
        lease: &ExecutionLease,
        require_active: bool,
        now: u64,
    ) -> bool {
        lease_matches(self.execution_leases.get(key), lease, require_active, now)
    }

    /// Marks the session's lease row released (if it is not already) and journals it.
    pub(super) fn release_lease_row(&mut self, cx: &mut Ctx<'_>, key: &Scope) -> bool {
        let Some(row) = self.execution_leases.get_mut(key) else {
            return false;
        };
        if row.released_at_ms.is_some() {
            return false;
        }
        row.released_at_ms = Some(cx.now);
        let lease = row.clone();
        cx.record(JournalEntry::ExecutionLease {
            tenant_id: key.0.clone(),
            lease,
        });
        true
    }

    /// Overwrites the session's lease row and journals it.
    pub(super) fn put_lease_row(&mut self, cx: &mut Ctx<'_>, key: &Scope, lease: ExecutionLease) {
        self.execution_leases.insert(key.clone(), lease.clone());
        cx.record(JournalEntry::ExecutionLease {
            tenant_id: key.0.clone(),
            lease,
        });
    }

    /// The fencing token after the current one of the session's lease row and route.
    pub(super) fn next_fencing_token(&self, key: &Scope) -> StoreResult<u64> {
        let lease_token = self
            .execution_leases
            .get(key)
            .map_or(0, |l| l.fencing_token);
        let route_token = self.routes.get(key).map_or(0, |r| r.fencing_token);
        next_fencing_token(lease_token, route_token)
    }

    fn acquire_lease(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        request: AcquireLease,
    ) -> StoreResult<ExecutionLease> {
        let route_token = self.routes.get(key).map_or(0, |r| r.fencing_token);
        let lease = plan_acquire(
            self.execution_leases.get(key),
            route_token,
            &key.1,
            request,
            cx.now,
        )?;
        self.put_lease_row(cx, key, lease.clone());
        Ok(lease)
    }

    /// Renews the current, active lease; also moves the route's lease expiry (§4.1).
    pub(super) fn renew_lease(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<ExecutionLease> {
        if !self.lease_matches(key, lease, true, cx.now) {
            return Err(lease_lost(&lease.lease_id, &key.1));
        }
        let expires = cx.now.saturating_add(ttl_ms);
        let mut renewed = self.execution_leases[key].clone();
        renewed.renewed_at_ms = cx.now;
        renewed.expires_at_ms = expires;
        self.put_lease_row(cx, key, renewed.clone());
        self.move_route_lease_expiry(cx, key, &renewed);
        Ok(renewed)
    }

    fn release_lease(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        if already_released(self.execution_leases.get(key), lease) {
            return Ok(());
        }
        if !self.lease_matches(key, lease, false, cx.now) {
            return Err(lease_lost(&lease.lease_id, &key.1));
        }
        self.release_lease_row(cx, key);
        self.suspend_route_of_released_lease(cx, key, lease);
        Ok(())
    }
}

#[async_trait]
impl<B: Backend> ExecutionLeases for StoreEngine<B> {
    async fn requires_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<bool> {
        self.read(|state, _| {
            Ok(state
                .execution_leases
                .contains_key(&scope(tenant_id, session_id)))
        })
    }

    async fn acquire_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
        request: AcquireLease,
    ) -> StoreResult<ExecutionLease> {
        validate_acquire(session_id, &request)?;
        self.write(|state, cx| state.acquire_lease(cx, &scope(tenant_id, session_id), request))
    }

    async fn renew_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<ExecutionLease> {
        validate_ttl(ttl_ms)?;
        self.write(|state, cx| {
            state.renew_lease(cx, &scope(tenant_id, &lease.session_id), lease, ttl_ms)
        })
    }

    async fn assert_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        self.read(|state, now| {
            let key = scope(tenant_id, &lease.session_id);
            if state.lease_matches(&key, lease, true, now) {
                Ok(())
            } else {
                Err(lease_lost(&lease.lease_id, &lease.session_id))
            }
        })
    }

    async fn release_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        self.write(|state, cx| state.release_lease(cx, &scope(tenant_id, &lease.session_id), lease))
    }

    async fn get_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<ExecutionLease>> {
        self.read(|state, _| {
            Ok(state
                .execution_leases
                .get(&scope(tenant_id, session_id))
                .cloned())
        })
    }
}
