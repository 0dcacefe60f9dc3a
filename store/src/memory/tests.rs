//! Behaviour of the memory engine, port by port (docs/storage.md §1, §4, §7, §8, §10.B, §10.C).

use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::{Clock, ManualClock};
use agent_runtime::protocol::{EventType, JsonObject, SessionStatus};
use serde_json::{Value, json};

use super::*;
use crate::conformance::support::active_session;
use crate::model::*;
use crate::ports::*;

const T: &str = "tenant-a";
const T2: &str = "tenant-b";

fn store_at(now: u64) -> (MemoryStore, Arc<ManualClock>) {
    let clock = ManualClock::new(now);
    let store = MemoryStore::new(StoreOptions::with_clock(clock.clone()));
    (store, clock)
}

fn retaining(max_events: u64) -> (MemoryStore, Arc<ManualClock>) {
    let clock = ManualClock::new(1_000);
    let options = StoreOptions {
        max_events_per_session: max_events,
        ..StoreOptions::with_clock(clock.clone())
    };
    (MemoryStore::new(options), clock)
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn record(tenant: &str, session: &str, updated_at: &str) -> SessionRecord {
    active_session(tenant, session, updated_at)
}

fn event(session: &str, text: &str) -> NewEvent {
    NewEvent {
        session_id: session.into(),
        request_id: None,
        occurred_at: "2026-01-01T00:00:00.000Z".into(),
        event_type: EventType::SessionStream,
        data: object(json!({"type": "content", "text": text})),
    }
}

fn code(error: &StoreError) -> Option<RuntimeErrorCode> {
    error.runtime_code()
}

async fn sequences(store: &MemoryStore, session: &str, after: u64) -> StoreResult<Vec<u64>> {
    let page = store.read_events(T, session, after, 1000).await?;
    Ok(page.events.iter().map(|e| e.sequence).collect())
}

// ----- command receipts -------------------------------------------------------------------------

async fn claimed(store: &MemoryStore, command: &str, fp: &str, ttl: u64) -> String {
    match store.claim_command(T, command, fp, ttl).await.unwrap() {
        CommandClaim::Claimed { lease_id } => lease_id,
        other => panic!("expected claimed, got {other:?}"),
    }
}

#[tokio::test]
async fn an_expired_claim_is_replaced_and_the_old_lease_is_lost() {
    let (store, clock) = store_at(1_000);
    let first = claimed(&store, "c", "fp1", 100).await;
    assert_eq!(
        store.claim_command(T, "c", "fp1", 100).await.unwrap(),
        CommandClaim::InProgress {
            retry_after_ms: 100
        }
    );
    clock.advance(101);
    let second = claimed(&store, "c", "fp1", 100).await;
    assert_ne!(first, second);
    let old = store
        .complete_command(T, "c", &first, &json!({"ok": true}))
        .await;
    assert!(matches!(old, Err(StoreError::CommandLeaseLost(m)) if m.contains("no longer active")));
    store
        .complete_command(T, "c", &second, &json!({"ok": true}))
        .await
        .unwrap();
    assert_eq!(
        store.claim_command(T, "c", "fp1", 100).await.unwrap(),
        CommandClaim::Completed {
            result: json!({"ok": true})
        }
    );
    assert_eq!(
        store.claim_command(T, "c", "fp2", 100).await.unwrap(),
        CommandClaim::Conflict
    );
}

#[tokio::test]
async fn a_sealed_command_stays_fail_closed_after_release_and_expiry() {
    let (store, clock) = store_at(1_000);
    let lease = claimed(&store, "c", "fp", 100).await;
    store
        .seal_command(T, "c", &lease, &sealing())
        .await
        .unwrap();
    store.release_command(T, "c", &lease).await.unwrap();
    clock.advance(10_000);
    assert_eq!(
        store.claim_command(T, "c", "fp", 100).await.unwrap(),
        CommandClaim::InProgress {
            retry_after_ms: 1000
        }
    );
}

#[tokio::test]
async fn seal_and_complete_follow_the_postgres_state_machine() {
    let (store, _) = store_at(1_000);
    let lease = claimed(&store, "c", "fp", 30_000).await;
    let wrong = store
        .seal_command(T, "c", "other-lease", &sealing())
        .await
        .unwrap_err();
    assert!(wrong.to_string().contains("no longer active"), "{wrong}");
    store
        .seal_command(T, "c", &lease, &sealing())
        .await
        .unwrap();
    // Re-sealing is rejected (decision S6).
    assert!(
        store
            .seal_command(T, "c", &lease, &sealing())
            .await
            .is_err()
    );
    assert!(
        store
            .abandon_command(T, "c", "window elapsed")
            .await
            .unwrap()
    );
    // Completing after abandonment is rejected; the abandonment stands.
    assert!(
        store
            .complete_command(T, "c", &lease, &json!(1))
            .await
            .is_err()
    );
    assert_eq!(
        store.claim_command(T, "c", "fp", 30_000).await.unwrap(),
        CommandClaim::Abandoned {
            reason: "window elapsed".into()
        }
    );
    assert!(!store.abandon_command(T, "c", "another").await.unwrap());
    assert_eq!(
        store.claim_command(T, "c", "fp", 30_000).await.unwrap(),
        CommandClaim::Abandoned {
            reason: "window elapsed".into()
        }
    );
}

#[tokio::test]
async fn only_sealed_unfinished_commands_can_be_abandoned() {
    let (store, _) = store_at(1_000);
    let lease = claimed(&store, "claimed-only", "fp", 30_000).await;
    assert!(!store.abandon_command(T, "claimed-only", "r").await.unwrap());
    store
        .release_command(T, "claimed-only", &lease)
        .await
        .unwrap();
    claimed(&store, "claimed-only", "fp", 30_000).await;

    let lease = claimed(&store, "done", "fp", 30_000).await;
    store
        .seal_command(T, "done", &lease, &sealing())
        .await
        .unwrap();
    store
        .complete_command(T, "done", &lease, &json!("r"))
        .await
        .unwrap();
    assert!(
        store
            .complete_command(T, "done", &lease, &json!("again"))
            .await
            .is_err()
    );
    assert!(!store.abandon_command(T, "done", "r").await.unwrap());
    assert_eq!(
        store.claim_command(T, "done", "fp", 1).await.unwrap(),
        CommandClaim::Completed { result: json!("r") }
    );
    let blank = store.abandon_command(T, "done", "   ").await.unwrap_err();
    assert!(blank.to_string().contains("reason"));
    let bad = store.claim_command(T, "x", "fp", 0).await.unwrap_err();
    assert_eq!(
        bad,
        StoreError::invalid("Command claim parameters are invalid")
    );
}

// ----- sessions ---------------------------------------------------------------------------------

#[tokio::test]
async fn sessions_are_tenant_scoped_and_keep_their_creator() {
    let (store, _) = store_at(1_000);
    store
        .put_session(&record(T, "s", "2026-01-01T00:00:01.000Z"))
        .await
        .unwrap();
    assert_eq!(store.get_session(T2, "s").await.unwrap(), None);
    let mut update = record(T, "s", "2026-01-01T00:00:02.000Z");
    update.created_by = "mallory".into();
    update.created_at = "2030-01-01T00:00:00.000Z".into();
    update.status = SessionStatus::Closed;
    update.metadata = Some(JsonObject::new());
    store.put_session(&update).await.unwrap();
    let stored = store.get_session(T, "s").await.unwrap().unwrap();
    assert_eq!(stored.created_by, "alice");
    assert_eq!(stored.created_at, "2026-01-01T00:00:00.000Z");
    assert_eq!(stored.status, SessionStatus::Closed);
    assert_eq!(stored.metadata, None);
}

#[tokio::test]
async fn session_pages_are_newest_first_with_offset_cursors() {
    let (store, _) = store_at(1_000);
    for (id, at) in [("b", "2"), ("a", "2"), ("c", "3"), ("d", "1")] {
        store
            .put_session(&record(T, id, &format!("2026-01-01T00:00:0{at}.000Z")))
            .await
            .unwrap();
    }
    store
        .put_session(&record(T2, "z", "2027-01-01T00:00:00.000Z"))
        .await
        .unwrap();
    let first = store.list_sessions(T, None, Some(3)).await.unwrap();
    let ids: Vec<&str> = first
        .sessions
        .iter()
        .map(|s| s.session_id.as_str())
        .collect();
    assert_eq!(ids, ["c", "a", "b"]);
    assert_eq!(first.next_cursor.as_deref(), Some("3"));
    let rest = store
        .list_sessions(T, first.next_cursor.as_deref(), Some(3))
        .await
        .unwrap();
    assert_eq!(rest.sessions.len(), 1);
    assert_eq!(rest.sessions[0].session_id, "d");
    assert_eq!(rest.next_cursor, None);
    for cursor in ["-1", "x", "1.5", ""] {
        let error = store
            .list_sessions(T, Some(cursor), None)
            .await
            .unwrap_err();
        assert_eq!(error, StoreError::invalid("Session list cursor is invalid"));
    }
    for limit in [0, 101] {
        let error = store.list_sessions(T, None, Some(limit)).await.unwrap_err();
        assert!(matches!(error, StoreError::InvalidArgument(_)));
    }
}

// ----- agent events -----------------------------------------------------------------------------

#[tokio::test]
async fn retention_trims_the_front_and_old_cursors_are_stale() {
    let (store, _) = retaining(2);
    for text in ["1", "2", "3"] {
        store.append_event(T, event("s", text), None).await.unwrap();
    }
    assert_eq!(sequences(&store, "s", 1).await.unwrap(), [2, 3]);
    let stale = store.read_events(T, "s", 0, 100).await.unwrap_err();
    assert_eq!(
        stale,
        StoreError::StaleCursor("Event cursor is stale".into())
    );
    let ahead = store.read_events(T, "s", 4, 100).await.unwrap_err();
    assert_eq!(
        ahead,
        StoreError::StaleCursor("Event cursor is ahead of the session head".into())
    );
    assert_eq!(
        store.event_stream_range(T, "s").await.unwrap(),
        Some(EventRange {
            first_sequence: 2,
            head_sequence: 3
        })
    );
    assert_eq!(store.latest_event_sequence(T, "s").await.unwrap(), Some(3));
    let page = store.read_events(T, "s", 1, 1).await.unwrap();
    assert!(page.has_more);
    assert_eq!(page.events[0].sequence, 2);
    for limit in [0, 1001] {
        assert!(matches!(
            store.read_events(T, "s", 1, limit).await,
            Err(StoreError::InvalidArgument(_))
        ));
    }
    // A session without events: empty page at 0, ahead beyond it.
    assert!(
        store
            .read_events(T, "none", 0, 10)
            .await
            .unwrap()
            .events
            .is_empty()
    );
    assert!(matches!(
        store.read_events(T, "none", 1, 10).await,
        Err(StoreError::StaleCursor(_))
    ));
    assert_eq!(store.event_stream_range(T, "none").await.unwrap(), None);
}

#[tokio::test]
async fn idempotency_keys_outlive_retention_and_the_trim_hook() {
    let (store, _) = retaining(1);
    let original = store
        .append_event(T, event("s", "k"), Some("k"))
        .await
        .unwrap();
    store
        .append_event(T, event("s", "other"), None)
        .await
        .unwrap();
    let repeat = store
        .append_event(T, event("s", "k"), Some("k"))
        .await
        .unwrap();
    assert_eq!(repeat, original);
    store.trim_agent_events_for_testing(T, "s").await.unwrap();
    let after_trim = store
        .append_event(T, event("s", "k"), Some("k"))
        .await
        .unwrap();
    assert_eq!(after_trim.event_id, original.event_id);
    assert!(
        store
            .read_events(T, "s", 0, 100)
            .await
            .unwrap()
            .events
            .is_empty()
    );
    assert_eq!(
        store
            .get_event_by_idempotency_key(T, "s", "k")
            .await
            .unwrap(),
        Some(original)
    );
    // The log object is gone, so the next append restarts at 1.
    let next = store
        .append_event(T, event("s", "new"), None)
        .await
        .unwrap();
    assert_eq!(next.sequence, 1);
    assert_eq!(
        store
            .get_event_by_idempotency_key(T, "s", "unknown")
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn concurrent_appends_with_one_key_store_one_event() {
    let (store, _) = store_at(1_000);
    let appends = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.append_event(T, event("s", "x"), Some("k2")).await })
    });
    let mut ids = Vec::new();
    for handle in appends {
        ids.push(handle.await.unwrap().unwrap().event_id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 1);
    assert_eq!(
        store
            .read_events(T, "s", 0, 1000)
            .await
            .unwrap()
            .events
            .len(),
        1
    );
}

