//! Execution leases with fencing tokens, and the fence check every session write makes in the
//! same atomic step as the write (docs/storage.md §4.1, §4.2). The fencing table is checked against
//! all three fenced writers: `append_events`, `append_durable` and `mutate_transcript`.

use serde_json::json;

use super::support::*;
use super::{Factory, Harness};
use crate::error::{RuntimeErrorCode, StoreResult};
use crate::model::*;

const TTL: u64 = 10_000;

async fn lease(h: &Harness) -> Option<ExecutionLease> {
    h.store
        .get_execution_lease(TENANT, SESSION)
        .await
        .expect("get execution lease")
}

async fn requires_lease(h: &Harness) -> bool {
    h.store
        .requires_execution_lease(TENANT, SESSION)
        .await
        .expect("requires execution lease")
}

pub async fn first_acquire_issues_token_1(factory: Factory) {
    let h = factory.start().await;
    assert!(!requires_lease(&h).await);
    assert_eq!(lease(&h).await, None);

    let acquired = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;

    assert_eq!(acquired.fencing_token, 1);
    assert_eq!(
        (acquired.session_id.as_str(), acquired.lease_id.as_str()),
        (SESSION, "lease-a")
    );
    assert_eq!(acquired.owner_id, "worker-a");
    assert_eq!(acquired.renewed_at_ms, acquired.acquired_at_ms);
    assert_eq!(acquired.expires_at_ms - acquired.renewed_at_ms, TTL);
    assert_eq!(acquired.released_at_ms, None);
    assert_eq!(lease(&h).await, Some(acquired));
    assert!(requires_lease(&h).await);
}

/// Acquiring again with the same lease id and owner renews without a new token.
pub async fn reacquire_by_the_same_lease_and_owner_keeps_the_token(factory: Factory) {
    let h = factory.start().await;
    let first = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(1_000);

    let again = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;

    assert_eq!(again.fencing_token, first.fencing_token);
    assert_eq!(again.acquired_at_ms, first.acquired_at_ms);
    assert_eq!(again.expires_at_ms, first.expires_at_ms + 1_000);
}

pub async fn acquire_while_another_owner_is_active_conflicts(factory: Factory) {
    let h = factory.start().await;
    let held = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(TTL - 1);

    for (lease_id, owner_id) in [("lease-b", "worker-b"), ("lease-b", "worker-a")] {
        let request = acquire(lease_id, owner_id, TTL);
        let contested = h
            .store
            .acquire_execution_lease(TENANT, SESSION, request)
            .await;
        expect_runtime(contested, RuntimeErrorCode::LeaseConflict);
    }
    assert_eq!(lease(&h).await, Some(held));
}

pub async fn acquire_after_expiry_increments_the_token(factory: Factory) {
    let h = factory.start().await;
    let first = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(TTL + 1);

    let successor = h.acquire_lease(SESSION, "lease-b", "worker-b", TTL).await;

    assert_eq!(successor.fencing_token, first.fencing_token + 1);
    assert_eq!(successor.acquired_at_ms, h.now());
}

pub async fn acquire_after_release_increments_the_token(factory: Factory) {
    let h = factory.start().await;
    let first = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.store
        .release_execution_lease(TENANT, &first)
        .await
        .expect("release");

    let successor = h.acquire_lease(SESSION, "lease-b", "worker-b", TTL).await;

    assert_eq!(successor.fencing_token, first.fencing_token + 1);
    assert_eq!(successor.released_at_ms, None);
}

pub async fn renew_extends_an_active_lease(factory: Factory) {
    let h = factory.start().await;
    let held = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(TTL / 2);

    let renewed = h
        .store
        .renew_execution_lease(TENANT, &held, 2 * TTL)
        .await
        .expect("renew");

    assert_eq!(renewed.fencing_token, held.fencing_token);
    assert_eq!(renewed.renewed_at_ms, held.renewed_at_ms + TTL / 2);
    assert_eq!(renewed.expires_at_ms, renewed.renewed_at_ms + 2 * TTL);
    assert_eq!(lease(&h).await, Some(renewed.clone()));
    assert_eq!(
        h.store.assert_execution_lease(TENANT, &renewed).await,
        Ok(())
    );
}

pub async fn renew_and_assert_after_expiry_are_lost(factory: Factory) {
    let h = factory.start().await;
    let held = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(TTL + 1);

    let renewed = h.store.renew_execution_lease(TENANT, &held, TTL).await;
    let asserted = h.store.assert_execution_lease(TENANT, &held).await;

    expect_runtime(renewed, RuntimeErrorCode::LeaseLost);
    expect_runtime(asserted, RuntimeErrorCode::LeaseLost);
}

