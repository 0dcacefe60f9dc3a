//! Caps on open SSE connections, per tenant and per process (RES-03). A connection holds a
//! [`StreamSlot`] from before its first byte until its body is dropped, so a refused stream is
//! answered as JSON (`503 OVERLOADED`, decision P2's "before any stream byte") and a closed one
//! frees its place at once, whoever closed it (the client, shutdown, or the slow-reader guard).

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::TenantQuotas;

/// Which cap refused a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamRefusal {
    /// The tenant holds `max_sse_connections_per_tenant` (or its override).
    Tenant,
    /// The process holds `max_sse_connections`.
    Process,
}

/// Every open stream of the process, counted per tenant.
#[derive(Clone, Debug)]
pub struct StreamSlots {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    max_total: usize,
    quotas: TenantQuotas,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_tenant: HashMap<String, usize>,
}

/// One open stream's place; dropping it gives the place back.
#[derive(Debug)]
pub struct StreamSlot {
    inner: Arc<Inner>,
    tenant: String,
}

impl StreamSlots {
    pub fn new(max_total: usize, quotas: TenantQuotas) -> Self {
        Self {
            inner: Arc::new(Inner {
                max_total,
                quotas,
                open: Mutex::new(Open::default()),
            }),
        }
    }

    /// Takes a place for one more stream of `tenant`. The tenant's cap is checked first, so a
    /// tenant at its own limit learns that, whatever the rest of the process does.
    pub fn acquire(&self, tenant: &str) -> Result<StreamSlot, StreamRefusal> {
        let tenant_cap = self.inner.quotas.for_tenant(tenant).max_sse_connections;
        let mut open = self.inner.lock();
        let held = open.by_tenant.get(tenant).copied().unwrap_or(0);
        if held >= tenant_cap {
            return Err(StreamRefusal::Tenant);
        }
        if open.total >= self.inner.max_total {
            return Err(StreamRefusal::Process);
        }
        open.total += 1;
        *open.by_tenant.entry(tenant.to_owned()).or_default() += 1;
        Ok(StreamSlot {
            inner: Arc::clone(&self.inner),
            tenant: tenant.to_owned(),
        })
    }

    /// Streams open now: the process total and `tenant`'s.
    pub fn open(&self, tenant: &str) -> (usize, usize) {
        let open = self.inner.lock();
        let held = open.by_tenant.get(tenant).copied().unwrap_or(0);
        (open.total, held)
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // Two counters updated together under the lock; a panic elsewhere cannot split them.
        self.open.locked()
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.inner.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(held) = open.by_tenant.get_mut(&self.tenant) {
            *held -= 1;
            if *held == 0 {
                open.by_tenant.remove(&self.tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{GatewayConfig, TenantLimits};

    fn slots(per_tenant: usize, total: usize, acme: Option<usize>) -> StreamSlots {
        let config = GatewayConfig {
            max_sse_connections_per_tenant: per_tenant,
            max_sse_connections: total,
            tenant_limits: acme
                .map(|cap| TenantLimits {
                    tenant: "acme".to_owned(),
                    max_sse_connections: Some(cap),
                    ..TenantLimits::default()
                })
                .into_iter()
                .collect(),
            ..GatewayConfig::default()
        };
        StreamSlots::new(total, TenantQuotas::from_config(&config))
    }

    #[test]
    fn a_tenant_at_its_cap_is_refused_and_others_are_not() {
        let slots = slots(2, 10, None);
        let _a1 = slots.acquire("a").unwrap();
        let a2 = slots.acquire("a").unwrap();
        assert_eq!(slots.acquire("a").unwrap_err(), StreamRefusal::Tenant);
        let _b1 = slots.acquire("b").unwrap();
        drop(a2);
        assert!(
            slots.acquire("a").is_ok(),
            "a closed stream frees its place"
        );
    }

    #[test]
    fn the_process_cap_counts_every_tenant() {
        let slots = slots(5, 2, None);
        let _a = slots.acquire("a").unwrap();
        let _b = slots.acquire("b").unwrap();
        assert_eq!(slots.acquire("c").unwrap_err(), StreamRefusal::Process);
        assert_eq!(slots.open("a"), (2, 1));
    }

    #[test]
    fn a_named_tenant_has_its_own_cap() {
        let slots = slots(1, 10, Some(3));
        let held: Vec<_> = (0..3).map(|_| slots.acquire("acme").unwrap()).collect();
        assert_eq!(slots.acquire("acme").unwrap_err(), StreamRefusal::Tenant);
        let _other = slots.acquire("other").unwrap();
        assert_eq!(slots.acquire("other").unwrap_err(), StreamRefusal::Tenant);
        drop(held);
        assert_eq!(slots.open("acme"), (1, 0));
    }
}
