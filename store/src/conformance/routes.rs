//! Session routes: enqueue, claim, fenced transitions, settle and hand-off (docs/storage.md §4.4;
//! cases 66-72). Worker registration and the recovery sweep are in [`super::recovery`].

use serde_json::json;

use super::support::*;
use super::{Factory, Harness};
use crate::error::{RuntimeErrorCode, StoreResult};
use crate::model::*;

pub(super) const TTL: u64 = 10_000;

pub(super) async fn register(h: &Harness, worker_id: &str, capacity: u32, ttl_ms: u64) {
    let request = RegisterWorker {
        worker_id: worker_id.to_owned(),
        capacity,
        ttl_ms,
        metadata: obj(json!({ "grpcAddress": format!("http://{worker_id}.invalid:50051") })),
    };
    h.store
        .register_worker(request)
        .await
        .expect("register worker");
}

pub(super) async fn enqueue(h: &Harness, session_id: &str, priority: i64) -> SessionRoute {
    let options = EnqueueOptions {
        priority,
        metadata: obj(json!({ "queuedBy": "conformance" })),
    };
    h.store
        .enqueue_session(TENANT, session_id, options)
        .await
        .expect("enqueue session")
}

pub(super) fn claim_request(owner_id: &str, lease_id: &str, ttl_ms: u64) -> ClaimSession {
    ClaimSession {
        owner_id: owner_id.to_owned(),
        lease_id: lease_id.to_owned(),
        ttl_ms,
        tenant_id: None,
        session_id: None,
        orphans_only: false,
    }
}

/// `owner_id` claims under a fresh lease id; panics on an error.
pub(super) async fn claim(h: &Harness, owner_id: &str, ttl_ms: u64) -> Option<RouteClaim> {
    let request = claim_request(owner_id, &unique_id("lease"), ttl_ms);
    h.store.claim_session(request).await.expect("claim session")
}

pub(super) async fn route(h: &Harness, session_id: &str) -> SessionRoute {
    h.store
        .get_session_route(TENANT, session_id)
        .await
        .expect("get route")
        .expect("the route exists")
}

fn to(state: RouteState, from: RouteState) -> RouteTransition {
    RouteTransition {
        expected_state: Some(from),
        state,
        metadata: None,
        failure: None,
    }
}

async fn transition(
    h: &Harness,
    lease: &ExecutionLease,
    from: RouteState,
    state: RouteState,
) -> StoreResult<SessionRoute> {
    h.store
        .transition_session(TENANT, lease, to(state, from))
        .await
}

/// Settles without an expected state, so a replay with the same fence can answer again.
async fn settle(h: &Harness, lease: &ExecutionLease, state: RouteState) -> SessionRoute {
    let settlement = RouteTransition {
        expected_state: None,
        ..to(state, RouteState::Running)
    };
    h.store
        .settle_session(TENANT, lease, settlement)
        .await
        .expect("settle")
}

/// Worker `worker-a` (capacity 2) holds [`SESSION`] in `provisioning`.
async fn claimed_by_a(h: &Harness) -> RouteClaim {
    register(h, "worker-a", 2, TTL).await;
    enqueue(h, SESSION, 10).await;
    claim(h, "worker-a", TTL).await.expect("a claim")
}

/// `worker-a` claimed and handed [`SESSION`] off; `worker-b` (capacity 4) claimed it next.
async fn handed_over(h: &Harness) -> (RouteClaim, RouteClaim) {
    let a = claimed_by_a(h).await;
    enqueue(h, "session-f", 0).await;
    h.store
        .handoff_session(TENANT, &a.lease, None)
        .await
        .expect("handoff");
    register(h, "worker-b", 4, TTL).await;
    let b = claim(h, "worker-b", TTL).await.expect("b claims");
    assert_eq!(b.route.session_id, SESSION, "priority 10 before 0");
    (a, b)
}

