use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;

const BASE: Duration = Duration::from_millis(250);

#[test]
fn backoff_doubles_per_attempt() {
    assert_eq!(backoff(BASE, 1), Duration::from_millis(250));
    assert_eq!(backoff(BASE, 2), Duration::from_millis(500));
    assert_eq!(backoff(BASE, 3), Duration::from_millis(1000));
    assert_eq!(backoff(BASE, 0), Duration::from_millis(250));
}

#[test]
fn backoff_saturates_instead_of_overflowing() {
    let huge = backoff(Duration::from_secs(3600), 1000);
    assert_eq!(huge, Duration::from_secs(3600).saturating_mul(1 << 31));
}

#[test]
fn delay_adds_a_jitter_below_the_base() {
    for attempt in 1..=4 {
        for _ in 0..200 {
            let delay = retry_delay(BASE, attempt, None);
            let floor = backoff(BASE, attempt);
            assert!(delay >= floor, "{delay:?} < {floor:?}");
            assert!(delay < floor + BASE, "{delay:?} >= {floor:?} + base");
        }
    }
}

#[test]
fn the_servers_retry_after_wins() {
    let wait = Duration::from_millis(1234);
    assert_eq!(retry_delay(BASE, 3, Some(wait)), wait);
    assert_eq!(retry_delay(BASE, 1, Some(Duration::ZERO)), Duration::ZERO);
}

#[test]
fn a_zero_base_means_no_delay() {
    assert_eq!(retry_delay(Duration::ZERO, 5, None), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_sleep_ends_with_cancelled() {
    let token = CancellationToken::new();
    token.cancel();
    let error = sleep(Some(&token), Duration::from_secs(3600))
        .await
        .unwrap_err();
    assert!(error.is_cancelled());
    assert!(sleep(None, Duration::from_millis(5)).await.is_ok());
}