/// Once a successor holds the session, nothing the old holder does with its lease succeeds.
pub async fn stale_lease_is_lost_after_a_successor(factory: Factory) {
    let h = factory.start().await;
    let stale = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(TTL + 1);
    let successor = h.acquire_lease(SESSION, "lease-b", "worker-b", TTL).await;

    let renewed = h.store.renew_execution_lease(TENANT, &stale, TTL).await;
    let asserted = h.store.assert_execution_lease(TENANT, &stale).await;
    let released = h.store.release_execution_lease(TENANT, &stale).await;

    expect_runtime(renewed, RuntimeErrorCode::LeaseLost);
    expect_runtime(asserted, RuntimeErrorCode::LeaseLost);
    expect_runtime(released, RuntimeErrorCode::LeaseLost);
    assert_eq!(lease(&h).await, Some(successor));
}

pub async fn release_is_idempotent(factory: Factory) {
    let h = factory.start().await;
    let held = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;

    let first = h.store.release_execution_lease(TENANT, &held).await;
    h.advance(1);
    let second = h.store.release_execution_lease(TENANT, &held).await;

    assert_eq!((first, second), (Ok(()), Ok(())));
    let released = lease(&h).await.expect("the lease row stays");
    assert_eq!(released.released_at_ms, Some(h.now() - 1));
    expect_runtime(
        h.store.assert_execution_lease(TENANT, &held).await,
        RuntimeErrorCode::LeaseLost,
    );
}

/// Release checks the match but not the expiry.
pub async fn release_after_expiry_succeeds(factory: Factory) {
    let h = factory.start().await;
    let held = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(TTL + 1);

    let released = h.store.release_execution_lease(TENANT, &held).await;

    assert_eq!(released, Ok(()));
}

/// `requires_execution_lease` stays true after expiry and release.
pub async fn lease_requirement_is_sticky(factory: Factory) {
    let h = factory.start().await;
    let held = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(TTL + 1);
    assert!(requires_lease(&h).await);

    h.store
        .release_execution_lease(TENANT, &held)
        .await
        .unwrap();

    assert!(requires_lease(&h).await);
}

/// Blank ids and a TTL outside 1 ..= 24 h are `DURABLE_EXECUTION_LEASE_INVALID`.
pub async fn acquire_validates_ttl_and_ids(factory: Factory) {
    let h = factory.start().await;
    let requests = [
        acquire("lease-a", "worker-a", 0),
        acquire("lease-a", "worker-a", MAX_LEASE_TTL_MS + 1),
        acquire(" ", "worker-a", TTL),
        acquire("lease-a", "", TTL),
    ];
    for request in requests {
        let acquired = h
            .store
            .acquire_execution_lease(TENANT, SESSION, request)
            .await;
        expect_runtime(acquired, RuntimeErrorCode::LeaseInvalid);
    }

    assert!(!requires_lease(&h).await);
    h.acquire_lease(SESSION, "lease-a", "worker-a", MAX_LEASE_TTL_MS)
        .await;
}

pub async fn leases_are_partitioned_by_tenant(factory: Factory) {
    let h = factory.start().await;
    h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;

    let theirs = h
        .store
        .acquire_execution_lease(OTHER_TENANT, SESSION, acquire("lease-b", "worker-b", TTL))
        .await
        .expect("another tenant's session is another session");

    assert_eq!(theirs.fencing_token, 1);
    let mine = lease(&h).await.expect("mine is untouched");
    assert_eq!(mine.lease_id, "lease-a");
}

// ---------------------------------------------------------------------------------------------
// The fencing table of docs/storage.md §4.2

#[derive(Clone, Copy, Debug)]
enum Writer {
    Events,
    Durable,
    Transcript,
}

const WRITERS: [Writer; 3] = [Writer::Events, Writer::Durable, Writer::Transcript];

/// Creates the transcript while the session is still unfenced, so every writer can write.
async fn prepare(h: &Harness) {
    h.store
        .create_transcript(TENANT, SESSION, None)
        .await
        .expect("create transcript");
}

/// One fenced write through `writer`.
async fn write(h: &Harness, writer: Writer, fence: Option<&ExecutionFence>) -> StoreResult<()> {
    match writer {
        Writer::Events => {
            let events = vec![stream_event(SESSION, "fenced")];
            let appended = h.store.append_events(TENANT, SESSION, events, fence).await;
            appended.map(drop)
        }
        Writer::Durable => {
            let durable = h
                .store
                .append_durable(TENANT, SESSION, drafts(1), ExpectedSequence::Any, fence)
                .await;
            durable.map(drop)
        }
        Writer::Transcript => {
            let message = obj(json!({ "role": "user", "content": "fenced" }));
            let mutation = TranscriptMutation::AppendMessages(vec![message]);
            h.store
                .mutate_transcript(TENANT, SESSION, mutation, fence)
                .await
                .map(drop)
        }
    }
}