/// Case 66.
pub async fn enqueued_session_is_claimed_into_provisioning(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 2, TTL).await;
    let queued = enqueue(&h, SESSION, 10).await;
    assert_eq!((queued.state, queued.priority), (RouteState::Queued, 10));
    assert_eq!(queued.worker_id, None);

    let claimed = claim(&h, "worker-a", TTL).await.expect("a claim");

    let (route, lease) = (&claimed.route, &claimed.lease);
    assert_eq!(route.state, RouteState::Provisioning);
    assert_eq!(route.worker_id.as_deref(), Some("worker-a"));
    assert_eq!(route.lease_id.as_ref(), Some(&lease.lease_id));
    assert_eq!(route.attempt, 1);
    assert_eq!(route.fencing_token, lease.fencing_token);
    assert_eq!(route.lease_expires_at_ms, Some(lease.expires_at_ms));
    assert_eq!(
        (lease.owner_id.as_str(), lease.session_id.as_str()),
        ("worker-a", SESSION)
    );
    let stored = h.store.get_execution_lease(TENANT, SESSION).await.unwrap();
    assert_eq!(stored.as_ref(), Some(lease));
}

/// Case 67.
pub async fn claimed_session_requires_its_fence(factory: Factory) {
    let h = factory.start().await;
    let a = claimed_by_a(&h).await;

    let unfenced = h
        .store
        .append_durable(TENANT, SESSION, drafts(1), ExpectedSequence::Empty, None)
        .await;
    let fence = a.lease.fence();
    let fenced = h
        .store
        .append_durable(
            TENANT,
            SESSION,
            drafts(1),
            ExpectedSequence::Empty,
            Some(&fence),
        )
        .await;

    assert!(
        h.store
            .requires_execution_lease(TENANT, SESSION)
            .await
            .unwrap()
    );
    expect_runtime(unfenced, RuntimeErrorCode::LeaseRequired);
    assert_eq!(fenced.map(|outcome| outcome.last_sequence), Ok(1));
}

/// Case 68: allowed transitions succeed, metadata is replaced, and a repeated hand-off with the
/// same fence answers `suspended` again.
pub async fn route_transitions_follow_the_table_and_handoff_is_idempotent(factory: Factory) {
    let h = factory.start().await;
    let a = claimed_by_a(&h).await;
    let mut running = to(RouteState::Running, RouteState::Provisioning);
    running.metadata = Some(obj(json!({ "step": "run" })));

    let run = h.store.transition_session(TENANT, &a.lease, running).await;
    let waiting = transition(
        &h,
        &a.lease,
        RouteState::Running,
        RouteState::WaitingApproval,
    )
    .await;
    let first = h
        .store
        .handoff_session(TENANT, &a.lease, None)
        .await
        .unwrap();
    let second = h
        .store
        .handoff_session(TENANT, &a.lease, None)
        .await
        .unwrap();

    assert_eq!(run.unwrap().metadata, obj(json!({ "step": "run" })));
    assert_eq!(waiting.unwrap().state, RouteState::WaitingApproval);
    assert_eq!(
        (first.state, second.state),
        (RouteState::Suspended, RouteState::Suspended)
    );
    assert_eq!((second.worker_id, second.lease_id), (None, None));
}

pub async fn disallowed_route_transition_is_a_state_conflict(factory: Factory) {
    let h = factory.start().await;
    let a = claimed_by_a(&h).await;

    let skip = transition(&h, &a.lease, RouteState::Provisioning, RouteState::Idle).await;
    let wrong_expectation =
        transition(&h, &a.lease, RouteState::Running, RouteState::Running).await;

    let message = expect_runtime(skip, RuntimeErrorCode::SessionStateConflict);
    assert!(
        message.contains("cannot transition from provisioning to idle"),
        "{message}"
    );
    expect_runtime(wrong_expectation, RuntimeErrorCode::SessionStateConflict);
    assert_eq!(route(&h, SESSION).await.state, RouteState::Provisioning);
}

