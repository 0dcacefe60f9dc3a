//! Retry delays (docs/protocol.md §11.3 and §11.4) and cancellable waiting.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::error::ClientError;

/// The wait before retry number `attempt` (1 for the retry after the first failure): the server's
/// `retry_after` when it gave one, else `base × 2^(attempt−1)` plus a jitter in `[0, base)`.
pub fn retry_delay(base: Duration, attempt: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(wait) = retry_after {
        return wait;
    }
    let jitter_ms = match u64::try_from(base.as_millis()) {
        Ok(0) | Err(_) => 0,
        Ok(base_ms) => rand::rng().random_range(0..base_ms),
    };
    backoff(base, attempt) + Duration::from_millis(jitter_ms)
}

/// `base × 2^(attempt−1)` without jitter, saturating instead of overflowing.
pub fn backoff(base: Duration, attempt: u32) -> Duration {
    let exponent = attempt.saturating_sub(1).min(31);
    base.saturating_mul(1u32 << exponent)
}

/// Runs `future` unless `cancel` fires first.
pub(crate) async fn cancellable<T>(
    cancel: Option<&CancellationToken>,
    future: impl Future<Output = T>,
) -> Result<T, ClientError> {
    match cancel {
        None => Ok(future.await),
        Some(token) => tokio::select! {
            biased;
            () = token.cancelled() => Err(ClientError::cancelled()),
            value = future => Ok(value),
        },
    }
}

/// Sleeps for `delay` unless `cancel` fires first.
pub(crate) async fn sleep(
    cancel: Option<&CancellationToken>,
    delay: Duration,
) -> Result<(), ClientError> {
    cancellable(cancel, tokio::time::sleep(delay)).await
}

#[cfg(test)]
mod tests;