#[tokio::test]
async fn a_waiter_wakes_on_append_and_resolves_at_once_when_behind() {
    let (store, _) = store_at(1_000);
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.wait_for_events(T, "s", 0).await })
    };
    tokio::task::yield_now().await;
    store.append_event(T, event("s", "x"), None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), store.wait_for_events(T, "s", 0))
        .await
        .unwrap()
        .unwrap();
    let pending = store.wait_for_events(T, "s", 1);
    assert!(
        tokio::time::timeout(Duration::from_millis(20), pending)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn batches_must_target_their_session() {
    let (store, _) = store_at(1_000);
    let error = store
        .append_events(T, "s", vec![event("other", "x")], None)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        StoreError::invalid("Event Session does not match the target event log")
    );
    let stored = store
        .append_events(T, "s", vec![event("s", "a"), event("s", "b")], None)
        .await
        .unwrap();
    assert_eq!(
        stored.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        [1, 2]
    );
}

// ----- leases and fencing -----------------------------------------------------------------------

fn acquire(lease_id: &str, owner: &str, ttl_ms: u64) -> AcquireLease {
    AcquireLease {
        lease_id: lease_id.into(),
        owner_id: owner.into(),
        ttl_ms,
    }
}

#[tokio::test]
async fn leases_reuse_conflict_and_advance_the_token() {
    let (store, clock) = store_at(1_000);
    assert!(!store.requires_execution_lease(T, "s").await.unwrap());
    let first = store
        .acquire_execution_lease(T, "s", acquire("l1", "w1", 1_000))
        .await
        .unwrap();
    assert_eq!(first.fencing_token, 1);
    clock.advance(500);
    let again = store
        .acquire_execution_lease(T, "s", acquire("l1", "w1", 1_000))
        .await
        .unwrap();
    assert_eq!(
        (
            again.fencing_token,
            again.acquired_at_ms,
            again.expires_at_ms
        ),
        (1, 1_000, 2_500)
    );
    let conflict = store
        .acquire_execution_lease(T, "s", acquire("l2", "w2", 1_000))
        .await;
    assert_eq!(
        conflict.map_err(|e| code(&e)),
        Err(Some(RuntimeErrorCode::LeaseConflict))
    );
    clock.advance(1_000);
    let second = store
        .acquire_execution_lease(T, "s", acquire("l2", "w2", 1_000))
        .await
        .unwrap();
    assert_eq!(second.fencing_token, 2);
    let lost = store.assert_execution_lease(T, &first).await.unwrap_err();
    assert_eq!(code(&lost), Some(RuntimeErrorCode::LeaseLost));
    assert_eq!(
        lost.to_string(),
        "DURABLE_EXECUTION_LEASE_LOST: Execution lease l1 is not active for Session s"
    );
    let renewed = store
        .renew_execution_lease(T, &second, 5_000)
        .await
        .unwrap();
    assert_eq!(renewed.expires_at_ms, clock.now_ms() + 5_000);
    store.release_execution_lease(T, &second).await.unwrap();
    store.release_execution_lease(T, &second).await.unwrap();
    assert!(store.requires_execution_lease(T, "s").await.unwrap());
    let bad_ttl = store
        .acquire_execution_lease(T, "s", acquire("l3", "w", 0))
        .await
        .unwrap_err();
    assert_eq!(code(&bad_ttl), Some(RuntimeErrorCode::LeaseInvalid));
}

