//! Execution leases with fencing tokens (docs/storage.md §4.1) in `execution_leases`, one row per
//! session. Every change holds the session's execution lock and the row lock, and decides with
//! the shared rules; a renewal or release also updates the route held under the same fence.

use async_trait::async_trait;

use super::rows::{LeaseRow, put_lease_row};
use super::{PostgresStore, Tx, db_error, lock_session, to_i64};
use crate::error::StoreResult;
use crate::model::{AcquireLease, ExecutionLease};
use crate::ports::ExecutionLeases;
use crate::rules::{
    already_released, lease_lost, lease_matches, plan_acquire, validate_acquire, validate_lease_ttl,
};

/// Marks the session's lease row released unless it already is.
pub(super) async fn release_lease_row(
    tx: &mut Tx,
    tenant_id: &str,
    session_id: &str,
    now: u64,
) -> StoreResult<()> {
    sqlx::query(
        "UPDATE execution_leases SET released_at_ms = $3 \
         WHERE tenant_id = $1 AND session_id = $2 AND released_at_ms IS NULL",
    )
    .bind(tenant_id)
    .bind(session_id)
    .bind(to_i64(now))
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Renews the current, active lease and moves the expiry of the route held under it (§4.1).
pub(super) async fn renew_in(
    tx: &mut Tx,
    tenant_id: &str,
    lease: &ExecutionLease,
    ttl_ms: u64,
    now: u64,
) -> StoreResult<ExecutionLease> {
    let session_id = &lease.session_id;
    let row = lock_session(tx, tenant_id, session_id).await?;
    if !lease_matches(row.as_ref(), lease, true, now) {
        return Err(lease_lost(&lease.lease_id, session_id));
    }
    let Some(mut renewed) = row else {
        return Err(lease_lost(&lease.lease_id, session_id));
    };
    renewed.renewed_at_ms = now;
    renewed.expires_at_ms = now.saturating_add(ttl_ms);
    put_lease_row(tx, tenant_id, &renewed).await?;
    sqlx::query(
        "UPDATE session_routes SET lease_expires_at_ms = $5, updated_at_ms = $6 \
         WHERE tenant_id = $1 AND session_id = $2 AND lease_id = $3 AND fencing_token = $4",
    )
    .bind(tenant_id)
    .bind(session_id)
    .bind(&renewed.lease_id)
    .bind(to_i64(renewed.fencing_token))
    .bind(to_i64(renewed.expires_at_ms))
    .bind(to_i64(now))
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(renewed)
}

#[async_trait]
impl ExecutionLeases for PostgresStore {
    async fn requires_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<bool> {
        Ok(self
            .get_execution_lease(tenant_id, session_id)
            .await?
            .is_some())
    }

    async fn acquire_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
        request: AcquireLease,
    ) -> StoreResult<ExecutionLease> {
        self.retrying_conflicts(|| {
            self.acquire_execution_lease_once(tenant_id, session_id, request.clone())
        })
        .await
    }

    async fn renew_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<ExecutionLease> {
        self.retrying_conflicts(|| self.renew_execution_lease_once(tenant_id, lease, ttl_ms))
            .await
    }

    async fn assert_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        let row = self
            .get_execution_lease(tenant_id, &lease.session_id)
            .await?;
        if lease_matches(row.as_ref(), lease, true, self.now()) {
            Ok(())
        } else {
            Err(lease_lost(&lease.lease_id, &lease.session_id))
        }
    }

    async fn release_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        self.retrying_conflicts(|| self.release_execution_lease_once(tenant_id, lease))
            .await
    }

    async fn get_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<ExecutionLease>> {
        self.ensure_open()?;
        let row: Option<LeaseRow> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT * FROM execution_leases WHERE tenant_id = $1 AND session_id = $2",
                )
                .bind(tenant_id)
                .bind(session_id)
                .fetch_optional(self.pool())
            })
            .await?;
        Ok(row.map(ExecutionLease::from))
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `acquire_execution_lease` (re-run whole on a deadlock).
    async fn acquire_execution_lease_once(
        &self,
        tenant_id: &str,
        session_id: &str,
        request: AcquireLease,
    ) -> StoreResult<ExecutionLease> {
        validate_acquire(session_id, &request)?;
        let mut tx = self.begin().await?;
        let now = self.now();
        let row = lock_session(&mut tx, tenant_id, session_id).await?;
        let route = super::rows::load_route(&mut tx, tenant_id, session_id, true).await?;
        let route_token = route.map_or(0, |r| r.fencing_token);
        let lease = plan_acquire(row.as_ref(), route_token, session_id, request, now)?;
        put_lease_row(&mut tx, tenant_id, &lease).await?;
        self.commit(tx).await?;
        Ok(lease)
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `renew_execution_lease` (re-run whole on a deadlock).
    async fn renew_execution_lease_once(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<ExecutionLease> {
        validate_lease_ttl(ttl_ms)?;
        let mut tx = self.begin().await?;
        let now = self.now();
        let renewed = renew_in(&mut tx, tenant_id, lease, ttl_ms, now).await?;
        self.commit(tx).await?;
        Ok(renewed)
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `release_execution_lease` (re-run whole on a deadlock).
    async fn release_execution_lease_once(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()> {
        let session_id = &lease.session_id;
        let mut tx = self.begin().await?;
        let now = self.now();
        let row = lock_session(&mut tx, tenant_id, session_id).await?;
        if already_released(row.as_ref(), lease) {
            return Ok(());
        }
        if !lease_matches(row.as_ref(), lease, false, now) {
            return Err(lease_lost(&lease.lease_id, session_id));
        }
        release_lease_row(&mut tx, tenant_id, session_id, now).await?;
        // A released lease hands its active route back: suspended, ownership cleared (§4.1).
        sqlx::query(
            "UPDATE session_routes SET state = 'suspended', worker_id = NULL, lease_id = NULL, \
             lease_expires_at_ms = NULL, updated_at_ms = $5 \
             WHERE tenant_id = $1 AND session_id = $2 AND lease_id = $3 AND fencing_token = $4 \
             AND state IN ('provisioning', 'running', 'waiting_approval')",
        )
        .bind(tenant_id)
        .bind(session_id)
        .bind(&lease.lease_id)
        .bind(to_i64(lease.fencing_token))
        .bind(to_i64(now))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        self.commit(tx).await
    }
}
