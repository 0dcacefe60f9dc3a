//! What the router read lately: which executor holds a session, and that executor's record. A
//! command to a session it sent one to a moment ago goes to the same executor without reading the
//! route and the worker from PostgreSQL again.
//!
//! Kept for [`FRESH_FOR`] at most, and dropped as soon as a call to that executor fails: the
//! caller then reads the store again. The executor decides anyway: one that no longer holds the
//! session must acquire its lease first, which fencing makes safe. So a stale entry can cost a
//! command a retry, never a wrong write; and a session moves only when its owner drains (it
//! refuses: the entry is dropped) or loses its lease (a failure; the entry lives 1 s at most).

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agent_runtime_store::WorkerRecord;

/// How long an entry is used.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// Entries kept; past this many the cache starts over.
const MAX_ENTRIES: usize = 65_536;

type Key = (String, String);

#[derive(Default)]
pub struct RouteCache {
    owners: Mutex<HashMap<Key, (String, Instant)>>,
    workers: Mutex<HashMap<String, (WorkerRecord, Instant)>>,
}

fn fresh<T: Clone>(entry: Option<&(T, Instant)>) -> Option<T> {
    entry
        .filter(|(_, at)| at.elapsed() < FRESH_FOR)
        .map(|(value, _)| value.clone())
}

fn keep<K: std::hash::Hash + Eq, T>(map: &mut HashMap<K, (T, Instant)>, key: K, value: T) {
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map.insert(key, (value, Instant::now()));
}

impl RouteCache {
    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (String, Instant)>> {
        self.owners.locked()
    }

    fn workers(&self) -> std::sync::MutexGuard<'_, HashMap<String, (WorkerRecord, Instant)>> {
        self.workers.locked()
    }

    /// The executor record of the session's owner, if both were read lately.
    pub fn owner(&self, tenant_id: &str, session_id: &str) -> Option<WorkerRecord> {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        let worker_id = fresh(self.owners().get(&key))?;
        fresh(self.workers().get(&worker_id))
    }

    pub fn remember(&self, tenant_id: &str, session_id: &str, worker: &WorkerRecord) {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        keep(&mut self.owners(), key, worker.worker_id.clone());
        keep(
            &mut self.workers(),
            worker.worker_id.clone(),
            worker.clone(),
        );
    }

    /// After a failed call to `worker_id` for the session: neither is used again before it is
    /// read anew.
    pub fn forget(&self, tenant_id: &str, session_id: &str, worker_id: &str) {
        self.owners()
            .remove(&(tenant_id.to_owned(), session_id.to_owned()));
        self.workers().remove(worker_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(id: &str) -> WorkerRecord {
        WorkerRecord {
            worker_id: id.to_owned(),
            status: agent_runtime_store::WorkerStatus::Active,
            capacity: 10,
            metadata: Default::default(),
            registered_at_ms: 0,
            last_heartbeat_at_ms: 0,
            lease_expires_at_ms: u64::MAX,
            draining_at_ms: None,
        }
    }

    #[test]
    fn an_owner_is_remembered_per_session_until_a_call_to_it_fails() {
        let cache = RouteCache::default();
        assert!(cache.owner("t", "s1").is_none());
        cache.remember("t", "s1", &worker("w1"));
        cache.remember("t", "s2", &worker("w1"));
        assert_eq!(cache.owner("t", "s1").unwrap().worker_id, "w1");
        assert!(cache.owner("other", "s1").is_none(), "per tenant");
        cache.forget("t", "s1", "w1");
        assert!(cache.owner("t", "s1").is_none());
        assert!(
            cache.owner("t", "s2").is_none(),
            "the worker's record is read again for every session"
        );
    }

    #[test]
    fn an_entry_older_than_its_freshness_is_not_used() {
        let cache = RouteCache::default();
        cache.remember("t", "s", &worker("w"));
        let stale = Instant::now()
            .checked_sub(FRESH_FOR)
            .expect("the clock is past one second");
        cache
            .owners()
            .insert(("t".to_owned(), "s".to_owned()), ("w".to_owned(), stale));
        assert!(cache.owner("t", "s").is_none());
    }
}
