//! Which sessions this process has loaded, the per-tenant cap with reservations (decision P11),
//! and the per-session serialisation of commands.

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_runtime::protocol::ProtocolError;

use crate::config::SessionCaps;
use crate::session::LiveSession;

type Key = (String, String);

fn key(tenant_id: &str, session_id: &str) -> Key {
    (tenant_id.to_owned(), session_id.to_owned())
}

#[derive(Debug, Default)]
struct Sessions {
    live: HashMap<Key, Arc<LiveSession>>,
    /// In-flight create / resume / fork operations per tenant, counted against the cap.
    reserved: HashMap<String, usize>,
}

#[derive(Debug)]
pub(crate) struct Registry {
    caps: SessionCaps,
    sessions: Mutex<Sessions>,
    /// One async lock per session: commands of a session run strictly in order.
    locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// A held place under the tenant's cap; dropping it gives the place back.
pub(crate) struct Reservation<'a> {
    registry: &'a Registry,
    tenant_id: String,
    held: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held {
            let mut sessions = self.registry.lock_sessions();
            release_reservation(&mut sessions, &self.tenant_id);
        }
    }
}

fn release_reservation(sessions: &mut Sessions, tenant_id: &str) {
    if let Some(count) = sessions.reserved.get_mut(tenant_id) {
        *count -= 1;
        if *count == 0 {
            sessions.reserved.remove(tenant_id);
        }
    }
}

impl Registry {
    pub fn new(caps: SessionCaps) -> Self {
        Self {
            caps,
            sessions: Mutex::default(),
            locks: Mutex::default(),
        }
    }

    fn lock_sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.locked()
    }

    pub fn get(&self, tenant_id: &str, session_id: &str) -> Option<Arc<LiveSession>> {
        self.lock_sessions()
            .live
            .get(&key(tenant_id, session_id))
            .cloned()
    }

    /// Reserves a place for a session about to be loaded, or `OVERLOADED`.
    pub fn reserve(&self, tenant_id: &str) -> Result<Reservation<'_>, ProtocolError> {
        let mut sessions = self.lock_sessions();
        let live = sessions
            .live
            .keys()
            .filter(|(tenant, _)| tenant == tenant_id)
            .count();
        let reserved = sessions.reserved.get(tenant_id).copied().unwrap_or(0);
        if live + reserved >= self.caps.for_tenant(tenant_id) {
            return Err(ProtocolError::session_limit());
        }
        *sessions.reserved.entry(tenant_id.to_owned()).or_default() += 1;
        Ok(Reservation {
            registry: self,
            tenant_id: tenant_id.to_owned(),
            held: true,
        })
    }

    /// Turns a reservation into a live session.
    pub fn register(&self, mut reservation: Reservation<'_>, session: Arc<LiveSession>) {
        let mut sessions = self.lock_sessions();
        release_reservation(&mut sessions, &reservation.tenant_id);
        reservation.held = false;
        sessions
            .live
            .insert(key(&session.tenant_id, &session.session_id), session);
    }

    pub fn remove(&self, tenant_id: &str, session_id: &str) -> Option<Arc<LiveSession>> {
        self.lock_sessions()
            .live
            .remove(&key(tenant_id, session_id))
    }

    pub fn keys(&self) -> Vec<(String, String)> {
        self.lock_sessions().live.keys().cloned().collect()
    }

    pub fn drain(&self) -> Vec<Arc<LiveSession>> {
        self.lock_sessions()
            .live
            .drain()
            .map(|(_, session)| session)
            .collect()
    }

    /// Runs `operation` while holding the session's command lock.
    pub async fn serialized<T>(
        &self,
        tenant_id: &str,
        session_id: &str,
        operation: impl std::future::Future<Output = T>,
    ) -> T {
        let session_key = key(tenant_id, session_id);
        let lock = {
            let mut locks = self.locks.locked();
            Arc::clone(locks.entry(session_key.clone()).or_default())
        };
        let outcome = {
            let _guard = lock.lock().await;
            operation.await
        };
        // Forget the lock once nobody else holds or waits for it, so the map stays small.
        let mut locks = self.locks.locked();
        if Arc::strong_count(&lock) == 2 {
            locks.remove(&session_key);
        }
        outcome
    }
}
