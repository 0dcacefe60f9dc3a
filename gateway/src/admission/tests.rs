use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::ManualClock;

use super::*;

fn controller(limits: AdmissionLimits) -> (TenantAdmission, Arc<ManualClock>) {
    let clock = ManualClock::new(0);
    (TenantAdmission::new(limits, clock.clone()), clock)
}

fn limits(concurrent: usize, queued: usize, per_minute: usize) -> AdmissionLimits {
    AdmissionLimits {
        max_concurrent_commands: concurrent,
        max_queued_commands: queued,
        commands_per_minute: per_minute,
    }
}

/// Polls a future once so that it registers in the queue.
async fn enqueue<F: std::future::Future + Unpin>(future: &mut F) {
    let polled = tokio::time::timeout(Duration::from_millis(20), future).await;
    assert!(polled.is_err(), "the acquire should still be waiting");
}

#[tokio::test]
async fn item_35_full_queue_is_overloaded_and_release_admits_the_queued_waiter() {
    let (admission, _clock) = controller(limits(1, 1, 600));
    let first = admission
        .acquire("tenant-a")
        .await
        .expect("first is admitted");
    let mut second = Box::pin(admission.acquire("tenant-a"));
    enqueue(&mut second).await;

    let third = admission.acquire("tenant-a").await;
    assert_eq!(third.unwrap_err(), AdmissionError::QueueFull);

    drop(first);
    let second = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the queued waiter is admitted after the release");
    assert!(second.is_ok());
}

#[tokio::test]
async fn item_36_tenants_are_isolated() {
    let (admission, _clock) = controller(limits(1, 1, 600));
    let a = admission.acquire("tenant-a").await;
    let b = admission.acquire("tenant-b").await;
    assert!(a.is_ok());
    assert!(b.is_ok());
}

#[tokio::test]
async fn item_37_the_rate_limit_is_a_sliding_window() {
    let (admission, clock) = controller(limits(8, 8, 2));
    drop(admission.acquire("tenant-a").await.expect("t=0"));
    clock.set(59_999);
    drop(admission.acquire("tenant-a").await.expect("t=59999"));
    let third = admission.acquire("tenant-a").await.unwrap_err();
    assert_eq!(third, AdmissionError::RateLimited { retry_after_ms: 1 });

    clock.set(60_000);
    drop(
        admission
            .acquire("tenant-a")
            .await
            .expect("t=60000 frees the t=0 slot"),
    );
    let next = admission.acquire("tenant-a").await.unwrap_err();
    assert_eq!(
        next,
        AdmissionError::RateLimited {
            retry_after_ms: 59_999
        }
    );
}

#[tokio::test]
async fn item_38_an_abandoned_waiter_frees_its_queue_slot() {
    let (admission, _clock) = controller(limits(1, 1, 600));
    let holder = admission.acquire("tenant-a").await.expect("holder");
    let mut waiter = Box::pin(admission.acquire("tenant-a"));
    enqueue(&mut waiter).await;
    drop(waiter);

    // The queue has room again: a new acquire waits instead of failing.
    let mut later = Box::pin(admission.acquire("tenant-a"));
    enqueue(&mut later).await;
    drop(holder);
    let later = tokio::time::timeout(Duration::from_secs(5), later)
        .await
        .expect("admitted once the holder releases");
    assert!(later.is_ok());
}

#[tokio::test]
async fn a_slot_is_never_lost_when_every_waiter_left() {
    let (admission, _clock) = controller(limits(1, 4, 600));
    let holder = admission.acquire("tenant-a").await.expect("holder");
    for _ in 0..3 {
        let mut waiter = Box::pin(admission.acquire("tenant-a"));
        enqueue(&mut waiter).await;
        drop(waiter);
    }
    drop(holder);
    let again = tokio::time::timeout(Duration::from_millis(500), admission.acquire("tenant-a"))
        .await
        .expect("the slot came back");
    assert!(again.is_ok());
}

