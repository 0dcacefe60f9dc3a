//! docs/storage.md §10.D: the memory store's journal hook, snapshot and restore (cases 31-34).

use std::sync::{Arc, Mutex};

use crate::support::{
    T, assert_retention_scenario_restored, event, lease_of, session, write_retention_scenario,
};
use agent_runtime::clock::ManualClock;
use agent_runtime_store::*;
use serde_json::{Value, json};

#[derive(Default)]
struct Recording {
    entries: Mutex<Vec<JournalEntry>>,
}

impl Journal for Recording {
    fn append(&self, entries: &[JournalEntry]) -> StoreResult<()> {
        self.entries.lock().unwrap().extend_from_slice(entries);
        Ok(())
    }
}

struct Rejecting;

impl Journal for Rejecting {
    fn append(&self, _: &[JournalEntry]) -> StoreResult<()> {
        Err(StoreError::Backend {
            message: "disk full".into(),
            retry_safe: false,
        })
    }
}

fn lease_entry(entry: &JournalEntry) -> (&str, Option<&CommandLease>) {
    match entry {
        JournalEntry::Lease {
            command_id, lease, ..
        } => (command_id.as_str(), lease.as_ref()),
        other => panic!("expected a lease entry, got {other:?}"),
    }
}

/// Case 31.
#[tokio::test]
async fn every_state_change_writes_one_entry_and_repeats_write_none() {
    let clock = ManualClock::new(1000);
    let journal = Arc::new(Recording::default());
    let store = MemoryStore::with_journal(StoreOptions::with_clock(clock), journal.clone());
    store.put_session(&session("s")).await.unwrap();
    let c1 = lease_of(&store, "c1", 100).await;
    store.seal_command(T, "c1", &c1, &sealing()).await.unwrap();
    store
        .complete_command(T, "c1", &c1, &json!({"ok": true}))
        .await
        .unwrap();
    let c2 = lease_of(&store, "c2", 100).await;
    store.release_command(T, "c2", &c2).await.unwrap();
    let first = store
        .append_event(T, event("s"), Some("k-1"))
        .await
        .unwrap();
    let repeat = store
        .append_event(T, event("s"), Some("k-1"))
        .await
        .unwrap();
    assert_eq!(first, repeat);

    let entries = journal.entries.lock().unwrap().clone();
    let kinds: Vec<&str> = entries.iter().map(JournalEntry::kind).collect();
    assert_eq!(
        kinds,
        [
            "session", "lease", "lease", "lease", "lease", "lease", "event"
        ]
    );
    let (command, claimed) = lease_entry(&entries[1]);
    let claimed = claimed.unwrap();
    assert_eq!(command, "c1");
    assert_eq!(
        (
            claimed.lease_id.as_str(),
            claimed.sealed,
            claimed.expires_at
        ),
        (c1.as_str(), false, Some(1100))
    );
    let sealed = lease_entry(&entries[2]).1.unwrap();
    assert_eq!((sealed.sealed, sealed.expires_at), (true, None));
    let completed = lease_entry(&entries[3]).1.unwrap();
    assert!(completed.sealed);
    assert_eq!(
        completed.result.as_ref().map(Frozen::thaw),
        Some(json!({"ok": true}))
    );
    assert_eq!(lease_entry(&entries[5]), ("c2", None));
    match &entries[6] {
        JournalEntry::Event {
            event,
            idempotency_key,
            ..
        } => {
            assert_eq!(idempotency_key.as_deref(), Some("k-1"));
            assert_eq!(event.sequence, 1);
        }
        other => panic!("expected an event entry, got {other:?}"),
    }
}

fn retaining_two(clock: &Arc<ManualClock>) -> StoreOptions {
    StoreOptions {
        max_events_per_session: 2,
        ..StoreOptions::with_clock(clock.clone())
    }
}

/// Case 32.
#[tokio::test]
async fn a_snapshot_restores_retention_keys_and_sealed_commands() {
    let clock = ManualClock::new(1000);
    let store = MemoryStore::new(retaining_two(&clock));
    let terminal = write_retention_scenario(&store).await;

    let snapshot = store.snapshot().unwrap();
    let mut kinds: Vec<&str> = snapshot.iter().map(JournalEntry::kind).collect();
    kinds.sort();
    assert_eq!(kinds, ["event", "event", "event_key", "lease", "session"]);

    let restored = MemoryStore::new(retaining_two(&clock));
    restored.restore(snapshot).unwrap();
    clock.advance(10_000);
    assert_retention_scenario_restored(&restored, &terminal).await;
}

/// Case 33.
#[tokio::test]
async fn restore_requires_an_empty_store() {
    let store = MemoryStore::new(StoreOptions::default());
    store.put_session(&session("s")).await.unwrap();
    let error = store.restore(Vec::new()).unwrap_err();
    assert!(error.to_string().contains("empty store"), "{error}");
    assert!(store.get_session(T, "s").await.unwrap().is_some());
}

#[tokio::test]
async fn restoring_an_out_of_order_event_fails_and_leaves_the_store_empty() {
    let source = MemoryStore::new(StoreOptions::default());
    source.append_event(T, event("s"), None).await.unwrap();
    source.append_event(T, event("s"), None).await.unwrap();
    let mut snapshot = source.snapshot().unwrap();
    snapshot.swap(0, 1);
    let target = MemoryStore::new(StoreOptions::default());
    let error = target.restore(snapshot).unwrap_err();
    assert!(error.to_string().contains("out of order"), "{error}");
    assert_eq!(target.snapshot().unwrap(), Vec::new());
}

/// Case 34.
#[tokio::test]
async fn a_journal_failure_fails_the_call_then_every_later_mutation() {
    let store = MemoryStore::with_journal(StoreOptions::default(), Arc::new(Rejecting));
    let error = store.put_session(&session("s")).await.unwrap_err();
    assert_eq!(
        error,
        StoreError::Backend {
            message: "disk full".into(),
            retry_safe: false
        }
    );
    let health = store.health_check().await;
    assert!(!health.ready);
    assert_eq!(
        health.details.get("reason"),
        Some(&Value::from("journal write failed"))
    );
    let later = store.append_event(T, event("s"), None).await.unwrap_err();
    assert_eq!(later.runtime_code(), Some(RuntimeErrorCode::JournalFailed));
    assert_eq!(
        later.to_string(),
        "RUNTIME_STORE_JOURNAL_FAILED: The store journal failed earlier; restart the process to replay the journal"
    );
    assert_eq!(store.get_session(T, "s").await.unwrap(), Some(session("s")));
}

/// What these receipts are sealed as acting on (it does not matter here).
fn sealing() -> agent_runtime_store::CommandTarget {
    agent_runtime_store::CommandTarget::new("session.close", None)
}