/// Case 69.
pub async fn draining_worker_cannot_claim(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 2, TTL).await;
    let drained = h.store.drain_worker("worker-a").await.unwrap();
    enqueue(&h, "session-f", 0).await;

    let refused = h
        .store
        .claim_session(claim_request("worker-a", "lease-a", TTL))
        .await;

    assert_eq!(drained.status, WorkerStatus::Draining);
    assert_eq!(drained.draining_at_ms, Some(h.now()));
    expect_runtime(refused, RuntimeErrorCode::WorkerUnavailable);
    assert_eq!(route(&h, "session-f").await.state, RouteState::Queued);
}

/// Case 70: a suspended session is claimable, under a higher token and a new attempt.
pub async fn successor_claim_gets_a_higher_token(factory: Factory) {
    let h = factory.start().await;

    let (a, b) = handed_over(&h).await;

    assert!(b.lease.fencing_token > a.lease.fencing_token);
    assert_eq!(b.route.fencing_token, b.lease.fencing_token);
    assert_eq!(b.route.attempt, a.route.attempt + 1);
    assert_eq!(b.route.worker_id.as_deref(), Some("worker-b"));
}

/// Case 71.
pub async fn stale_owner_is_fenced_out_after_a_successor(factory: Factory) {
    let h = factory.start().await;
    let (a, _b) = handed_over(&h).await;

    let moved = transition(
        &h,
        &a.lease,
        RouteState::Suspended,
        RouteState::Provisioning,
    )
    .await;
    let events = vec![stream_event(SESSION, "stale")];
    let appended = h
        .store
        .append_events(TENANT, SESSION, events, Some(&a.lease.fence()))
        .await;

    expect_runtime(moved, RuntimeErrorCode::LeaseLost);
    expect_runtime(appended, RuntimeErrorCode::LeaseLost);
    assert_eq!(
        route(&h, SESSION).await.worker_id.as_deref(),
        Some("worker-b")
    );
}

/// Case 72: settling clears ownership, frees capacity and releases the lease.
pub async fn settled_route_clears_ownership(factory: Factory) {
    let h = factory.start().await;
    let (_a, b) = handed_over(&h).await;
    transition(&h, &b.lease, RouteState::Provisioning, RouteState::Running)
        .await
        .unwrap();

    let completed = settle(&h, &b.lease, RouteState::Completed).await;
    let next = claim(&h, "worker-b", TTL).await.expect("b claims the next");

    assert_eq!(completed.state, RouteState::Completed);
    assert_eq!((completed.worker_id, completed.lease_id), (None, None));
    let released = h.store.get_execution_lease(TENANT, SESSION).await.unwrap();
    assert!(released.and_then(|lease| lease.released_at_ms).is_some());
    assert_eq!(next.route.session_id, "session-f");
    let requeue = h
        .store
        .enqueue_session(TENANT, SESSION, EnqueueOptions::default())
        .await;
    expect_runtime(requeue, RuntimeErrorCode::SessionStateConflict);
}

/// Case 72: `failed` needs failure details and keeps them.
pub async fn failed_settlement_requires_failure_details(factory: Factory) {
    let h = factory.start().await;
    let a = claimed_by_a(&h).await;
    let bare = RouteTransition {
        expected_state: None,
        state: RouteState::Failed,
        metadata: None,
        failure: None,
    };
    let failure = obj(json!({ "message": "runner crashed", "code": "E_RUNNER" }));
    let detailed = RouteTransition {
        failure: Some(failure.clone()),
        ..bare.clone()
    };

    let refused = h.store.settle_session(TENANT, &a.lease, bare).await;
    let failed = h
        .store
        .settle_session(TENANT, &a.lease, detailed)
        .await
        .unwrap();

    let message = expect_runtime(refused, RuntimeErrorCode::WorkerInvalid);
    assert!(message.contains("requires failure details"), "{message}");
    assert_eq!(failed.state, RouteState::Failed);
    assert_eq!(failed.failure, Some(failure));
}