#[track_caller]
fn expect_rejected(result: StoreResult<()>, writer: Writer, code: RuntimeErrorCode) {
    match result {
        Err(crate::StoreError::Runtime { code: got, .. }) if got == code => {}
        other => panic!("{writer:?}: expected {code}, got {other:?}"),
    }
}

/// No lease row, fence given: LOST.
pub async fn fenced_write_without_any_lease_is_lost(factory: Factory) {
    let h = factory.start().await;
    prepare(&h).await;
    let invented = ExecutionFence {
        lease_id: "lease-a".to_owned(),
        fencing_token: 1,
    };

    for writer in WRITERS {
        let result = write(&h, writer, Some(&invented)).await;
        expect_rejected(result, writer, RuntimeErrorCode::LeaseLost);
    }
}

/// A lease row exists, no fence: REQUIRED, while the lease is active and after its release.
pub async fn unfenced_write_to_a_leased_session_requires_a_lease(factory: Factory) {
    let h = factory.start().await;
    prepare(&h).await;
    let held = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;

    for writer in WRITERS {
        let result = write(&h, writer, None).await;
        expect_rejected(result, writer, RuntimeErrorCode::LeaseRequired);
    }
    h.store
        .release_execution_lease(TENANT, &held)
        .await
        .unwrap();
    for writer in WRITERS {
        let result = write(&h, writer, None).await;
        expect_rejected(result, writer, RuntimeErrorCode::LeaseRequired);
    }
}

/// The predecessor's fence never matches again once a successor holds a higher token.
pub async fn stale_fence_after_a_successor_is_lost(factory: Factory) {
    let h = factory.start().await;
    prepare(&h).await;
    let stale = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(TTL + 1);
    let successor = h.acquire_lease(SESSION, "lease-b", "worker-b", TTL).await;

    for writer in WRITERS {
        let rejected = write(&h, writer, Some(&stale.fence())).await;
        expect_rejected(rejected, writer, RuntimeErrorCode::LeaseLost);
        let accepted = write(&h, writer, Some(&successor.fence())).await;
        assert_eq!(accepted, Ok(()), "{writer:?} with the successor's fence");
    }
}

/// A fence must be active, not only current.
pub async fn expired_or_released_fence_is_lost(factory: Factory) {
    let h = factory.start().await;
    prepare(&h).await;
    let held = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    h.advance(TTL + 1);

    for writer in WRITERS {
        let result = write(&h, writer, Some(&held.fence())).await;
        expect_rejected(result, writer, RuntimeErrorCode::LeaseLost);
    }
    let second_holder = h.acquire_lease(SESSION, "lease-b", "worker-b", TTL).await;
    h.store
        .release_execution_lease(TENANT, &second_holder)
        .await
        .unwrap();
    for writer in WRITERS {
        let result = write(&h, writer, Some(&second_holder.fence())).await;
        expect_rejected(result, writer, RuntimeErrorCode::LeaseLost);
    }
}

/// The matching fence writes, and batches stay contiguous on both logs.
pub async fn matching_fence_appends_contiguous_sequences(factory: Factory) {
    let h = factory.start().await;
    let held = h.acquire_lease(SESSION, "lease-a", "worker-a", TTL).await;
    let fence = held.fence();

    let batch = vec![stream_event(SESSION, "a"), stream_event(SESSION, "b")];
    let first = h
        .store
        .append_events(TENANT, SESSION, batch, Some(&fence))
        .await
        .unwrap();
    let second = h
        .store
        .append_events(
            TENANT,
            SESSION,
            vec![stream_event(SESSION, "c")],
            Some(&fence),
        )
        .await
        .unwrap();
    let durable_first = h
        .store
        .append_durable(
            TENANT,
            SESSION,
            drafts(2),
            ExpectedSequence::Empty,
            Some(&fence),
        )
        .await
        .unwrap();
    let durable_second = h
        .store
        .append_durable(
            TENANT,
            SESSION,
            drafts(1),
            ExpectedSequence::At(2),
            Some(&fence),
        )
        .await
        .unwrap();

    assert_eq!(sequences(&first), vec![1, 2]);
    assert_eq!(sequences(&second), vec![3]);
    let durable: Vec<u64> = (durable_first.events.iter())
        .chain(&durable_second.events)
        .map(|event| event.sequence)
        .collect();
    assert_eq!(durable, vec![1, 2, 3]);
    assert_eq!(h.store.durable_head(TENANT, SESSION).await, Ok(Some(3)));
}
