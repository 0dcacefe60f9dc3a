//! The worker registry and the recovery sweep `recover_expired_work` (docs/storage.md §4.5, §4.6,
//! §1.2 "Automatic abandonment"; cases 65, 74 and decision S5). Time only moves on the
//! [`ManualClock`](agent_runtime::clock::ManualClock).

use serde_json::json;

use super::routes::{TTL, claim, enqueue, register, route};
use super::support::*;
use super::{Factory, Harness};
use crate::error::RuntimeErrorCode;
use crate::model::*;

/// The abandonment window for sealed commands used by these cases (S5's default).
const WINDOW: u64 = 600_000;

async fn recover(h: &Harness) -> RecoveryCounts {
    h.store
        .recover_expired_work(WINDOW)
        .await
        .expect("recover expired work")
}

async fn worker(h: &Harness, worker_id: &str) -> WorkerRecord {
    h.store
        .get_worker(worker_id)
        .await
        .expect("get worker")
        .expect("the worker exists")
}

/// Case 65.
pub async fn registered_worker_is_active_and_heartbeats_forward(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 2, TTL).await;
    let registered = worker(&h, "worker-a").await;
    h.advance(500);

    let beat = h.store.heartbeat_worker("worker-a", TTL).await.unwrap();

    assert_eq!(registered.status, WorkerStatus::Active);
    assert_eq!(registered.capacity, 2);
    assert_eq!(
        registered.lease_expires_at_ms,
        registered.last_heartbeat_at_ms + TTL
    );
    assert!(beat.last_heartbeat_at_ms >= registered.last_heartbeat_at_ms);
    assert_eq!(beat.lease_expires_at_ms, beat.last_heartbeat_at_ms + TTL);
    assert_eq!(beat.registered_at_ms, registered.registered_at_ms);
    let listed = h.store.list_workers().await.unwrap();
    assert_eq!(listed, vec![beat]);
}

/// Case 74: a worker past its heartbeat goes offline; its lease is released and its route
/// suspended with the reason recorded.
pub async fn expired_worker_goes_offline_and_its_route_is_suspended(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-e", 1, 1_000).await;
    enqueue(&h, "session-x", 100).await;
    let claimed = claim(&h, "worker-e", 1_000).await.expect("e claims x");
    h.advance(1_200);

    let counts = recover(&h).await;

    assert!(counts.offline_workers >= 1, "{counts:?}");
    assert!(counts.suspended_sessions >= 1, "{counts:?}");
    assert_eq!(worker(&h, "worker-e").await.status, WorkerStatus::Offline);
    let x = route(&h, "session-x").await;
    assert_eq!(x.state, RouteState::Suspended);
    assert_eq!((x.worker_id, x.lease_id), (None, None));
    assert_eq!(
        x.failure,
        Some(obj(json!({ "reason": "worker_lease_expired" })))
    );
    let lease = h
        .store
        .get_execution_lease(TENANT, "session-x")
        .await
        .unwrap();
    assert!(lease.and_then(|l| l.released_at_ms).is_some());
    let stale = h.store.assert_execution_lease(TENANT, &claimed.lease).await;
    expect_runtime(stale, RuntimeErrorCode::LeaseLost);
}

/// A route whose lease ran out is suspended even while its worker still heartbeats.
pub async fn expired_route_lease_is_suspended_while_its_worker_lives(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 1, 60_000).await;
    enqueue(&h, SESSION, 0).await;
    claim(&h, "worker-a", 1_000).await.expect("claim");
    h.advance(1_200);

    let counts = recover(&h).await;

    assert_eq!(counts.offline_workers, 0, "{counts:?}");
    assert!(counts.suspended_sessions >= 1, "{counts:?}");
    assert_eq!(route(&h, SESSION).await.state, RouteState::Suspended);
    assert_eq!(worker(&h, "worker-a").await.status, WorkerStatus::Active);
}