/// A repeated settlement with the same fence answers the settled route again.
pub async fn settle_is_idempotent_with_the_same_fence(factory: Factory) {
    let h = factory.start().await;
    let a = claimed_by_a(&h).await;
    transition(&h, &a.lease, RouteState::Provisioning, RouteState::Running)
        .await
        .unwrap();

    let first = settle(&h, &a.lease, RouteState::Idle).await;
    let second = settle(&h, &a.lease, RouteState::Idle).await;

    assert_eq!(
        (first.state, second.state),
        (RouteState::Idle, RouteState::Idle)
    );
    assert_eq!(second.worker_id, None);
}

/// A worker at capacity gets nothing until a slot frees.
pub async fn claim_respects_worker_capacity(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 1, TTL).await;
    enqueue(&h, "session-1", 0).await;
    enqueue(&h, "session-2", 0).await;

    let first = claim(&h, "worker-a", TTL).await.expect("one slot");
    let full = claim(&h, "worker-a", TTL).await;
    h.store
        .handoff_session(TENANT, &first.lease, None)
        .await
        .unwrap();
    let freed = claim(&h, "worker-a", TTL).await;

    assert!(full.is_none(), "{full:?}");
    assert!(freed.is_some());
}

/// Higher priority first, then the earlier enqueue.
pub async fn claim_order_is_priority_then_queue_time(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 3, TTL).await;
    enqueue(&h, "session-b", 0).await;
    h.advance(5);
    enqueue(&h, "session-a", 0).await;
    h.advance(5);
    enqueue(&h, "session-z", 7).await;

    let mut order = Vec::new();
    while let Some(claimed) = claim(&h, "worker-a", TTL).await {
        order.push(claimed.route.session_id);
    }

    assert_eq!(order, vec!["session-z", "session-b", "session-a"]);
}

/// The tenant and session filters restrict what a claim may take.
pub async fn claim_can_target_one_tenant_or_session(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 4, TTL).await;
    enqueue(&h, "session-1", 9).await;
    enqueue(&h, "session-2", 0).await;
    let elsewhere = EnqueueOptions::default();
    h.store
        .enqueue_session(OTHER_TENANT, "session-9", elsewhere)
        .await
        .unwrap();

    let mut targeted = claim_request("worker-a", "lease-1", TTL);
    targeted.session_id = Some("session-2".to_owned());
    targeted.tenant_id = Some(TENANT.to_owned());
    let session_two = h.store.claim_session(targeted).await.unwrap();
    let mut other_tenant = claim_request("worker-a", "lease-2", TTL);
    other_tenant.tenant_id = Some(OTHER_TENANT.to_owned());
    let theirs = h.store.claim_session(other_tenant).await.unwrap();

    assert_eq!(
        session_two.map(|c| c.route.session_id).as_deref(),
        Some("session-2")
    );
    let theirs = theirs.expect("the other tenant's session");
    assert_eq!(
        (
            theirs.route.tenant_id.as_str(),
            theirs.route.session_id.as_str()
        ),
        (OTHER_TENANT, "session-9")
    );
    assert_eq!(route(&h, "session-1").await.state, RouteState::Queued);
}

/// An orphan-only claim (executor adoption) takes a handed-off session but never a queued one,
/// which belongs to the executor that queued it and is about to claim it.
pub async fn orphan_claims_skip_queued_sessions(factory: Factory) {
    let h = factory.start().await;
    let a = claimed_by_a(&h).await;
    enqueue(&h, "session-queued", 99).await;
    register(&h, "worker-b", 4, TTL).await;
    let mut orphans = claim_request("worker-b", "lease-b", TTL);
    orphans.orphans_only = true;
    assert_eq!(h.store.claim_session(orphans.clone()).await.unwrap(), None);

    h.store
        .handoff_session(TENANT, &a.lease, None)
        .await
        .expect("handoff");
    let adopted = h.store.claim_session(orphans).await.unwrap();
    assert_eq!(
        adopted.map(|c| c.route.session_id).as_deref(),
        Some(SESSION)
    );
    assert_eq!(route(&h, "session-queued").await.state, RouteState::Queued);
}