#[tokio::test]
async fn fenced_writes_follow_the_fencing_table() {
    let (store, clock) = store_at(1_000);
    let phantom = ExecutionFence {
        lease_id: "none".into(),
        fencing_token: 1,
    };
    let lost = store
        .append_events(T, "s", vec![event("s", "x")], Some(&phantom))
        .await;
    assert_eq!(
        lost.map_err(|e| code(&e)),
        Err(Some(RuntimeErrorCode::LeaseLost))
    );
    store
        .append_events(T, "s", vec![event("s", "free")], None)
        .await
        .unwrap();

    let lease = store
        .acquire_execution_lease(T, "s", acquire("l1", "w1", 1_000))
        .await
        .unwrap();
    let required = store
        .append_events(T, "s", vec![event("s", "x")], None)
        .await
        .unwrap_err();
    assert_eq!(code(&required), Some(RuntimeErrorCode::LeaseRequired));
    // The unfenced single-event path refuses a leased session too, and stays refused.
    let single = store
        .append_event(T, event("s", "x"), Some("key"))
        .await
        .unwrap_err();
    assert_eq!(code(&single), Some(RuntimeErrorCode::LeaseRequired));
    let created = store.create_transcript(T, "s", None).await.unwrap_err();
    assert_eq!(code(&created), Some(RuntimeErrorCode::LeaseRequired));

    let fence = lease.fence();
    store
        .append_events(T, "s", vec![event("s", "ok")], Some(&fence))
        .await
        .unwrap();
    store.create_transcript(T, "s", Some(&fence)).await.unwrap();
    let drafts = vec![draft("session_created")];
    store
        .append_durable(T, "s", drafts, ExpectedSequence::Empty, Some(&fence))
        .await
        .unwrap();

    clock.advance(1_000);
    let expired = store
        .append_events(T, "s", vec![event("s", "late")], Some(&fence))
        .await;
    assert_eq!(
        expired.map_err(|e| code(&e)),
        Err(Some(RuntimeErrorCode::LeaseLost))
    );
    store.release_execution_lease(T, &lease).await.unwrap();
    let after_release = store
        .append_event(T, event("s", "x"), None)
        .await
        .unwrap_err();
    assert_eq!(code(&after_release), Some(RuntimeErrorCode::LeaseRequired));
}

