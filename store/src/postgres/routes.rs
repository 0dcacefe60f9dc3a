//! Session routes (docs/storage.md §4.4) and the recovery sweep (§4.6).
//!
//! Every route change holds the session's execution lock, then locks the lease row, then the
//! route row, and decides with the shared rules. The sweep updates workers, then leases, then
//! routes — the same row order — under one global advisory lock so that two sweeps never
//! deadlock each other.

use std::collections::BTreeMap;

use agent_runtime::protocol::JsonObject;
use async_trait::async_trait;
use sqlx::types::Json;

use super::leases::{release_lease_row, renew_in};
use super::rows::{RouteRow, load_route, put_lease_row, put_route_row};
use super::workers::lock_worker;
use super::{PostgresStore, db_error, lock_session, to_i64, to_u64};
use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::model::{
    ClaimSession, EnqueueOptions, ExecutionLease, RecoveryCounts, RouteClaim, RouteTransition,
    SWEEP_ABANDON_REASON, SessionRoute, WorkerStatus,
};
use crate::ports::SessionRoutes;
use crate::rules::{
    check_route_ids, claimed_route, handoff_transition, lease_lost, next_fencing_token,
    plan_enqueue, plan_route_change, route_not_found, sweep_failure, validate_claim_session,
    validate_lease_ttl, validate_settle,
};

/// How many candidates one claim examines (the reference's `LIMIT 16`).
const CLAIM_CANDIDATES: i64 = 16;

/// Key of the transaction-scoped lock that serialises recovery sweeps.
const SWEEP_LOCK_KEY: i64 = 0x6167_656e_7473_7765; // "agentswe"

const ACTIVE_STATES: &str = "('provisioning', 'running', 'waiting_approval')";

impl PostgresStore {
    /// §4.6 in one transaction. `abandon_sealed_after_ms` is `None` for the sweep before a claim.
    async fn sweep(&self, abandon_sealed_after_ms: Option<u64>) -> StoreResult<RecoveryCounts> {
        let mut tx = self.begin().await?;
        let now = to_i64(self.now());
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SWEEP_LOCK_KEY)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let offline_workers = sqlx::query(
            "UPDATE workers SET status = 'offline' \
             WHERE status <> 'offline' AND lease_expires_at_ms <= $1",
        )
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        let released_leases = sqlx::query(
            "UPDATE execution_leases l SET released_at_ms = $1 \
             WHERE released_at_ms IS NULL AND (expires_at_ms <= $1 OR EXISTS ( \
               SELECT 1 FROM workers w WHERE w.worker_id = l.owner_id AND w.status = 'offline'))",
        )
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        let suspended_sessions = sqlx::query(&format!(
            "UPDATE session_routes r SET state = 'suspended', worker_id = NULL, lease_id = NULL, \
             lease_expires_at_ms = NULL, failure = COALESCE(failure, $2), updated_at_ms = $1 \
             WHERE state IN {ACTIVE_STATES} AND (lease_expires_at_ms IS NULL \
               OR lease_expires_at_ms <= $1 OR EXISTS (SELECT 1 FROM workers w \
               WHERE w.worker_id = r.worker_id AND w.status = 'offline'))"
        ))
        .bind(now)
        .bind(Json(sweep_failure()))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        let mut abandoned_commands = 0;
        if let Some(window) = abandon_sealed_after_ms {
            // The window runs from sealing; computed in Rust so a huge window cannot overflow.
            let cutoff = to_i64(to_u64(now).saturating_sub(window));
            abandoned_commands = sqlx::query(
                "UPDATE commands SET status = 'abandoned', abandon_reason = $2, \
                 updated_at_ms = $1 WHERE status = 'sealed' AND result IS NULL \
                 AND COALESCE(sealed_at_ms, 0) <= $3",
            )
            .bind(now)
            .bind(SWEEP_ABANDON_REASON)
            .bind(cutoff)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected();
        }
        self.commit(tx).await?;
        Ok(RecoveryCounts {
            offline_workers,
            released_leases,
            suspended_sessions,
            abandoned_commands,
        })
    }

    /// The shared algorithm of transition, settle and handoff (§4.4).
    async fn route_change(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
        allow_replay: bool,
    ) -> StoreResult<SessionRoute> {
        self.retrying_conflicts(|| {
            self.route_change_once(tenant_id, lease, transition.clone(), allow_replay)
        })
        .await
    }

    /// One attempt of `route_change` (re-run whole on a deadlock).
    async fn route_change_once(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
        allow_replay: bool,
    ) -> StoreResult<SessionRoute> {
        let session_id = &lease.session_id;
        let mut tx = self.begin().await?;
        let now = self.now();
        let lease_row = lock_session(&mut tx, tenant_id, session_id).await?;
        let current = load_route(&mut tx, tenant_id, session_id, true).await?;
        let change = plan_route_change(
            current.as_ref(),
            lease_row.as_ref(),
            lease,
            transition,
            allow_replay,
            now,
        )?;
        if change.release_lease {
            release_lease_row(&mut tx, tenant_id, session_id, now).await?;
        }
        put_route_row(&mut tx, &change.route).await?;
        self.commit(tx).await?;
        Ok(change.route)
    }
}