/// An owned, active session cannot be queued again.
pub async fn enqueue_with_an_active_lease_conflicts(factory: Factory) {
    let h = factory.start().await;
    claimed_by_a(&h).await;

    let requeued = h
        .store
        .enqueue_session(TENANT, SESSION, EnqueueOptions::default())
        .await;

    let message = expect_runtime(requeued, RuntimeErrorCode::SessionStateConflict);
    assert!(message.contains("active execution lease"), "{message}");
}

/// Re-enqueueing preserves the attempt count and fencing token; the next claim bumps both.
pub async fn re_enqueue_keeps_attempt_and_token(factory: Factory) {
    let h = factory.start().await;
    let a = claimed_by_a(&h).await;
    h.store
        .handoff_session(TENANT, &a.lease, None)
        .await
        .unwrap();

    let requeued = enqueue(&h, SESSION, 1).await;
    let again = claim(&h, "worker-a", TTL).await.expect("claim again");

    assert_eq!(requeued.state, RouteState::Queued);
    assert_eq!(
        (requeued.attempt, requeued.fencing_token),
        (1, a.route.fencing_token)
    );
    assert_eq!(again.route.attempt, 2);
    assert!(again.lease.fencing_token > a.lease.fencing_token);
}

pub async fn claim_by_an_unknown_worker_is_not_found(factory: Factory) {
    let h = factory.start().await;
    enqueue(&h, SESSION, 0).await;

    let claimed = h
        .store
        .claim_session(claim_request("ghost", "lease-g", TTL))
        .await;

    expect_runtime(claimed, RuntimeErrorCode::WorkerNotFound);
}

pub async fn claim_session_validates_its_arguments(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 1, TTL).await;
    let mut blank_tenant = claim_request("worker-a", "lease-a", TTL);
    blank_tenant.tenant_id = Some(" ".to_owned());
    let requests = [
        claim_request("worker-a", "lease-a", 0),
        claim_request("worker-a", "lease-a", MAX_LEASE_TTL_MS + 1),
        claim_request(" ", "lease-a", TTL),
        claim_request("worker-a", "", TTL),
        blank_tenant,
    ];

    for request in requests {
        let claimed = h.store.claim_session(request).await;
        expect_runtime(claimed, RuntimeErrorCode::WorkerInvalid);
    }
}

/// Renewing through the route moves both the lease and the route expiry.
pub async fn renew_session_lease_moves_the_route_expiry(factory: Factory) {
    let h = factory.start().await;
    let a = claimed_by_a(&h).await;
    h.advance(TTL / 2);

    let renewed = h
        .store
        .renew_session_lease(TENANT, &a.lease, TTL)
        .await
        .unwrap();

    assert_eq!(renewed.lease.expires_at_ms, h.now() + TTL);
    assert_eq!(
        renewed.route.lease_expires_at_ms,
        Some(renewed.lease.expires_at_ms)
    );
    assert_eq!(renewed.lease.fencing_token, a.lease.fencing_token);
}

