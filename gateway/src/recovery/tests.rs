use std::sync::Arc;

use agent_runtime::protocol::{EventEnvelope, EventType, JsonObject};
use agent_runtime_store::{
    EventLog, EventPage, EventRange, EventReader, MemoryStore, NewEvent, StoreError, StoreOptions,
    StoreResult,
};
use async_trait::async_trait;
use serde_json::json;

use super::*;
use agent_runtime::protocol::session::{HistoryProgress, HistoryProgressState};

const TENANT: &str = "tenant-a";
const SESSION: &str = "session-1";

fn data(value: serde_json::Value) -> JsonObject {
    value.as_object().unwrap().clone()
}

async fn append(store: &MemoryStore, kind: &str) {
    let payload = if kind == "result" {
        json!({ "type": "result", "sessionId": SESSION, "subtype": "success" })
    } else {
        json!({ "type": "content", "sessionId": SESSION, "delta": "x" })
    };
    store
        .append_event(
            TENANT,
            NewEvent {
                session_id: SESSION.to_owned(),
                request_id: Some("request-1".to_owned()),
                occurred_at: "2026-01-01T00:00:00.000Z".to_owned(),
                event_type: EventType::SessionStream,
                data: data(payload),
            },
            None,
        )
        .await
        .unwrap();
}

/// An event log without the range capability; optionally every read fails too.
struct NoRange {
    inner: Arc<MemoryStore>,
    reads_fail: bool,
}

#[async_trait]
impl EventReader for NoRange {
    async fn get_event_by_idempotency_key(
        &self,
        t: &str,
        s: &str,
        k: &str,
    ) -> StoreResult<Option<EventEnvelope>> {
        self.inner.get_event_by_idempotency_key(t, s, k).await
    }

    async fn read_events(
        &self,
        t: &str,
        s: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<EventPage> {
        if self.reads_fail {
            return Err(StoreError::invalid("reads always fail here"));
        }
        self.inner.read_events(t, s, after, limit).await
    }

    async fn latest_event_sequence(&self, t: &str, s: &str) -> StoreResult<Option<u64>> {
        self.inner.latest_event_sequence(t, s).await
    }

    async fn event_stream_range(&self, _t: &str, _s: &str) -> StoreResult<Option<EventRange>> {
        Err(StoreError::invalid("no range capability"))
    }

    async fn wait_for_events(&self, t: &str, s: &str, after: u64) -> StoreResult<()> {
        self.inner.wait_for_events(t, s, after).await
    }
}

#[tokio::test]
async fn item_20_an_event_appended_during_the_snapshot_is_replayed() {
    let store = MemoryStore::new(StoreOptions::default());
    append(&store, "content").await;
    append(&store, "result").await;
    let head = head_before_read(&store, TENANT, SESSION).await;
    // Appended while the executor builds its snapshot:
    append(&store, "content").await;
    let cursor = resolve(&store, TENANT, SESSION, head, None).await;
    assert_eq!(cursor.last_event_sequence, Some(2));
    assert!(!cursor.incomplete);
}

#[tokio::test]
async fn item_24_without_a_range_the_cursor_is_zero_not_the_head() {
    let inner = Arc::new(MemoryStore::new(StoreOptions::default()));
    append(&inner, "content").await;
    append(&inner, "content").await;
    let log = NoRange {
        inner,
        reads_fail: false,
    };
    let head = head_before_read(&log, TENANT, SESSION).await;
    let cursor = resolve(&log, TENANT, SESSION, head, None).await;
    assert_eq!(
        cursor,
        RecoveryCursor {
            last_event_sequence: Some(0),
            incomplete: false
        }
    );
}

#[tokio::test]
async fn item_25_when_nothing_can_be_read_recovery_is_incomplete_without_a_cursor() {
    let inner = Arc::new(MemoryStore::new(StoreOptions::default()));
    let log = NoRange {
        inner,
        reads_fail: true,
    };
    let cursor = resolve(&log, TENANT, SESSION, None, None).await;
    assert_eq!(
        cursor,
        RecoveryCursor {
            last_event_sequence: None,
            incomplete: true
        }
    );
}

#[tokio::test]
async fn an_empty_log_resumes_from_zero() {
    let store = MemoryStore::new(StoreOptions::default());
    let cursor = resolve(&store, TENANT, SESSION, None, None).await;
    assert_eq!(
        cursor,
        RecoveryCursor {
            last_event_sequence: Some(0),
            incomplete: false
        }
    );
    let gap = progress(HistoryProgressState::Failed, None);
    let cursor = resolve(&store, TENANT, SESSION, None, Some(&gap)).await;
    assert_eq!(cursor.last_event_sequence, Some(0));
    assert!(cursor.incomplete);
}

fn progress(state: HistoryProgressState, covered: Option<&str>) -> HistoryProgress {
    HistoryProgress {
        state,
        covered_request_id: covered.map(str::to_owned),
    }
}

#[tokio::test]
async fn the_covered_request_wins_and_a_gap_keeps_the_boundary_but_marks_recovery_incomplete() {
    let store = MemoryStore::new(StoreOptions::default());
    append(&store, "content").await;
    append(&store, "result").await;
    append(&store, "content").await;
    let gap = progress(HistoryProgressState::Failed, Some("request-1"));
    let cursor = resolve(&store, TENANT, SESSION, Some(3), Some(&gap)).await;
    assert_eq!(
        cursor,
        RecoveryCursor {
            last_event_sequence: Some(3),
            incomplete: true
        }
    );

    // A gap without a covered request: the newest completed request is still the boundary
    // (the older cursor replayed from the start).
    let gap = progress(HistoryProgressState::Failed, None);
    let cursor = resolve(&store, TENANT, SESSION, Some(3), Some(&gap)).await;
    assert_eq!(
        cursor,
        RecoveryCursor {
            last_event_sequence: Some(2),
            incomplete: true
        }
    );

    // A covered request the log no longer holds: replay what is retained (no fall-back scan).
    let unknown = progress(HistoryProgressState::Complete, Some("other"));
    let cursor = resolve(&store, TENANT, SESSION, Some(3), Some(&unknown)).await;
    assert_eq!(
        cursor,
        RecoveryCursor {
            last_event_sequence: Some(0),
            incomplete: false
        }
    );
}

#[tokio::test]
async fn the_backward_scan_is_not_capped_at_2000_events() {
    let store = MemoryStore::new(StoreOptions::default());
    append(&store, "result").await;
    for _ in 0..2_600 {
        append(&store, "content").await;
    }
    let head = head_before_read(&store, TENANT, SESSION).await;
    let cursor = resolve(&store, TENANT, SESSION, head, None).await;
    assert_eq!(
        cursor,
        RecoveryCursor {
            last_event_sequence: Some(1),
            incomplete: false
        }
    );
}