// ----- durable journal --------------------------------------------------------------------------

fn draft(kind: &str) -> DurableEventDraft {
    DurableEventDraft {
        event_type: kind.into(),
        data: JsonObject::new(),
        occurred_at: None,
        correlation: Correlation::default(),
    }
}

#[tokio::test]
async fn durable_appends_are_contiguous_compare_and_set_batches_under_a_quota() {
    let clock = ManualClock::new(1_000);
    let options = StoreOptions {
        max_durable_events_per_session: 3,
        ..StoreOptions::with_clock(clock.clone())
    };
    let store = MemoryStore::new(options);
    let empty = store
        .append_durable(T, "s", vec![], ExpectedSequence::Any, None)
        .await;
    assert_eq!(
        empty.map_err(|e| code(&e)),
        Err(Some(RuntimeErrorCode::DurableInvalidAppend))
    );
    let first = store
        .append_durable(
            T,
            "s",
            vec![draft("a"), draft("b")],
            ExpectedSequence::Empty,
            None,
        )
        .await
        .unwrap();
    assert_eq!((first.previous_sequence, first.last_sequence), (None, 2));
    assert_eq!(first.events[0].recorded_at, "1970-01-01T00:00:01.000Z");
    assert_eq!(first.events[1].occurred_at, first.events[1].recorded_at);
    let conflict = store
        .append_durable(T, "s", vec![draft("c")], ExpectedSequence::At(1), None)
        .await;
    assert_eq!(
        conflict.map_err(|e| code(&e)),
        Err(Some(RuntimeErrorCode::DurableSequenceConflict))
    );
    let quota = store
        .append_durable(
            T,
            "s",
            vec![draft("c"), draft("d")],
            ExpectedSequence::At(2),
            None,
        )
        .await;
    assert_eq!(
        quota.map_err(|e| code(&e)),
        Err(Some(RuntimeErrorCode::QuotaExceeded))
    );
    store
        .append_durable(T, "s", vec![draft("c")], ExpectedSequence::At(2), None)
        .await
        .unwrap();
    let page = store.read_durable(T, "s", 1, 1).await.unwrap();
    assert_eq!(page.events[0].sequence, 2);
    assert!(page.has_more);
    assert_eq!(page.head_sequence, Some(3));
    let ahead = store.read_durable(T, "s", 4, 10).await.unwrap_err();
    assert_eq!(code(&ahead), Some(RuntimeErrorCode::DurableInvalidCursor));
    assert_eq!(store.durable_head(T, "s").await.unwrap(), Some(3));
    assert_eq!(store.durable_head(T2, "s").await.unwrap(), None);
}

