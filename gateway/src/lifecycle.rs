//! The phases of a gateway's shutdown, in the order they happen:
//!
//! 1. **not ready**: `readyz` answers 503 while everything else is still served, for
//!    `shutdown_readiness_delay`, so that load balancers stop routing here first;
//! 2. **draining**: the listener is closed; commands that still arrive are refused with a
//!    retryable `OVERLOADED`; connections close once their in-flight request is answered; sealed
//!    commands run to their end; then the in-process executor stops its sessions, so that a
//!    running request's `EXECUTOR_SHUTDOWN` error and `result` are stored;
//! 3. **streams ending**: open SSE streams send what is stored by then (those terminal events
//!    included) and end cleanly (EOF; clients resume from their last sequence elsewhere);
//! 4. **forced**: past `shutdown_grace`, connections that are still open are dropped.

use tokio_util::sync::CancellationToken;

#[derive(Debug, Default)]
pub struct Lifecycle {
    not_ready: CancellationToken,
    draining: CancellationToken,
    streams_ending: CancellationToken,
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

    /// Ending streams implies draining.
    pub fn end_streams(&self) {
        self.begin_drain();
        self.streams_ending.cancel();
    }

    pub fn force(&self) {
        self.end_streams();
        self.forced.cancel();
    }

    pub fn is_ready(&self) -> bool {
        !self.not_ready.is_cancelled()
    }

    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Fires when draining begins.
    pub fn draining(&self) -> &CancellationToken {
        &self.draining
    }

    /// Fires when SSE streams send what is stored and end.
    pub fn streams_ending(&self) -> &CancellationToken {
        &self.streams_ending
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
        assert!(forced.streams_ending().is_cancelled() && forced.forced().is_cancelled());
    }
}