#[tokio::test]
async fn idle_tenants_are_forgotten_after_a_window() {
    let (admission, clock) = controller(limits(1, 1, 600));
    drop(admission.acquire("tenant-a").await.expect("a"));
    assert_eq!(admission.tracked_tenants(), 1);
    clock.advance(2 * WINDOW_MS);
    drop(admission.acquire("tenant-b").await.expect("b"));
    assert_eq!(
        admission.tracked_tenants(),
        1,
        "tenant-a was idle for a whole window"
    );
}

#[tokio::test]
async fn a_named_tenant_is_admitted_under_its_own_limits() {
    let clock = ManualClock::new(0);
    let overrides = HashMap::from([("acme".to_owned(), limits(8, 8, 1))]);
    let admission = TenantAdmission::with_overrides(limits(8, 8, 3), overrides, clock);
    assert_eq!(admission.limits("acme").commands_per_minute, 1);
    drop(admission.acquire("acme").await.expect("acme's first"));
    assert!(matches!(
        admission.acquire("acme").await,
        Err(AdmissionError::RateLimited { .. })
    ));
    // Everyone else keeps the default of three a minute.
    for _ in 0..3 {
        drop(
            admission
                .acquire("other")
                .await
                .expect("within the default"),
        );
    }
    assert!(admission.acquire("other").await.is_err());
}

#[test]
fn the_claim_holds_at_most_the_slots_and_the_queue_of_a_tenant() {
    let (admission, _clock) = controller(limits(2, 1, 600));
    let tickets: Vec<ClaimTicket> = (0..3)
        .map(|_| admission.enter_claim("tenant-a").expect("room"))
        .collect();
    assert_eq!(
        admission.enter_claim("tenant-a").unwrap_err(),
        AdmissionError::QueueFull
    );
    // Other tenants have their own room.
    let other = admission
        .enter_claim("tenant-b")
        .expect("tenant-b has room");
    drop(tickets);
    drop(other);
    let again: Vec<ClaimTicket> = (0..3)
        .map(|_| admission.enter_claim("tenant-a").expect("room again"))
        .collect();
    drop(again);
}

#[test]
fn refusals_at_a_full_claim_spend_the_rate_budget() {
    let (admission, _clock) = controller(limits(1, 0, 3));
    let _inside = admission.enter_claim("tenant-a").expect("room");
    for _ in 0..3 {
        assert_eq!(
            admission.enter_claim("tenant-a").unwrap_err(),
            AdmissionError::QueueFull
        );
    }
    assert!(matches!(
        admission.enter_claim("tenant-a").unwrap_err(),
        AdmissionError::RateLimited { .. }
    ));
}

#[tokio::test]
async fn a_slot_free_now_is_taken_without_queueing_and_never_ahead_of_a_waiter() {
    let (admission, _clock) = controller(limits(1, 1, 600));
    let now = admission.try_acquire_now("tenant-a").expect("a free slot");
    assert!(
        admission.try_acquire_now("tenant-a").is_none(),
        "the slot is busy"
    );
    let mut waiter = Box::pin(admission.acquire("tenant-a"));
    enqueue(&mut waiter).await;
    drop(now);
    // The waiter owns the freed slot: taking it now would jump the queue.
    assert!(admission.try_acquire_now("tenant-a").is_none());
    let admitted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is admitted")
        .expect("admitted");
    drop(admitted);
    assert!(admission.try_acquire_now("tenant-a").is_some());
}

#[test]
fn a_refunded_admission_gives_back_its_slot_and_its_rate_budget() {
    let (admission, _clock) = controller(limits(1, 1, 2));
    for _ in 0..5 {
        admission
            .try_acquire_now("tenant-a")
            .expect("a refund costs nothing")
            .refund();
    }
    drop(admission.try_acquire_now("tenant-a").expect("first of two"));
    drop(
        admission
            .try_acquire_now("tenant-a")
            .expect("second of two"),
    );
    assert!(
        admission.try_acquire_now("tenant-a").is_none(),
        "a rate-limited tenant is left to acquire, which answers the refusal"
    );
}