#[async_trait]
impl SessionRoutes for PostgresStore {
    async fn enqueue_session(
        &self,
        tenant_id: &str,
        session_id: &str,
        options: EnqueueOptions,
    ) -> StoreResult<SessionRoute> {
        self.retrying_conflicts(|| {
            self.enqueue_session_once(tenant_id, session_id, options.clone())
        })
        .await
    }

    async fn claim_session(&self, request: ClaimSession) -> StoreResult<Option<RouteClaim>> {
        self.retrying_conflicts(|| self.claim_session_once(request.clone()))
            .await
    }

    async fn transition_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        self.route_change(tenant_id, lease, transition, false).await
    }

    async fn settle_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        validate_settle(&transition)?;
        self.route_change(tenant_id, lease, transition, true).await
    }

    async fn handoff_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        metadata: Option<JsonObject>,
    ) -> StoreResult<SessionRoute> {
        self.route_change(tenant_id, lease, handoff_transition(metadata), true)
            .await
    }

    async fn renew_session_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<RouteClaim> {
        self.retrying_conflicts(|| self.renew_session_lease_once(tenant_id, lease, ttl_ms))
            .await
    }

    // Stays whole: one transaction renewing every lease of a worker.
    async fn renew_session_leases(
        &self,
        leases: &[(String, ExecutionLease)],
        ttl_ms: u64,
    ) -> StoreResult<Vec<StoreResult<ExecutionLease>>> {
        validate_lease_ttl(ttl_ms)?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let expires = now.saturating_add(ttl_ms);
        let column = |pick: fn(&(String, ExecutionLease)) -> String| -> Vec<String> {
            leases.iter().map(pick).collect()
        };
        let tenants = column(|(tenant, _)| tenant.clone());
        let sessions = column(|(_, lease)| lease.session_id.clone());
        let lease_ids = column(|(_, lease)| lease.lease_id.clone());
        let owners = column(|(_, lease)| lease.owner_id.clone());
        let tokens: Vec<i64> = leases
            .iter()
            .map(|(_, l)| to_i64(l.fencing_token))
            .collect();
        // Row locks (leases, then routes: the order every route change takes) make this safe
        // against a concurrent claim without the per-session execution locks: a lease that was
        // released, expired or taken over in the meantime no longer matches and is not renewed.
        let mut tx = self.begin().await?;
        let renewed: Vec<(String, String, String, bool)> = sqlx::query_as(
            "WITH asked AS ( \
               SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) \
                 AS a(tenant_id, session_id, lease_id, owner_id, fencing_token)), \
             renewed AS ( \
               UPDATE execution_leases l SET renewed_at_ms = $6, expires_at_ms = $7 FROM asked a \
               WHERE l.tenant_id = a.tenant_id AND l.session_id = a.session_id \
                 AND l.lease_id = a.lease_id AND l.owner_id = a.owner_id \
                 AND l.fencing_token = a.fencing_token AND l.released_at_ms IS NULL \
                 AND l.expires_at_ms > $6 \
               RETURNING l.tenant_id, l.session_id, l.lease_id, l.fencing_token), \
             routed AS ( \
               UPDATE session_routes r SET lease_expires_at_ms = $7, updated_at_ms = $6 \
               FROM renewed n WHERE r.tenant_id = n.tenant_id AND r.session_id = n.session_id \
                 AND r.lease_id = n.lease_id AND r.fencing_token = n.fencing_token \
               RETURNING r.tenant_id, r.session_id) \
             SELECT n.tenant_id, n.session_id, n.lease_id, EXISTS (SELECT 1 FROM session_routes r \
               WHERE r.tenant_id = n.tenant_id AND r.session_id = n.session_id) \
             FROM renewed n",
        )
        .bind(&tenants)
        .bind(&sessions)
        .bind(&lease_ids)
        .bind(&owners)
        .bind(&tokens)
        .bind(to_i64(now))
        .bind(to_i64(expires))
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        self.commit(tx).await?;
        // Keyed by lease too: a stale lease and its successor name the same session.
        let renewed: std::collections::HashMap<(String, String, String), bool> = renewed
            .into_iter()
            .map(|(tenant, session, lease_id, routed)| ((tenant, session, lease_id), routed))
            .collect();
        Ok(leases
            .iter()
            .map(|(tenant, lease)| {
                let key = (
                    tenant.clone(),
                    lease.session_id.clone(),
                    lease.lease_id.clone(),
                );
                match renewed.get(&key) {
                    Some(true) => Ok(ExecutionLease {
                        renewed_at_ms: now,
                        expires_at_ms: expires,
                        ..lease.clone()
                    }),
                    Some(false) => Err(route_not_found(&lease.session_id)),
                    None => Err(lease_lost(&lease.lease_id, &lease.session_id)),
                }
            })
            .collect())
    }

    async fn get_session_route(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRoute>> {
        self.ensure_open()?;
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        load_route(&mut conn, tenant_id, session_id, false).await
    }

    async fn count_worker_sessions(&self) -> StoreResult<BTreeMap<String, u64>> {
        self.ensure_open()?;
        let rows: Vec<(String, i64)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT worker_id, count(*) FROM session_routes \
                     WHERE worker_id IS NOT NULL GROUP BY worker_id",
                )
                .fetch_all(self.pool())
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|(worker, count)| (worker, to_u64(count)))
            .collect())
    }

    async fn count_held_sessions(
        &self,
        tenant_id: &str,
        except_session_id: &str,
        now_ms: u64,
    ) -> StoreResult<u64> {
        self.ensure_open()?;
        let sql = format!(
            "SELECT count(*) FROM session_routes \
             WHERE tenant_id = $1 AND session_id <> $2 AND worker_id IS NOT NULL \
               AND state IN {ACTIVE_STATES} AND lease_expires_at_ms > $3"
        );
        let held: i64 = self
            .reading(|| {
                sqlx::query_scalar(&sql)
                    .bind(tenant_id)
                    .bind(except_session_id)
                    .bind(to_i64(now_ms))
                    .fetch_one(self.pool())
            })
            .await?;
        Ok(to_u64(held))
    }

    async fn list_worker_sessions(&self, worker_id: &str) -> StoreResult<Vec<SessionRoute>> {
        self.ensure_open()?;
        let rows: Vec<RouteRow> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT * FROM session_routes WHERE worker_id = $1 \
             ORDER BY updated_at_ms, tenant_id, session_id",
                )
                .bind(worker_id)
                .fetch_all(self.pool())
            })
            .await?;
        rows.into_iter().map(SessionRoute::try_from).collect()
    }

    async fn recover_expired_work(
        &self,
        abandon_sealed_after_ms: u64,
    ) -> StoreResult<RecoveryCounts> {
        self.retrying_conflicts(|| self.sweep(Some(abandon_sealed_after_ms)))
            .await
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `claim_session` (re-run whole on a deadlock).
    async fn claim_session_once(&self, request: ClaimSession) -> StoreResult<Option<RouteClaim>> {
        validate_claim_session(&request)?;
        self.sweep(None).await?;
        let mut tx = self.begin().await?;
        let now = self.now();
        // The worker row lock serialises the claims of one worker, so its capacity holds.
        let Some(worker) = lock_worker(&mut tx, &request.owner_id).await? else {
            return Err(StoreError::runtime(
                RuntimeErrorCode::WorkerNotFound,
                format!("Worker {} is not registered", request.owner_id),
            ));
        };
        if worker.status != WorkerStatus::Active || worker.lease_expires_at_ms <= now {
            return Err(StoreError::runtime(
                RuntimeErrorCode::WorkerUnavailable,
                format!(
                    "Worker {} is draining or its heartbeat expired",
                    request.owner_id
                ),
            ));
        }
        let (running,): (i64,) = sqlx::query_as(&format!(
            "SELECT COUNT(*) FROM session_routes WHERE worker_id = $1 \
             AND state IN {ACTIVE_STATES} AND lease_expires_at_ms > $2"
        ))
        .bind(&request.owner_id)
        .bind(to_i64(now))
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
        if to_u64(running) >= u64::from(worker.capacity) {
            return Ok(None);
        }
        let candidates: Vec<RouteRow> = sqlx::query_as(
            "SELECT * FROM session_routes r \
             WHERE (state = 'suspended' OR (state = 'queued' AND NOT $5)) \
             AND worker_id IS NULL AND ($1::text IS NULL OR tenant_id = $1) \
             AND ($2::text IS NULL OR session_id = $2) \
             AND NOT EXISTS (SELECT 1 FROM execution_leases l WHERE l.tenant_id = r.tenant_id \
               AND l.session_id = r.session_id AND l.released_at_ms IS NULL \
               AND l.expires_at_ms > $3) \
             ORDER BY priority DESC, queued_at_ms ASC, tenant_id ASC, session_id ASC LIMIT $4",
        )
        .bind(&request.tenant_id)
        .bind(&request.session_id)
        .bind(to_i64(now))
        .bind(CLAIM_CANDIDATES)
        .bind(request.orphans_only)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        for candidate in candidates {
            let (tenant_id, session_id) = (candidate.tenant_id, candidate.session_id);
            let lease_row = lock_session(&mut tx, &tenant_id, &session_id).await?;
            // Re-read under the locks: another worker may have claimed it meanwhile.
            let Some(route) = load_route(&mut tx, &tenant_id, &session_id, true).await? else {
                continue;
            };
            let claimable = crate::rules::claimable_state(route.state, request.orphans_only)
                && route.worker_id.is_none()
                && !lease_row.as_ref().is_some_and(|l| l.is_active(now));
            if !claimable {
                continue;
            }
            let lease_token = lease_row.as_ref().map_or(0, |l| l.fencing_token);
            let token = next_fencing_token(lease_token, route.fencing_token)?;
            let (route, lease) = claimed_route(&route, &request, token, now);
            put_lease_row(&mut tx, &tenant_id, &lease).await?;
            put_route_row(&mut tx, &route).await?;
            self.commit(tx).await?;
            return Ok(Some(RouteClaim { route, lease }));
        }
        Ok(None)
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `enqueue_session` (re-run whole on a deadlock).
    async fn enqueue_session_once(
        &self,
        tenant_id: &str,
        session_id: &str,
        options: EnqueueOptions,
    ) -> StoreResult<SessionRoute> {
        check_route_ids(tenant_id, session_id)?;
        let mut tx = self.begin().await?;
        let now = self.now();
        let lease_row = lock_session(&mut tx, tenant_id, session_id).await?;
        let existing = load_route(&mut tx, tenant_id, session_id, true).await?;
        let (route, release_stale) = plan_enqueue(
            tenant_id,
            session_id,
            existing.as_ref(),
            lease_row.as_ref(),
            options,
            now,
        )?;
        if release_stale {
            release_lease_row(&mut tx, tenant_id, session_id, now).await?;
        }
        put_route_row(&mut tx, &route).await?;
        self.commit(tx).await?;
        Ok(route)
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `renew_session_lease` (re-run whole on a deadlock).
    async fn renew_session_lease_once(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<RouteClaim> {
        validate_lease_ttl(ttl_ms)?;
        let session_id = &lease.session_id;
        let mut tx = self.begin().await?;
        let now = self.now();
        if load_route(&mut tx, tenant_id, session_id, false)
            .await?
            .is_none()
        {
            return Err(route_not_found(session_id));
        }
        let lease = renew_in(&mut tx, tenant_id, lease, ttl_ms, now).await?;
        let Some(route) = load_route(&mut tx, tenant_id, session_id, false).await? else {
            return Err(route_not_found(session_id));
        };
        self.commit(tx).await?;
        Ok(RouteClaim { route, lease })
    }
}
