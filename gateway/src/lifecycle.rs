//! The phases of a gateway's shutdown, in the order they happen:
//!
//! 1. **not ready**: `readyz` answers 503 while everything else is still served, for
//!    `shutdown_readiness_delay`, so that load balancers stop routing here first;
//! 2. **draining**: the listener is closed; open SSE streams end cleanly (their last frame is
//!    flushed, then EOF, and clients resume from their last sequence elsewhere); commands that
//!    still arrive are refused with a retryable `OVERLOADED`; connections close once their
//!    in-flight request is answered; sealed commands run to their end;
//! 3. **forced**: past `shutdown_grace`, connections that are still open are dropped.

use tokio_util::sync::CancellationToken;

#[derive(Debug, Default)]
pub struct Lifecycle {
    not_ready: CancellationToken,
    draining: CancellationToken,
    forced: CancellationToken,
}

impl Lifecycle {
    pub fn mark_not_ready(&self) {
        self.not_ready.cancel();
    }

    /// Draining implies not ready.
    pub fn begin_drain(&self) {
        self.not_ready.cancel();
        self.draining.cancel();
    }

    pub fn force(&self) {
        self.begin_drain();
        self.forced.cancel();
    }

    pub fn is_ready(&self) -> bool {
        !self.not_ready.is_cancelled()
    }

    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Fires when draining begins (SSE streams end on it).
    pub fn draining(&self) -> &CancellationToken {
        &self.draining
    }

    pub fn forced(&self) -> &CancellationToken {
        &self.forced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_implies_the_ones_before() {
        let lifecycle = Lifecycle::default();
        assert!(lifecycle.is_ready() && !lifecycle.is_draining());
        lifecycle.mark_not_ready();
        assert!(!lifecycle.is_ready() && !lifecycle.is_draining());
        let forced = Lifecycle::default();
        forced.force();
        assert!(!forced.is_ready() && forced.is_draining());
        assert!(forced.forced().is_cancelled());
    }
}
