//! Journal failures of the JSONL backend, with a real failing write.

use std::fs::File;

use agent_runtime::protocol::{EventType, JsonObject, SessionStatus};

use super::*;
use crate::model::{NewEvent, SessionRecord};
use crate::ports::{EventLog, SessionRecords, StoreLifecycle};

fn record() -> SessionRecord {
    SessionRecord {
        tenant_id: "t".into(),
        created_by: "alice".into(),
        session_id: "s".into(),
        status: SessionStatus::Active,
        created_at: "2026-01-01T00:00:00.000Z".into(),
        updated_at: "2026-01-01T00:00:00.000Z".into(),
        metadata: None,
    }
}

#[tokio::test]
async fn a_failed_write_stops_writes_keeps_reads_and_replays_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store.put_session(&record()).await.unwrap();
    // Swap the append handle for a read-only one: the next write(2) fails with EBADF.
    let read_only = File::open(dir.path().join(JOURNAL_FILE)).unwrap();
    *store.backend().journal.lock().unwrap() = Some(read_only);

    let event = NewEvent {
        session_id: "s".into(),
        request_id: None,
        occurred_at: String::new(),
        event_type: EventType::SessionStream,
        data: JsonObject::new(),
    };
    let failed = store
        .append_event("t", event.clone(), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            failed,
            StoreError::Backend {
                retry_safe: false,
                ..
            }
        ),
        "{failed}"
    );
    let later = store.put_session(&record()).await.unwrap_err();
    assert_eq!(later.runtime_code(), Some(RuntimeErrorCode::JournalFailed));
    assert_eq!(store.get_session("t", "s").await.unwrap(), Some(record()));
    let health = store.health_check().await;
    assert!(!health.ready);
    assert_eq!(health.details["reason"], "journal write failed");
    assert_eq!(health.details["backend"], "jsonl");
    store.close().await.unwrap();

    // Only the acknowledged session comes back.
    let reopened = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(
        reopened.get_session("t", "s").await.unwrap(),
        Some(record())
    );
    assert_eq!(
        reopened.latest_event_sequence("t", "s").await.unwrap(),
        None
    );
    reopened.close().await.unwrap();
}

#[tokio::test]
async fn a_restored_snapshot_is_journaled_and_survives_a_restart() {
    let source = crate::MemoryStore::new(StoreOptions::default());
    source.put_session(&record()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store.restore(source.snapshot().unwrap()).unwrap();
    store.close().await.unwrap();
    let reopened = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(
        reopened.get_session("t", "s").await.unwrap(),
        Some(record())
    );
    reopened.close().await.unwrap();
}