// ----- transcripts ------------------------------------------------------------------------------

#[tokio::test]
async fn transcripts_hide_dangling_tool_calls_and_fork_prefixes() {
    let (store, _) = store_at(1_000);
    store.create_transcript(T, "s", None).await.unwrap();
    let messages = vec![
        object(json!({"role": "user", "content": "hi"})),
        object(json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "call-1", "type": "function", "function": {"name": "Search", "arguments": "{}"}}
        ]})),
    ];
    store
        .mutate_transcript(T, "s", TranscriptMutation::AppendMessages(messages), None)
        .await
        .unwrap();
    let view = store.load_transcript(T, "s").await.unwrap().unwrap();
    assert_eq!(view.entries.len(), 1, "the dangling call is hidden");
    let result = object(json!({"role": "tool", "tool_call_id": "call-1", "content": "found"}));
    store
        .mutate_transcript(
            T,
            "s",
            TranscriptMutation::AppendMessages(vec![result]),
            None,
        )
        .await
        .unwrap();
    let view = store.load_transcript(T, "s").await.unwrap().unwrap();
    assert_eq!(view.entries.len(), 3);
    let first_id = view.entries[0].id.clone();
    let fork = store
        .fork_transcript(T, "s", "f", Some(&first_id))
        .await
        .unwrap();
    assert_eq!(fork.entries.len(), 1);
    assert_eq!(store.list_transcripts(T).await.unwrap(), ["f", "s"]);
    let missing = store
        .fork_transcript(T, "s", "g", Some("nope"))
        .await
        .unwrap_err();
    assert_eq!(
        missing,
        StoreError::invalid("Message with ID \"nope\" not found in session history")
    );
    let absent = store
        .mutate_transcript(
            T,
            "zz",
            TranscriptMutation::CancelInput {
                input_id: "i".into(),
            },
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(code(&absent), Some(RuntimeErrorCode::TranscriptNotFound));
    store.delete_transcript(T, "f").await.unwrap();
    assert_eq!(store.load_transcript(T, "f").await.unwrap(), None);
    assert_eq!(store.load_transcript(T2, "s").await.unwrap(), None);
}