/// A batch renewal renews every lease still held and reports each lost one on its own.
pub async fn renew_session_leases_renews_each_and_reports_the_lost(factory: Factory) {
    let h = factory.start().await;
    let (stale, held) = handed_over(&h).await;
    let other = claim(&h, "worker-b", TTL)
        .await
        .expect("b claims a second session");
    h.advance(TTL / 2);
    let asked: Vec<(String, ExecutionLease)> = [&stale.lease, &held.lease, &other.lease]
        .into_iter()
        .map(|lease| (TENANT.to_owned(), lease.clone()))
        .collect();

    let answers = h.store.renew_session_leases(&asked, TTL).await.unwrap();

    assert_eq!(answers.len(), 3);
    expect_runtime(answers[0].clone(), RuntimeErrorCode::LeaseLost);
    for (answer, claim) in answers[1..].iter().zip([&held, &other]) {
        let renewed = answer.as_ref().expect("renewed");
        assert_eq!(renewed.lease_id, claim.lease.lease_id);
        assert_eq!(renewed.fencing_token, claim.lease.fencing_token);
        assert_eq!(renewed.expires_at_ms, h.now() + TTL);
        let route = route(&h, &claim.route.session_id).await;
        assert_eq!(route.lease_expires_at_ms, Some(renewed.expires_at_ms));
    }
    // The stale owner's renewal changed nothing.
    assert_eq!(
        route(&h, SESSION).await.lease_id,
        Some(held.lease.lease_id.clone())
    );
    assert!(
        h.store
            .renew_session_leases(&[], TTL)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Releasing the execution lease of an active route suspends the route.
pub async fn releasing_the_execution_lease_suspends_an_active_route(factory: Factory) {
    let h = factory.start().await;
    let a = claimed_by_a(&h).await;

    h.store
        .release_execution_lease(TENANT, &a.lease)
        .await
        .unwrap();

    let suspended = route(&h, SESSION).await;
    assert_eq!(suspended.state, RouteState::Suspended);
    assert_eq!((suspended.worker_id, suspended.lease_id), (None, None));
}

pub async fn list_worker_sessions_returns_owned_routes(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 4, TTL).await;
    register(&h, "worker-b", 4, TTL).await;
    enqueue(&h, "session-1", 0).await;
    enqueue(&h, "session-2", 0).await;
    claim(&h, "worker-a", TTL).await.expect("a");
    claim(&h, "worker-b", TTL).await.expect("b");

    let owned = h.store.list_worker_sessions("worker-a").await.unwrap();

    let ids: Vec<_> = owned.iter().map(|r| r.session_id.as_str()).collect();
    assert_eq!(ids, vec!["session-1"]);
    assert_eq!(owned[0].worker_id.as_deref(), Some("worker-a"));
}

pub async fn count_worker_sessions_counts_owned_routes(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 4, TTL).await;
    register(&h, "worker-b", 4, TTL).await;
    for session in ["session-1", "session-2", "session-3", "session-4"] {
        enqueue(&h, session, 0).await;
    }
    let first = claim(&h, "worker-a", TTL).await.expect("a");
    claim(&h, "worker-a", TTL).await.expect("a again");
    claim(&h, "worker-b", TTL).await.expect("b");

    let counts = h.store.count_worker_sessions().await.unwrap();
    assert_eq!(counts.get("worker-a"), Some(&2));
    assert_eq!(counts.get("worker-b"), Some(&1));
    assert_eq!(
        counts.len(),
        2,
        "the queued session has no owner: {counts:?}"
    );

    h.store
        .release_execution_lease(TENANT, &first.lease)
        .await
        .unwrap();
    let counts = h.store.count_worker_sessions().await.unwrap();
    assert_eq!(
        counts.get("worker-a"),
        Some(&1),
        "a released route is not owned"
    );
}

pub async fn count_held_sessions_counts_a_tenants_leased_active_routes(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 4, TTL).await;
    enqueue(&h, "session-1", 0).await;
    enqueue(&h, "session-2", 0).await;
    enqueue(&h, "session-3", 0).await;
    claim(&h, "worker-a", TTL).await.expect("one");
    let second = claim(&h, "worker-a", TTL).await.expect("two");
    let expires = route(&h, &second.route.session_id)
        .await
        .lease_expires_at_ms
        .expect("a claimed route has a lease");
    let second_id = second.route.session_id.as_str();

    assert_eq!(
        held(&h, "session-x", expires - 1).await,
        2,
        "both claimed routes"
    );
    assert_eq!(held(&h, second_id, expires - 1).await, 1, "all but itself");
    assert_eq!(
        held(&h, "session-x", expires + TTL).await,
        0,
        "leases that ran out"
    );
    let other = h
        .store
        .count_held_sessions("another-tenant", "session-x", expires - 1)
        .await
        .unwrap();
    assert_eq!(other, 0, "another tenant's count");
}

async fn held(h: &Harness, except_session_id: &str, now_ms: u64) -> u64 {
    h.store
        .count_held_sessions(TENANT, except_session_id, now_ms)
        .await
        .expect("count held sessions")
}
