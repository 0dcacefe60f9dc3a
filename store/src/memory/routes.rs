//! Session routes (docs/storage.md §4.4) and the recovery sweep (§4.6). Every route change runs
//! under the state lock together with the execution-lease check, like the reference's transaction
//! under the `execution:<tenant>:<session>` lock.

use std::collections::BTreeMap;

use agent_runtime::protocol::JsonObject;
use async_trait::async_trait;

use super::state::{Scope, State, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::journal::JournalEntry;
use crate::model::{
    ClaimSession, EnqueueOptions, ExecutionLease, RecoveryCounts, RouteClaim, RouteState,
    RouteTransition, SWEEP_ABANDON_REASON, SessionRoute, WorkerStatus,
};
use crate::ports::SessionRoutes;
use crate::rules::{
    check_route_ids, claimable_state, claimed_route, clear_ownership, handoff_transition,
    plan_enqueue, plan_route_change, route_not_found, sweep_failure, validate_claim_session,
    validate_lease_ttl as validate_ttl, validate_settle,
};

impl State {
    fn put_route(&mut self, cx: &mut Ctx<'_>, mut route: SessionRoute) -> SessionRoute {
        route.updated_at_ms = cx.now;
        let key = scope(&route.tenant_id, &route.session_id);
        self.routes.insert(key, route.clone());
        cx.record(JournalEntry::Route {
            route: route.clone(),
        });
        route
    }

    /// The session's route when it is held under exactly this lease (id and token).
    fn route_held_by(&self, key: &Scope, lease: &ExecutionLease) -> Option<SessionRoute> {
        self.routes
            .get(key)
            .filter(|route| {
                route.lease_id.as_deref() == Some(&lease.lease_id)
                    && route.fencing_token == lease.fencing_token
            })
            .cloned()
    }

    /// After a lease renewal, the route held under that lease expires with it.
    pub(super) fn move_route_lease_expiry(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        lease: &ExecutionLease,
    ) {
        if let Some(mut route) = self.route_held_by(key, lease) {
            route.lease_expires_at_ms = Some(lease.expires_at_ms);
            self.put_route(cx, route);
        }
    }

    /// A released lease hands its active route back: suspended, ownership cleared (§4.1).
    pub(super) fn suspend_route_of_released_lease(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        lease: &ExecutionLease,
    ) {
        let held = self.route_held_by(key, lease);
        if let Some(mut route) = held.filter(|route| route.state.is_active()) {
            route.state = RouteState::Suspended;
            clear_ownership(&mut route);
            self.put_route(cx, route);
        }
    }

    fn enqueue(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        options: EnqueueOptions,
    ) -> StoreResult<SessionRoute> {
        let (route, release_stale) = plan_enqueue(
            &key.0,
            &key.1,
            self.routes.get(key),
            self.execution_leases.get(key),
            options,
            cx.now,
        )?;
        if release_stale {
            self.release_lease_row(cx, key);
        }
        Ok(self.put_route(cx, route))
    }

    fn claim(
        &mut self,
        cx: &mut Ctx<'_>,
        request: ClaimSession,
    ) -> StoreResult<Option<RouteClaim>> {
        self.sweep(cx, None);
        let Some(worker) = self.workers.get(&request.owner_id) else {
            return Err(StoreError::runtime(
                RuntimeErrorCode::WorkerNotFound,
                format!("Worker {} is not registered", request.owner_id),
            ));
        };
        if worker.status != WorkerStatus::Active || worker.lease_expires_at_ms <= cx.now {
            return Err(StoreError::runtime(
                RuntimeErrorCode::WorkerUnavailable,
                format!(
                    "Worker {} is draining or its heartbeat expired",
                    request.owner_id
                ),
            ));
        }
        let running = self
            .routes
            .values()
            .filter(|r| r.worker_id.as_deref() == Some(request.owner_id.as_str()))
            .filter(|r| r.state.is_active())
            .filter(|r| r.lease_expires_at_ms.is_some_and(|at| at > cx.now))
            .count() as u64;
        if running >= u64::from(worker.capacity) {
            return Ok(None);
        }
        let mut candidates: Vec<&SessionRoute> = self
            .routes
            .values()
            .filter(|r| claimable_state(r.state, request.orphans_only))
            .filter(|r| r.worker_id.is_none())
            .filter(|r| request.tenant_id.as_ref().is_none_or(|t| *t == r.tenant_id))
            .filter(|r| {
                request
                    .session_id
                    .as_ref()
                    .is_none_or(|s| *s == r.session_id)
            })
            .filter(|r| {
                let key = scope(&r.tenant_id, &r.session_id);
                !self
                    .execution_leases
                    .get(&key)
                    .is_some_and(|l| l.is_active(cx.now))
            })
            .collect();
        candidates.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.queued_at_ms.cmp(&b.queued_at_ms))
                .then_with(|| a.tenant_id.cmp(&b.tenant_id))
                .then_with(|| a.session_id.cmp(&b.session_id))
        });
        let Some(chosen) = candidates.first() else {
            return Ok(None);
        };
        let key = scope(&chosen.tenant_id, &chosen.session_id);
        let fencing_token = self.next_fencing_token(&key)?;
        let (route, lease) = claimed_route(chosen, &request, fencing_token, cx.now);
        self.put_lease_row(cx, &key, lease.clone());
        let route = self.put_route(cx, route);
        Ok(Some(RouteClaim { route, lease }))
    }

    /// The shared algorithm of transition, settle and handoff (§4.4). `allow_replay` lets a
    /// settle or handoff repeated with the same, already released fence succeed again.
    fn change_route(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        lease: &ExecutionLease,
        change: RouteTransition,
        allow_replay: bool,
    ) -> StoreResult<SessionRoute> {
        let change = plan_route_change(
            self.routes.get(key),
            self.execution_leases.get(key),
            lease,
            change,
            allow_replay,
            cx.now,
        )?;
        if change.release_lease {
            self.release_lease_row(cx, key);
        }
        Ok(self.put_route(cx, change.route))
    }

    /// §4.6. `abandon_sealed_after_ms` is `None` for the sweep that precedes a claim.
    fn sweep(&mut self, cx: &mut Ctx<'_>, abandon_sealed_after_ms: Option<u64>) -> RecoveryCounts {
        let mut counts = RecoveryCounts::default();
        let now = cx.now;
        let expired_workers: Vec<String> = self
            .workers
            .values()
            .filter(|w| w.status != WorkerStatus::Offline && w.lease_expires_at_ms <= now)
            .map(|w| w.worker_id.clone())
            .collect();
        for worker_id in expired_workers {
            let mut worker = self.workers[&worker_id].clone();
            worker.status = WorkerStatus::Offline;
            self.put_worker(cx, worker);
            counts.offline_workers += 1;
        }
        let offline = |state: &State, worker_id: &str| {
            state
                .workers
                .get(worker_id)
                .is_some_and(|w| w.status == WorkerStatus::Offline)
        };
        let dead_leases: Vec<Scope> = self
            .execution_leases
            .iter()
            .filter(|(_, l)| l.released_at_ms.is_none())
            .filter(|(_, l)| l.expires_at_ms <= now || offline(self, &l.owner_id))
            .map(|(key, _)| key.clone())
            .collect();
        for key in dead_leases {
            self.release_lease_row(cx, &key);
            counts.released_leases += 1;
        }
        let orphaned_routes: Vec<Scope> = self
            .routes
            .iter()
            .filter(|(_, r)| r.state.is_active())
            .filter(|(_, r)| {
                r.lease_expires_at_ms.is_none_or(|at| at <= now)
                    || r.worker_id.as_deref().is_some_and(|w| offline(self, w))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in orphaned_routes {
            let mut route = self.routes[&key].clone();
            route.state = RouteState::Suspended;
            clear_ownership(&mut route);
            route.failure.get_or_insert_with(sweep_failure);
            self.put_route(cx, route);
            counts.suspended_sessions += 1;
        }
        if let Some(window) = abandon_sealed_after_ms {
            let overdue: Vec<Scope> = self
                .commands
                .iter()
                .filter(|(_, c)| c.sealed && c.result.is_none() && c.abandon_reason.is_none())
                .filter(|(_, c)| c.sealed_at.unwrap_or(0).saturating_add(window) <= now)
                .map(|(key, _)| key.clone())
                .collect();
            for key in overdue {
                if self.abandon_command(cx, &key, SWEEP_ABANDON_REASON) {
                    counts.abandoned_commands += 1;
                }
            }
        }
        counts
    }
}

impl<B: Backend> StoreEngine<B> {
    fn route_change(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
        allow_replay: bool,
    ) -> StoreResult<SessionRoute> {
        self.write(|state, cx| {
            let key = scope(tenant_id, &lease.session_id);
            state.change_route(cx, &key, lease, transition, allow_replay)
        })
    }
}

#[async_trait]
impl<B: Backend> SessionRoutes for StoreEngine<B> {
    async fn enqueue_session(
        &self,
        tenant_id: &str,
        session_id: &str,
        options: EnqueueOptions,
    ) -> StoreResult<SessionRoute> {
        check_route_ids(tenant_id, session_id)?;
        self.write(|state, cx| state.enqueue(cx, &scope(tenant_id, session_id), options))
    }

    async fn claim_session(&self, request: ClaimSession) -> StoreResult<Option<RouteClaim>> {
        validate_claim_session(&request)?;
        self.write(|state, cx| state.claim(cx, request))
    }

    async fn transition_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        self.route_change(tenant_id, lease, transition, false)
    }

    async fn settle_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute> {
        validate_settle(&transition)?;
        self.route_change(tenant_id, lease, transition, true)
    }

    async fn handoff_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        metadata: Option<JsonObject>,
    ) -> StoreResult<SessionRoute> {
        self.route_change(tenant_id, lease, handoff_transition(metadata), true)
    }

    async fn renew_session_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<RouteClaim> {
        validate_ttl(ttl_ms)?;
        self.write(|state, cx| {
            let key = scope(tenant_id, &lease.session_id);
            if !state.routes.contains_key(&key) {
                return Err(route_not_found(&key.1));
            }
            let lease = state.renew_lease(cx, &key, lease, ttl_ms)?;
            let route = state.routes[&key].clone();
            Ok(RouteClaim { route, lease })
        })
    }

    async fn renew_session_leases(
        &self,
        leases: &[(String, ExecutionLease)],
        ttl_ms: u64,
    ) -> StoreResult<Vec<StoreResult<ExecutionLease>>> {
        validate_ttl(ttl_ms)?;
        self.write(|state, cx| {
            Ok(leases
                .iter()
                .map(|(tenant_id, lease)| {
                    let key = scope(tenant_id, &lease.session_id);
                    if !state.routes.contains_key(&key) {
                        return Err(route_not_found(&key.1));
                    }
                    state.renew_lease(cx, &key, lease, ttl_ms)
                })
                .collect())
        })
    }

    async fn get_session_route(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRoute>> {
        self.read(|state, _| Ok(state.routes.get(&scope(tenant_id, session_id)).cloned()))
    }

    async fn count_worker_sessions(&self) -> StoreResult<BTreeMap<String, u64>> {
        self.read(|state, _| {
            let mut counts = BTreeMap::new();
            for worker in state.routes.values().filter_map(|r| r.worker_id.as_ref()) {
                *counts.entry(worker.clone()).or_default() += 1;
            }
            Ok(counts)
        })
    }

    async fn count_held_sessions(
        &self,
        tenant_id: &str,
        except_session_id: &str,
        now_ms: u64,
    ) -> StoreResult<u64> {
        self.read(|state, _| {
            let tenant = scope(tenant_id, "")..;
            let held = state
                .routes
                .range(tenant)
                .take_while(|((tenant, _), _)| tenant == tenant_id)
                .filter(|((_, session), route)| {
                    session != except_session_id
                        && route.worker_id.is_some()
                        && route.state.is_active()
                        && route.lease_expires_at_ms.is_some_and(|at| at > now_ms)
                })
                .count();
            Ok(held as u64)
        })
    }

    async fn list_worker_sessions(&self, worker_id: &str) -> StoreResult<Vec<SessionRoute>> {
        self.read(|state, _| {
            let mut routes: Vec<SessionRoute> = state
                .routes
                .values()
                .filter(|r| r.worker_id.as_deref() == Some(worker_id))
                .cloned()
                .collect();
            routes.sort_by(|a, b| {
                a.updated_at_ms
                    .cmp(&b.updated_at_ms)
                    .then_with(|| a.tenant_id.cmp(&b.tenant_id))
                    .then_with(|| a.session_id.cmp(&b.session_id))
            });
            Ok(routes)
        })
    }

    async fn recover_expired_work(
        &self,
        abandon_sealed_after_ms: u64,
    ) -> StoreResult<RecoveryCounts> {
        self.write(|state, cx| Ok(state.sweep(cx, Some(abandon_sealed_after_ms))))
    }
}
