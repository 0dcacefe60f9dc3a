//! Per-tenant command admission (docs/protocol.md §8.1): a sliding-window rate limit, a concurrency
//! limit, and a bounded FIFO queue of waiters. Tenants never affect each other.
//!
//! A waiter that goes away (its HTTP request was dropped) leaves the queue at once: the queued
//! future removes itself on drop. A slot is held by an [`AdmissionPermit`] and handed straight to
//! the next live waiter when the permit is dropped, so slots cannot leak even when a permit is
//! dropped while in flight to a waiter that just left.

use agent_runtime::sync::Locked;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use agent_runtime::clock::SharedClock;
use tokio::sync::oneshot;

#[cfg(test)]
mod tests;

/// Limits of one tenant (defaults from docs/protocol.md §8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Commands running at once per tenant. Default 8.
    pub max_concurrent_commands: usize,
    /// Commands waiting for a slot per tenant. Default 64.
    pub max_queued_commands: usize,
    /// Commands admitted per sliding minute per tenant. Default 600.
    pub commands_per_minute: usize,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        Self {
            max_concurrent_commands: 8,
            max_queued_commands: 64,
            commands_per_minute: 600,
        }
    }
}

/// Why a command was not admitted. Neither outcome is cached under the command id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionError {
    /// The tenant used its per-minute budget; retry after this many milliseconds.
    RateLimited { retry_after_ms: u64 },
    /// All slots are busy and the queue is full.
    QueueFull,
}

const WINDOW_MS: u64 = 60_000;

/// The admission controller shared by every request of a gateway process.
#[derive(Clone, Debug)]
pub struct TenantAdmission {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limits: AdmissionLimits,
    /// Tenants whose limits differ from `limits` (`[[gateway.tenant_limits]]`).
    overrides: HashMap<String, AdmissionLimits>,
    clock: SharedClock,
    tenants: Mutex<Tenants>,
}

#[derive(Debug, Default)]
struct Tenants {
    by_id: HashMap<String, TenantState>,
    last_sweep_ms: u64,
}

#[derive(Debug, Default)]
struct TenantState {
    active: usize,
    /// Requests of the tenant inside their command claim (a store call, before admission).
    claiming: usize,
    next_waiter_id: u64,
    queue: VecDeque<Waiter>,
    /// Admission timestamps within the last minute, oldest first.
    window: VecDeque<u64>,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    grant: oneshot::Sender<AdmissionPermit>,
}

impl TenantState {
    /// Forgets admissions older than the window.
    fn prune_window(&mut self, now: u64) {
        while self.window.front().is_some_and(|&at| at + WINDOW_MS <= now) {
            self.window.pop_front();
        }
    }

    /// The wait before the next admission when the budget of the window is spent.
    fn rate_limited(&self, now: u64, per_minute: usize) -> Option<u64> {
        (self.window.len() >= per_minute).then(|| {
            let oldest = self.window.front().copied().unwrap_or(now);
            (oldest + WINDOW_MS).saturating_sub(now).max(1)
        })
    }

    fn is_idle(&self) -> bool {
        self.active == 0 && self.claiming == 0 && self.queue.is_empty() && self.window.is_empty()
    }
}

/// A held command slot; dropping it releases the slot (or hands it to the next waiter).
#[derive(Debug)]
pub struct AdmissionPermit {
    /// `None` once the slot has been accounted for elsewhere (see `Inner::release`).
    inner: Option<Arc<Inner>>,
    tenant: String,
    /// When [`TenantAdmission::try_acquire_now`] spent the rate budget for it.
    admitted_at_ms: Option<u64>,
}

impl AdmissionPermit {
    /// Releases the slot and gives back the rate budget a [`TenantAdmission::try_acquire_now`]
    /// spent: for a command that turned out not to run (a replay, a conflict), which must cost
    /// the tenant no more than it does when admission comes after the claim.
    pub fn refund(mut self) {
        let (Some(inner), Some(at)) = (self.inner.as_ref(), self.admitted_at_ms.take()) else {
            return;
        };
        let mut tenants = inner.lock();
        if let Some(state) = tenants.by_id.get_mut(&self.tenant)
            && let Some(index) = state.window.iter().rposition(|&admitted| admitted == at)
        {
            state.window.remove(index);
        }
    }
}