/// Crash recovery: another worker claims the suspended session under a higher token.
pub async fn recovered_session_is_reclaimed_under_a_higher_token(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-e", 1, 1_000).await;
    enqueue(&h, SESSION, 0).await;
    let lost = claim(&h, "worker-e", 1_000).await.expect("e claims");
    h.advance(1_200);
    register(&h, "worker-f", 1, TTL).await;

    let reclaimed = claim(&h, "worker-f", TTL).await.expect("f reclaims");

    assert_eq!(reclaimed.route.session_id, SESSION);
    assert_eq!(reclaimed.route.attempt, lost.route.attempt + 1);
    assert!(reclaimed.lease.fencing_token > lost.lease.fencing_token);
    assert_eq!(worker(&h, "worker-e").await.status, WorkerStatus::Offline);
}

/// An offline worker cannot heartbeat or claim; registering again revives it.
pub async fn offline_worker_must_register_again(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 1, 1_000).await;
    h.advance(1_001);
    recover(&h).await;

    let beat = h.store.heartbeat_worker("worker-a", TTL).await;
    register(&h, "worker-a", 3, TTL).await;

    expect_runtime(beat, RuntimeErrorCode::WorkerUnavailable);
    let revived = worker(&h, "worker-a").await;
    assert_eq!(
        (revived.status, revived.capacity),
        (WorkerStatus::Active, 3)
    );
    assert_eq!(revived.draining_at_ms, None);
}

/// A worker whose heartbeat expired cannot claim even before a sweep marks it offline.
pub async fn worker_with_an_expired_heartbeat_cannot_claim(factory: Factory) {
    let h = factory.start().await;
    register(&h, "worker-a", 1, 1_000).await;
    enqueue(&h, SESSION, 0).await;
    h.advance(1_001);

    let claimed = h
        .store
        .claim_session(super::routes::claim_request("worker-a", "lease-a", TTL))
        .await;

    expect_runtime(claimed, RuntimeErrorCode::WorkerUnavailable);
    assert_eq!(route(&h, SESSION).await.state, RouteState::Queued);
}

pub async fn unknown_worker_cannot_drain_or_heartbeat(factory: Factory) {
    let h = factory.start().await;

    let drained = h.store.drain_worker("ghost").await;
    let beat = h.store.heartbeat_worker("ghost", TTL).await;

    expect_runtime(drained, RuntimeErrorCode::WorkerNotFound);
    expect_runtime(beat, RuntimeErrorCode::WorkerUnavailable);
    assert_eq!(h.store.get_worker("ghost").await, Ok(None));
}

/// S5: a sealed command without a result is abandoned once the window since sealing passed.
pub async fn sealed_command_is_abandoned_after_the_window(factory: Factory) {
    let h = factory.start().await;
    h.sealed(COMMAND, FINGERPRINT).await;
    h.advance(WINDOW / 2);

    let early = recover(&h).await;
    let still_sealed = h.claim(COMMAND, FINGERPRINT).await;
    h.advance(WINDOW);
    let late = recover(&h).await;

    assert_eq!(early.abandoned_commands, 0, "{early:?}");
    assert!(
        matches!(still_sealed, CommandClaim::InProgress { .. }),
        "{still_sealed:?}"
    );
    assert!(late.abandoned_commands >= 1, "{late:?}");
    assert_eq!(
        h.claim(COMMAND, FINGERPRINT).await,
        abandoned(SWEEP_ABANDON_REASON)
    );
}

/// The sweep never abandons a claimed (releasable) or completed command.
pub async fn sweep_spares_claimed_and_completed_commands(factory: Factory) {
    let h = factory.start().await;
    h.claimed("claimed-only", FINGERPRINT, MAX_LEASE_TTL_MS)
        .await;
    let lease_id = h.sealed("completed", FINGERPRINT).await;
    let result = json!({ "ok": true });
    h.store
        .complete_command(TENANT, "completed", &lease_id, &result)
        .await
        .unwrap();
    h.advance(2 * WINDOW);

    let counts = recover(&h).await;

    assert_eq!(counts.abandoned_commands, 0, "{counts:?}");
    let claimed = h.claim("claimed-only", FINGERPRINT).await;
    assert!(
        matches!(claimed, CommandClaim::InProgress { .. }),
        "{claimed:?}"
    );
    assert_eq!(
        h.claim("completed", FINGERPRINT).await,
        CommandClaim::Completed { result }
    );
}