#[tokio::test]
async fn a_completed_durable_request_marks_the_transcript_covered() {
    let (store, _) = store_at(1_000);
    store.create_transcript(T, "s", None).await.unwrap();
    let mut completed = draft("request_completed");
    completed.correlation.request_id = Some("r1".into());
    store
        .append_durable(T, "s", vec![completed], ExpectedSequence::Any, None)
        .await
        .unwrap();
    let progress = store
        .load_transcript(T, "s")
        .await
        .unwrap()
        .unwrap()
        .history_progress
        .unwrap();
    assert_eq!(progress.state, HistoryState::Complete);
    assert_eq!(progress.covered_request_id.as_deref(), Some("r1"));
}

// ----- workers and routes -----------------------------------------------------------------------

fn worker(id: &str, capacity: u32, ttl_ms: u64) -> RegisterWorker {
    RegisterWorker {
        worker_id: id.into(),
        capacity,
        ttl_ms,
        metadata: JsonObject::new(),
    }
}

fn claim(owner: &str, lease: &str, ttl_ms: u64) -> ClaimSession {
    ClaimSession {
        owner_id: owner.into(),
        lease_id: lease.into(),
        ttl_ms,
        tenant_id: None,
        session_id: None,
        orphans_only: false,
    }
}

fn to(state: RouteState) -> RouteTransition {
    RouteTransition {
        expected_state: None,
        state,
        metadata: None,
        failure: None,
    }
}