impl Drop for AdmissionPermit {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            inner.release(&self.tenant);
        }
    }
}

impl TenantAdmission {
    pub fn new(limits: AdmissionLimits, clock: SharedClock) -> Self {
        Self::with_overrides(limits, HashMap::new(), clock)
    }

    /// Limits per named tenant on top of the default `limits`.
    pub fn with_overrides(
        limits: AdmissionLimits,
        overrides: HashMap<String, AdmissionLimits>,
        clock: SharedClock,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                limits,
                overrides,
                clock,
                tenants: Mutex::new(Tenants::default()),
            }),
        }
    }

    /// The limits `tenant` is admitted under.
    pub fn limits(&self, tenant: &str) -> AdmissionLimits {
        self.inner.limits_for(tenant)
    }

    /// Admits one command of `tenant`, waiting in the tenant's FIFO queue if every slot is busy.
    /// Dropping the returned future while it waits removes the waiter from the queue.
    pub async fn acquire(&self, tenant: &str) -> Result<AdmissionPermit, AdmissionError> {
        let (waiter_id, receiver) = match self.inner.try_admit(tenant)? {
            Admitted::Now(permit) => return Ok(permit),
            Admitted::Queued { id, receiver } => (id, receiver),
        };
        let guard = QueuedGuard {
            inner: &self.inner,
            tenant,
            id: waiter_id,
        };
        let permit = receiver
            .await
            .expect("a queued waiter's sender is only dropped after granting or removal");
        std::mem::forget(guard);
        Ok(permit)
    }

    /// A slot of `tenant` if one is free now, without queueing; `None` when the tenant is rate
    /// limited, every slot is busy or others wait (then [`Self::acquire`] decides, in order).
    /// The admission spends the rate budget; [`AdmissionPermit::refund`] gives it back.
    pub fn try_acquire_now(&self, tenant: &str) -> Option<AdmissionPermit> {
        let limits = self.inner.limits_for(tenant);
        let now = self.inner.clock.now_ms();
        let mut tenants = self.inner.lock();
        let state = tenants.by_id.entry(tenant.to_owned()).or_default();
        state.prune_window(now);
        let free = state.active < limits.max_concurrent_commands && state.queue.is_empty();
        if !free
            || state
                .rate_limited(now, limits.commands_per_minute)
                .is_some()
        {
            return None;
        }
        state.window.push_back(now);
        state.active += 1;
        let mut permit = self.inner.permit(tenant);
        permit.admitted_at_ms = Some(now);
        Some(permit)
    }

    /// Lets one request of `tenant` into its command claim, which comes before admission (a
    /// replay must not wait for a slot) but is a store call. At most `max_concurrent_commands +
    /// max_queued_commands` of a tenant's requests may be in it at once: a database that slows
    /// down then sheds the excess at once (`QueueFull`) instead of piling up requests, and
    /// connections, behind it (catalogue RES-12). Dropping the ticket leaves the claim.
    pub fn enter_claim(&self, tenant: &str) -> Result<ClaimTicket, AdmissionError> {
        let limits = self.inner.limits_for(tenant);
        let now = self.inner.clock.now_ms();
        let mut tenants = self.inner.lock();
        let state = tenants.by_id.entry(tenant.to_owned()).or_default();
        if state.claiming >= limits.max_concurrent_commands + limits.max_queued_commands {
            // Refused like a full queue, and like one it spends the rate budget, so a flood is
            // told to slow down (429) once the budget is gone.
            state.prune_window(now);
            if let Some(retry_after_ms) = state.rate_limited(now, limits.commands_per_minute) {
                return Err(AdmissionError::RateLimited { retry_after_ms });
            }
            state.window.push_back(now);
            return Err(AdmissionError::QueueFull);
        }
        state.claiming += 1;
        Ok(ClaimTicket {
            inner: Arc::clone(&self.inner),
            tenant: tenant.to_owned(),
        })
    }

    /// Number of tenants with state held in memory (for tests and metrics).
    pub fn tracked_tenants(&self) -> usize {
        self.inner.lock().by_id.len()
    }
}

