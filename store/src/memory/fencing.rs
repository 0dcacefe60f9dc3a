//! Execution leases and fencing (storage.md §4.1, §4.2).
//!
//! A session has at most one lease row, overwritten by every acquire; each new holder gets a
//! higher fencing token, so an old fence can never match again. Every fenced write (agent event
//! batches, transcript writes, durable appends, route changes) checks the row under the same
//! state lock as the write itself.

use async_trait::async_trait;

use super::state::{Scope, State, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::journal::JournalEntry;
use crate::model::{AcquireLease, ExecutionFence, ExecutionLease, MAX_LEASE_TTL_MS};
use crate::ports::ExecutionLeases;

/// The largest fencing token (the reference's safe-integer limit).
const MAX_FENCING_TOKEN: u64 = (1 << 53) - 1;

pub(super) fn lease_lost(lease_id: &str, session_id: &str) -> StoreError {
    StoreError::runtime(
        RuntimeErrorCode::LeaseLost,
        format!("Execution lease {lease_id} is not active for Session {session_id}"),
    )
}

fn lease_invalid(message: &str) -> StoreError {
    StoreError::runtime(RuntimeErrorCode::LeaseInvalid, message)
}

/// TTLs of leases, claims and worker heartbeats: 1 ms ..= 24 h, else `code`.
pub(super) fn check_ttl(ttl_ms: u64, code: RuntimeErrorCode, subject: &str) -> StoreResult<()> {
    if (1..=MAX_LEASE_TTL_MS).contains(&ttl_ms) {
        return Ok(());
    }
    Err(StoreError::runtime(
        code,
        format!("{subject} TTL must be between 1 and {MAX_LEASE_TTL_MS} ms"),
    ))
}

pub(super) fn validate_ttl(ttl_ms: u64) -> StoreResult<()> {
    check_ttl(ttl_ms, RuntimeErrorCode::LeaseInvalid, "Execution lease")
}

impl ExecutionLease {
    /// Not released and not yet expired.
    pub(super) fn is_active(&self, now: u64) -> bool {
        self.released_at_ms.is_none() && self.expires_at_ms > now
    }
}

impl State {
    /// The fencing rule of storage.md §4.2 for a write to `key`'s session.
    pub(super) fn check_fence(
        &self,
        key: &Scope,
        fence: Option<&ExecutionFence>,
        now: u64,
    ) -> StoreResult<()> {
        let row = self.execution_leases.get(key);
        match (row, fence) {
            (None, None) => Ok(()),
            (None, Some(fence)) => Err(lease_lost(&fence.lease_id, &key.1)),
            (Some(row), None) => {
                let holder = if row.is_active(now) {
                    format!(
                        " (held by {} with fencing token {})",
                        row.owner_id, row.fencing_token
                    )
                } else {
                    String::new()
                };
                Err(StoreError::runtime(
                    RuntimeErrorCode::LeaseRequired,
                    format!("Session {} requires an execution lease{holder}", key.1),
                ))
            }
            (Some(row), Some(fence)) => {
                let matches = row.lease_id == fence.lease_id
                    && row.fencing_token == fence.fencing_token
                    && row.is_active(now);
                if matches {
                    Ok(())
                } else {
                    Err(lease_lost(&fence.lease_id, &key.1))
                }
            }
        }
    }

    /// Whether `lease` is the session's current lease: same id, token and owner, not released,
    /// and (when `require_active`) not expired.
    pub(super) fn lease_matches(
        &self,
        key: &Scope,
        lease: &ExecutionLease,
        require_active: bool,
        now: u64,
    ) -> bool {
        self.execution_leases.get(key).is_some_and(|row| {
            row.lease_id == lease.lease_id
                && row.fencing_token == lease.fencing_token
                && row.owner_id == lease.owner_id
                && row.released_at_ms.is_none()
                && (!require_active || row.expires_at_ms > now)
        })
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
        let next = lease_token.max(route_token) + 1;
        if next > MAX_FENCING_TOKEN {
            return Err(lease_invalid(
                "Execution lease fencing tokens are exhausted",
            ));
        }
        Ok(next)
    }

    fn acquire_lease(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        request: AcquireLease,
    ) -> StoreResult<ExecutionLease> {
        if let Some(row) = self
            .execution_leases
            .get(key)
            .filter(|r| r.is_active(cx.now))
        {
            if row.lease_id != request.lease_id || row.owner_id != request.owner_id {
                return Err(StoreError::runtime(
                    RuntimeErrorCode::LeaseConflict,
                    format!(
                        "Session {} has an active execution lease held by {} with fencing token {}",
                        key.1, row.owner_id, row.fencing_token
                    ),
                ));
            }
            // The same holder asking again (e.g. after an uncertain timeout): same token.
            let mut renewed = row.clone();
            renewed.renewed_at_ms = cx.now;
            renewed.expires_at_ms = cx.now.saturating_add(request.ttl_ms);
            self.put_lease_row(cx, key, renewed.clone());
            return Ok(renewed);
        }
        let lease = ExecutionLease {
            session_id: key.1.clone(),
            lease_id: request.lease_id,
            owner_id: request.owner_id,
            fencing_token: self.next_fencing_token(key)?,
            acquired_at_ms: cx.now,
            renewed_at_ms: cx.now,
            expires_at_ms: cx.now.saturating_add(request.ttl_ms),
            released_at_ms: None,
        };
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
        let already_released = self.execution_leases.get(key).is_some_and(|row| {
            row.released_at_ms.is_some()
                && row.lease_id == lease.lease_id
                && row.fencing_token == lease.fencing_token
        });
        if already_released {
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

fn validate_acquire(session_id: &str, request: &AcquireLease) -> StoreResult<()> {
    if session_id.trim().is_empty()
        || request.lease_id.trim().is_empty()
        || request.owner_id.trim().is_empty()
    {
        return Err(lease_invalid(
            "Execution lease session, lease and owner ids must not be blank",
        ));
    }
    validate_ttl(request.ttl_ms)
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