#[tokio::test]
async fn routes_claim_transition_hand_off_and_fence_out_the_old_worker() {
    let (store, clock) = store_at(1_000);
    let a = store.register_worker(worker("A", 2, 10_000)).await.unwrap();
    assert_eq!(a.status, WorkerStatus::Active);
    clock.advance(5);
    let beat = store.heartbeat_worker("A", 10_000).await.unwrap();
    assert!(beat.last_heartbeat_at_ms >= a.last_heartbeat_at_ms);

    let queued = store
        .enqueue_session(
            T,
            "R",
            EnqueueOptions {
                priority: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(queued.state, RouteState::Queued);
    let claim_a = store
        .claim_session(claim("A", "lease-a", 10_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim_a.route.state, RouteState::Provisioning);
    assert_eq!(claim_a.route.attempt, 1);
    assert!(store.requires_execution_lease(T, "R").await.unwrap());
    let unfenced = store
        .append_durable(T, "R", vec![draft("x")], ExpectedSequence::Empty, None)
        .await;
    assert!(unfenced.is_err());
    let fence = claim_a.lease.fence();
    let appended = store
        .append_durable(
            T,
            "R",
            vec![draft("x")],
            ExpectedSequence::Empty,
            Some(&fence),
        )
        .await
        .unwrap();
    assert_eq!(appended.last_sequence, 1);

    let lease_a = claim_a.lease.clone();
    store
        .transition_session(T, &lease_a, to(RouteState::Running))
        .await
        .unwrap();
    let bad = store
        .transition_session(T, &lease_a, to(RouteState::Queued))
        .await
        .unwrap_err();
    assert_eq!(
        bad.to_string(),
        "SESSION_STATE_CONFLICT: Runtime Session cannot transition from running to queued"
    );
    store
        .transition_session(T, &lease_a, to(RouteState::WaitingApproval))
        .await
        .unwrap();
    assert_eq!(
        store
            .handoff_session(T, &lease_a, None)
            .await
            .unwrap()
            .state,
        RouteState::Suspended
    );
    assert_eq!(
        store
            .handoff_session(T, &lease_a, None)
            .await
            .unwrap()
            .state,
        RouteState::Suspended
    );

    store.drain_worker("A").await.unwrap();
    store
        .enqueue_session(T, "F", EnqueueOptions::default())
        .await
        .unwrap();
    let drained = store
        .claim_session(claim("A", "lease-a2", 10_000))
        .await
        .unwrap_err();
    assert_eq!(code(&drained), Some(RuntimeErrorCode::WorkerUnavailable));

    store.register_worker(worker("B", 4, 10_000)).await.unwrap();
    let claim_b = store
        .claim_session(claim("B", "lease-b", 10_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim_b.route.session_id, "R");
    assert!(claim_b.lease.fencing_token > lease_a.fencing_token);
    assert_eq!(claim_b.route.attempt, 2);
    let stale = store
        .transition_session(T, &lease_a, to(RouteState::Provisioning))
        .await
        .unwrap_err();
    assert_eq!(code(&stale), Some(RuntimeErrorCode::LeaseLost));
    let stale_append = store
        .append_durable(
            T,
            "R",
            vec![draft("y")],
            ExpectedSequence::Any,
            Some(&fence),
        )
        .await;
    assert!(stale_append.is_err());

    let lease_b = claim_b.lease;
    store
        .transition_session(T, &lease_b, to(RouteState::Running))
        .await
        .unwrap();
    let done = store
        .settle_session(T, &lease_b, to(RouteState::Completed))
        .await
        .unwrap();
    assert_eq!(
        (done.state, done.worker_id.clone()),
        (RouteState::Completed, None)
    );
    let claim_f = store
        .claim_session(claim("B", "lease-f", 10_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim_f.route.session_id, "F");
    let no_failure = store
        .settle_session(T, &claim_f.lease, to(RouteState::Failed))
        .await
        .unwrap_err();
    assert_eq!(code(&no_failure), Some(RuntimeErrorCode::WorkerInvalid));
    let failure = Some(object(json!({"reason": "boom"})));
    let failed = store
        .transition_session(
            T,
            &claim_f.lease,
            RouteTransition {
                failure,
                ..to(RouteState::Failed)
            },
        )
        .await
        .unwrap();
    assert_eq!(failed.state, RouteState::Failed);
}

#[tokio::test]
async fn claims_respect_capacity_filters_and_priority() {
    let (store, _) = store_at(1_000);
    store.register_worker(worker("W", 1, 10_000)).await.unwrap();
    store
        .enqueue_session(
            T,
            "low",
            EnqueueOptions {
                priority: 1,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    store
        .enqueue_session(
            T2,
            "high",
            EnqueueOptions {
                priority: 5,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let only_low = ClaimSession {
        session_id: Some("low".into()),
        ..claim("W", "l1", 10_000)
    };
    let claimed = store.claim_session(only_low).await.unwrap().unwrap();
    assert_eq!(claimed.route.session_id, "low");
    assert_eq!(
        store.claim_session(claim("W", "l2", 10_000)).await.unwrap(),
        None,
        "at capacity"
    );
    let missing = store
        .claim_session(claim("nobody", "l3", 10_000))
        .await
        .unwrap_err();
    assert_eq!(code(&missing), Some(RuntimeErrorCode::WorkerNotFound));
    let busy = store
        .enqueue_session(T, "low", EnqueueOptions::default())
        .await
        .unwrap_err();
    assert_eq!(code(&busy), Some(RuntimeErrorCode::SessionStateConflict));
    assert_eq!(store.list_worker_sessions("W").await.unwrap().len(), 1);
}

#[tokio::test]
async fn recovery_suspends_dead_work_and_abandons_overdue_sealed_commands() {
    let (store, clock) = store_at(1_000);
    store.register_worker(worker("E", 1, 1_000)).await.unwrap();
    store
        .enqueue_session(
            T,
            "X",
            EnqueueOptions {
                priority: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let claimed = store
        .claim_session(claim("E", "le", 1_000))
        .await
        .unwrap()
        .unwrap();
    let lease = claimed_command(&store, "cmd").await;
    store
        .seal_command(T, "cmd", &lease, &sealing())
        .await
        .unwrap();
    clock.advance(1_200);
    let counts = store.recover_expired_work(600_000).await.unwrap();
    assert_eq!(counts.offline_workers, 1);
    assert_eq!(counts.suspended_sessions, 1);
    assert_eq!(counts.abandoned_commands, 0);
    let route = store.get_session_route(T, "X").await.unwrap().unwrap();
    assert_eq!(route.state, RouteState::Suspended);
    assert_eq!(
        route.failure,
        Some(object(json!({"reason": "worker_lease_expired"})))
    );
    assert!(
        store
            .get_execution_lease(T, "X")
            .await
            .unwrap()
            .unwrap()
            .released_at_ms
            .is_some()
    );
    let late = store
        .transition_session(T, &claimed.lease, to(RouteState::Running))
        .await;
    assert!(late.is_err());
    let offline = store.heartbeat_worker("E", 1_000).await.unwrap_err();
    assert_eq!(code(&offline), Some(RuntimeErrorCode::WorkerUnavailable));

    clock.advance(600_000);
    let counts = store.recover_expired_work(600_000).await.unwrap();
    assert_eq!(counts.abandoned_commands, 1);
    assert_eq!(
        store.claim_command(T, "cmd", "fp", 1).await.unwrap(),
        CommandClaim::Abandoned {
            reason: SWEEP_ABANDON_REASON.into()
        }
    );
}

async fn claimed_command(store: &MemoryStore, command: &str) -> String {
    claimed(store, command, "fp", 30_000).await
}

// ----- lifecycle --------------------------------------------------------------------------------

#[tokio::test]
async fn a_closed_store_refuses_use_and_reports_not_ready() {
    let (store, _) = store_at(1_000);
    assert!(store.health_check().await.ready);
    store.close().await.unwrap();
    let error = store.put_session(&record(T, "s", "x")).await.unwrap_err();
    assert_eq!(error, StoreError::NotOpen("MemoryStore is closed".into()));
    assert!(store.get_session(T, "s").await.is_err());
    assert!(!store.health_check().await.ready);
}

#[test]
fn a_transcript_snapshot_splits_its_entries_into_bounded_lines_that_rebuild_it() {
    let entries: Vec<TranscriptEntry> = (0..5u64)
        .map(|n| TranscriptEntry {
            id: format!("m{n}"),
            parent_message_id: n.checked_sub(1).map(|p| format!("m{p}")),
            created_at_ms: n,
            message: object(json!({ "role": "user", "content": "x".repeat(60) })).into(),
        })
        .collect();
    let transcript = Transcript {
        session_id: "s".into(),
        created_at_ms: 1,
        last_activity_ms: 9,
        entries,
        pending_inputs: vec![object(json!({ "inputId": "i1" }))],
        summary: Some("so far".into()),
        history_progress: None,
    };
    let largest = transcript
        .entries
        .iter()
        .map(|entry| serde_json::to_vec(entry).unwrap().len())
        .max()
        .unwrap();
    // Two entries fit a line, three do not.
    let line_bytes = 2 * largest + 1;
    let mut lines = Vec::new();
    state::snapshot_transcript(&mut lines, T, "s", &transcript, line_bytes);
    let kinds: Vec<&str> = lines.iter().map(JournalEntry::kind).collect();
    assert_eq!(
        kinds,
        ["transcript", "transcript_change", "transcript_change"]
    );
    let mut rebuilt = state::State::default();
    for line in lines {
        rebuilt.apply(line, 100).unwrap();
    }
    assert_eq!(
        rebuilt.transcripts.get(&state::scope(T, "s")),
        Some(&transcript)
    );

    // A transcript without entries is its document alone.
    let mut lines = Vec::new();
    let empty = Transcript {
        entries: Vec::new(),
        ..transcript
    };
    state::snapshot_transcript(&mut lines, T, "s", &empty, line_bytes);
    assert_eq!(lines.len(), 1);
}

/// What these receipts are sealed as acting on (it does not matter here).
fn sealing() -> crate::model::CommandTarget {
    crate::model::CommandTarget::new("session.close", None)
}