/// A request's place in its tenant's command claim (see [`TenantAdmission::enter_claim`]).
#[derive(Debug)]
pub struct ClaimTicket {
    inner: Arc<Inner>,
    tenant: String,
}

impl Drop for ClaimTicket {
    fn drop(&mut self) {
        let mut tenants = self.inner.lock();
        if let Some(state) = tenants.by_id.get_mut(&self.tenant) {
            state.claiming = state.claiming.saturating_sub(1);
        }
    }
}

enum Admitted {
    Now(AdmissionPermit),
    Queued {
        id: u64,
        receiver: oneshot::Receiver<AdmissionPermit>,
    },
}

/// Removes a queued waiter whose future was dropped before it got a slot.
struct QueuedGuard<'a> {
    inner: &'a Arc<Inner>,
    tenant: &'a str,
    id: u64,
}

impl Drop for QueuedGuard<'_> {
    fn drop(&mut self) {
        let mut tenants = self.inner.lock();
        if let Some(state) = tenants.by_id.get_mut(self.tenant) {
            state.queue.retain(|waiter| waiter.id != self.id);
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tenants> {
        // A panic while holding this lock cannot leave the counters half-updated in a way that
        // matters more than refusing service, so recover the guard.
        self.tenants.locked()
    }

    fn limits_for(&self, tenant: &str) -> AdmissionLimits {
        self.overrides.get(tenant).copied().unwrap_or(self.limits)
    }

    fn try_admit(self: &Arc<Self>, tenant: &str) -> Result<Admitted, AdmissionError> {
        let limits = self.limits_for(tenant);
        let now = self.clock.now_ms();
        let mut tenants = self.lock();
        if now.saturating_sub(tenants.last_sweep_ms) >= WINDOW_MS {
            tenants.last_sweep_ms = now;
            forget_idle_tenants(&mut tenants.by_id, now);
        }
        let state = tenants.by_id.entry(tenant.to_owned()).or_default();

        state.prune_window(now);
        if let Some(retry_after_ms) = state.rate_limited(now, limits.commands_per_minute) {
            return Err(AdmissionError::RateLimited { retry_after_ms });
        }
        // The reference consumes the rate budget even when the queue then rejects.
        state.window.push_back(now);

        if state.active < limits.max_concurrent_commands {
            state.active += 1;
            return Ok(Admitted::Now(self.permit(tenant)));
        }
        if state.queue.len() >= limits.max_queued_commands {
            return Err(AdmissionError::QueueFull);
        }
        let (grant, receiver) = oneshot::channel();
        let id = state.next_waiter_id;
        state.next_waiter_id += 1;
        state.queue.push_back(Waiter { id, grant });
        Ok(Admitted::Queued { id, receiver })
    }

    fn permit(self: &Arc<Self>, tenant: &str) -> AdmissionPermit {
        AdmissionPermit {
            inner: Some(Arc::clone(self)),
            tenant: tenant.to_owned(),
            admitted_at_ms: None,
        }
    }

    fn release(self: &Arc<Self>, tenant: &str) {
        let mut tenants = self.lock();
        let Some(state) = tenants.by_id.get_mut(tenant) else {
            return;
        };
        // Hand the slot to the first waiter that is still there. A waiter whose receiver is gone
        // returns the permit through `send`'s error; dropping it as is would re-enter this
        // function under the lock, so defuse it first.
        while let Some(waiter) = state.queue.pop_front() {
            match waiter.grant.send(self.permit(tenant)) {
                Ok(()) => return,
                Err(mut unsent) => unsent.inner = None,
            }
        }
        state.active = state.active.saturating_sub(1);
    }
}

/// Drops per-tenant state that has been idle for a whole window, so memory stays bounded by the
/// tenants active in the last minute or so (swept at most once a window).
fn forget_idle_tenants(tenants: &mut HashMap<String, TenantState>, now: u64) {
    tenants.retain(|_, state| {
        state.prune_window(now);
        !state.is_idle()
    });
}
