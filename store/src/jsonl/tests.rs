//! Journal failures of the JSONL backend, with a real failing write.

use crate::ports::EventReader;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::time::Duration;

use agent_runtime::protocol::{EventType, JsonObject};

use super::*;
use crate::conformance::support::{CREATED_AT, active_session};
use crate::model::{NewEvent, SessionRecord};
use crate::ports::{CommandReceipts, EventLog, SessionRecords, StoreLifecycle};

pub(super) fn record() -> SessionRecord {
    active_session("t", "s", CREATED_AT)
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
    *store.backend().file.journal.lock().unwrap() = Some(read_only);

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
    // The event that was never journaled is not readable either (JSONL-08).
    assert_eq!(store.latest_event_sequence("t", "s").await.unwrap(), None);
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

fn stream_event(text: &str) -> NewEvent {
    let mut data = JsonObject::new();
    data.insert("text".into(), serde_json::Value::from(text));
    NewEvent {
        session_id: "s".into(),
        request_id: None,
        occurred_at: String::new(),
        event_type: EventType::SessionStream,
        data,
    }
}

/// JSONL-08: `fdatasync` fails (the journal handle is swapped for the write end of a pipe, so
/// `write(2)` succeeds and `fdatasync` answers EINVAL). The call is not acknowledged, the store
/// fails closed (every later write refused, never a second sync attempt), the unsynced event is
/// never readable nor delivered to a live follower, and a restart replays only what was
/// acknowledged. Catalogue: "the process exits, or all later writes are refused"; we refuse.
#[tokio::test]
async fn jsonl_08_fsync_failure_fail_stops_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        fsync: true,
        ..StoreOptions::default()
    };
    let store = JsonlStore::open(dir.path(), options.clone()).await.unwrap();
    store.put_session(&record()).await.unwrap();
    let first = store
        .append_event("t", stream_event("acknowledged"), None)
        .await
        .unwrap();
    assert_eq!(first.sequence, 1);

    // A live follower (what an SSE stream does) waiting past the acknowledged head.
    let follower = {
        let store = store.clone();
        tokio::spawn(async move {
            store.wait_for_events("t", "s", 1).await.unwrap();
            store.read_events("t", "s", 1, 100).await
        })
    };
    tokio::task::yield_now().await;

    let (mut reader, writer) = std::io::pipe().unwrap();
    *store.backend().file.journal.lock().unwrap() = Some(File::from(OwnedFd::from(writer)));
    let failed = store
        .append_event("t", stream_event("never durable"), None)
        .await
        .unwrap_err();
    match &failed {
        StoreError::Backend {
            retry_safe: false,
            message,
        } => assert!(message.contains("syncing"), "{message}"),
        other => panic!("expected a non-retry-safe sync failure, got {other:?}"),
    }

    // Nothing of the failed change is visible: not to readers, not to the follower.
    assert_eq!(
        store.latest_event_sequence("t", "s").await.unwrap(),
        Some(1)
    );
    let page = store.read_events("t", "s", 0, 100).await.unwrap();
    assert_eq!(page.events, vec![first.clone()]);
    let after_head = store.read_events("t", "s", 1, 100).await.unwrap();
    assert!(after_head.events.is_empty(), "{:?}", after_head.events);
    let ahead = store.read_events("t", "s", 2, 100).await.unwrap_err();
    assert!(ahead.to_string().contains("ahead"), "{ahead}");
    let followed = tokio::time::timeout(Duration::from_secs(5), follower)
        .await
        .expect("the follower was woken")
        .unwrap();
    let followed = followed.unwrap();
    assert!(followed.events.is_empty(), "{:?}", followed.events);

    // Fail-stopped: every later mutation is refused without touching the journal again.
    let later = store
        .append_event("t", stream_event("later"), None)
        .await
        .unwrap_err();
    assert_eq!(later.runtime_code(), Some(RuntimeErrorCode::JournalFailed));
    let claim = store
        .claim_command("t", "c", "fp", 30_000)
        .await
        .unwrap_err();
    assert_eq!(claim.runtime_code(), Some(RuntimeErrorCode::JournalFailed));
    assert!(!store.health_check().await.ready);
    // Session reads keep working (docs/storage.md §9.1).
    assert_eq!(store.get_session("t", "s").await.unwrap(), Some(record()));

    // Closing syncs the (pipe) handle once more and reports it; the directory is unlocked anyway.
    assert!(store.close().await.is_err());
    drop(store);
    let mut written = String::new();
    reader.read_to_string(&mut written).unwrap();
    assert_eq!(
        written.lines().count(),
        1,
        "exactly the one failed line was written, never retried: {written}"
    );
    assert!(written.contains("never durable"));
    assert!(!written.contains("later"));

    // Restart: only what was acknowledged; the next sequence is 2, and the sequence the failed
    // event had was never visible to anyone.
    let reopened = JsonlStore::open(dir.path(), options).await.unwrap();
    let page = reopened.read_events("t", "s", 0, 100).await.unwrap();
    assert_eq!(page.events, vec![first]);
    let next = reopened
        .append_event("t", stream_event("after restart"), None)
        .await
        .unwrap();
    assert_eq!(next.sequence, 2);
    reopened.close().await.unwrap();
}

/// JSONL-08 when the write itself fails part-way and the bytes reach the file: the state rolls
/// back to the acknowledged prefix, and a restart cuts the torn tail (JSONL-01's rule).
#[tokio::test]
async fn jsonl_08_a_torn_failed_write_is_rolled_back_and_cut_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store.put_session(&record()).await.unwrap();
    let first = store
        .append_event("t", stream_event("acknowledged"), None)
        .await
        .unwrap();
    // Simulate the bytes a failing write(2) left behind (a torn line), then make the next
    // append fail.
    let path = dir.path().join(JOURNAL_FILE);
    {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, br#"{"v":1,"kind":"event","tenantId":"t""#).unwrap();
    }
    *store.backend().file.journal.lock().unwrap() = Some(File::open(&path).unwrap());
    store
        .append_event("t", stream_event("failed"), None)
        .await
        .unwrap_err();
    assert_eq!(
        store.latest_event_sequence("t", "s").await.unwrap(),
        Some(1)
    );
    store.close().await.unwrap();

    let reopened = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    let page = reopened.read_events("t", "s", 0, 100).await.unwrap();
    assert_eq!(page.events, vec![first]);
    reopened.close().await.unwrap();
}

/// JSONL-11, reading: a line longer than the largest record is corruption named by its line,
/// found after reading at most one byte past the limit, never a silent skip; a short torn last
/// line is still skipped.
#[test]
fn jsonl_11_a_line_over_the_record_limit_is_corruption_at_its_line() {
    let path = std::path::Path::new("server-store.jsonl");
    let long = "x".repeat(100);
    for journal in [format!("\n{long}\n"), format!("\n\n{long}")] {
        let error = replay::replay_lines(path, journal.as_bytes(), 10_000, 64).unwrap_err();
        assert_eq!(error.runtime_code(), Some(RuntimeErrorCode::CorruptJournal));
        let message = error.to_string();
        let line = if journal.ends_with('\n') { 2 } else { 3 };
        assert!(
            message.contains(&format!(
                "server-store.jsonl:{line} is longer than the largest record (64 bytes)"
            )),
            "{message}"
        );
    }
    let torn = "\n{\"torn";
    assert!(replay::replay_lines(path, torn.as_bytes(), 10_000, 64).is_ok());
}

/// JSONL-11, writing: a record over the limit is refused before anything is written, the change
/// is rolled back, and the store goes on (no sequence used, nothing to replay).
#[tokio::test]
async fn jsonl_11_an_oversized_record_is_refused_and_the_store_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store.put_session(&record()).await.unwrap();
    let event = |delta: String| NewEvent {
        session_id: "s".into(),
        request_id: None,
        occurred_at: String::new(),
        event_type: EventType::SessionStream,
        data: serde_json::json!({ "type": "content", "sessionId": "s", "delta": delta })
            .as_object()
            .unwrap()
            .clone(),
    };
    let huge = event("x".repeat(replay::MAX_RECORD_BYTES));
    let refused = store.append_event("t", huge, None).await.unwrap_err();
    assert!(
        matches!(refused, StoreError::InvalidArgument(_)),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("too large to store"),
        "{refused}"
    );
    assert!(!refused.to_string().contains("JSONL"), "{refused}");
    assert_eq!(store.latest_event_sequence("t", "s").await.unwrap(), None);
    let next = store
        .append_event("t", event("small".into()), None)
        .await
        .unwrap();
    assert_eq!(next.sequence, 1, "the refused record used no sequence");
    assert!(store.health_check().await.ready);
    store.close().await.unwrap();

    let reopened = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(
        reopened.latest_event_sequence("t", "s").await.unwrap(),
        Some(1)
    );
    reopened.close().await.unwrap();
}

/// The durability steps start-up recorded for `directory` (test builds only).
fn durable_steps_of(directory: &Path) -> Vec<&'static str> {
    replay::DURABLE_STEPS
        .lock()
        .unwrap()
        .iter()
        .filter(|(dir, _)| dir == directory)
        .map(|(_, step)| *step)
        .collect()
}

/// What a power cut leaves of the store in `from`: the journal up to its last synced byte,
/// copied into a new directory.
fn after_power_cut(store: &JsonlStore, from: &Path) -> tempfile::TempDir {
    let synced = store.backend().file.synced_len.load(Ordering::Acquire);
    let bytes = std::fs::read(from.join(JOURNAL_FILE)).unwrap();
    let survivor = tempfile::tempdir().unwrap();
    let kept = usize::try_from(synced).unwrap();
    std::fs::write(survivor.path().join(JOURNAL_FILE), &bytes[..kept]).unwrap();
    survivor
}

pub(super) fn numbered_event(n: usize) -> NewEvent {
    let mut data = JsonObject::new();
    data.insert("n".into(), n.into());
    NewEvent {
        session_id: "s".into(),
        request_id: None,
        occurred_at: String::new(),
        event_type: EventType::SessionStream,
        data,
    }
}

#[tokio::test]
async fn jsonl_07_with_fsync_every_acknowledged_write_survives_a_simulated_power_cut() {
    let parent = tempfile::tempdir().unwrap();
    let directory = parent.path().join("new-store");
    let options = StoreOptions {
        fsync: true,
        ..StoreOptions::default()
    };
    let store = JsonlStore::open(&directory, options.clone()).await.unwrap();
    // Creating the store: the new directory's entry, then the snapshot, its rename, and the
    // directory entry of the rename, each synced before the store is used.
    assert_eq!(
        durable_steps_of(&directory),
        [
            "created directory synced in its parent",
            "snapshot synced",
            "snapshot renamed over the journal",
            "directory synced"
        ]
    );

    let journal = directory.join(JOURNAL_FILE);
    store.put_session(&record()).await.unwrap();
    let mut acknowledged = Vec::new();
    for n in 0..25 {
        acknowledged.push(
            store
                .append_event("t", numbered_event(n), None)
                .await
                .unwrap(),
        );
        // When an append returns, every byte of the journal is synced.
        let synced = store.backend().file.synced_len.load(Ordering::Acquire);
        assert_eq!(synced, std::fs::metadata(&journal).unwrap().len());
    }
    let claim = store.claim_command("t", "c", "fp", 60_000).await.unwrap();

    // The power cut: whatever was not synced is gone; the reopened copy has every acknowledged
    // write.
    let survivor = after_power_cut(&store, &directory);
    let reopened = JsonlStore::open(survivor.path(), options).await.unwrap();
    assert_eq!(
        reopened.get_session("t", "s").await.unwrap(),
        Some(record())
    );
    let page = reopened.read_events("t", "s", 0, 100).await.unwrap();
    assert_eq!(page.events, acknowledged);
    let repeat = reopened
        .claim_command("t", "c", "fp", 60_000)
        .await
        .unwrap();
    assert!(
        matches!(repeat, crate::model::CommandClaim::InProgress { .. }),
        "the acknowledged claim {claim:?} survived: {repeat:?}"
    );
    // Reopening an existing directory syncs the compaction again, but creates nothing.
    assert_eq!(
        durable_steps_of(survivor.path()),
        [
            "snapshot synced",
            "snapshot renamed over the journal",
            "directory synced"
        ]
    );
    store.close().await.unwrap();
}

/// The default (decision S8): acknowledged writes survive a process crash, not a power cut. The
/// same simulation loses every append since start-up, which is why `fsync = true` exists.
#[tokio::test]
async fn jsonl_07_without_fsync_only_the_start_up_snapshot_is_power_loss_durable() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store.put_session(&record()).await.unwrap();
    store.close().await.unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store
        .append_event("t", numbered_event(1), None)
        .await
        .unwrap();
    let survivor = after_power_cut(&store, dir.path());
    let reopened = JsonlStore::open(survivor.path(), StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(
        reopened.get_session("t", "s").await.unwrap(),
        Some(record()),
        "the synced snapshot survives"
    );
    assert!(
        reopened
            .read_events("t", "s", 0, 100)
            .await
            .unwrap()
            .events
            .is_empty(),
        "the unsynced append does not"
    );
    store.close().await.unwrap();
}

fn message(role: &str, text: &str) -> JsonObject {
    let serde_json::Value::Object(message) = serde_json::json!({ "role": role, "content": text })
    else {
        unreachable!("an object literal");
    };
    message
}

#[tokio::test]
async fn a_transcript_turn_journals_the_turn_not_the_transcript_and_a_restart_rebuilds_it() {
    use crate::model::{HistoryProgress, HistoryState, TranscriptMutation};
    use crate::ports::TranscriptStore;

    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join(JOURNAL_FILE);
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store.create_transcript("t", "s", None).await.unwrap();
    let long = "x".repeat(2_000);
    let mut turn_bytes = Vec::new();
    for turn in 0..100 {
        let before = std::fs::metadata(&journal).unwrap().len();
        let mutation = TranscriptMutation::AppendMessages(vec![
            message("user", &format!("question {turn} {long}")),
            message("assistant", &format!("answer {turn}")),
        ]);
        store
            .mutate_transcript("t", "s", mutation, None)
            .await
            .unwrap();
        turn_bytes.push(std::fs::metadata(&journal).unwrap().len() - before);
    }
    // The transcript reached 200 KB; each turn still wrote about its own 2 KB.
    assert!(
        turn_bytes.iter().all(|&bytes| bytes < 3_000),
        "journal bytes per turn: {turn_bytes:?}"
    );

    // The other fields a mutation changes survive too.
    let pending = message("user", "later");
    let mut pending_input = pending.clone();
    pending_input.insert("inputId".into(), "input-1".into());
    store
        .mutate_transcript(
            "t",
            "s",
            TranscriptMutation::EnqueueInput(pending_input),
            None,
        )
        .await
        .unwrap();
    let compact = TranscriptMutation::Compact {
        summary: "the story so far".into(),
        message: message("system", "summary"),
    };
    store
        .mutate_transcript("t", "s", compact, None)
        .await
        .unwrap();
    let progress = HistoryProgress {
        state: HistoryState::Failed,
        request_id: Some("request-9".into()),
        turn_id: None,
        message_id: None,
        covered_request_id: Some("request-8".into()),
        updated_at_ms: 42,
        detail: Some("gap".into()),
        repaired_messages: None,
    };
    store
        .mutate_transcript(
            "t",
            "s",
            TranscriptMutation::SaveHistoryProgress(progress),
            None,
        )
        .await
        .unwrap();
    let before_restart = store.load_transcript("t", "s").await.unwrap().unwrap();
    assert_eq!(before_restart.entries.len(), 201);
    assert_eq!(before_restart.pending_inputs.len(), 1);
    store.close().await.unwrap();
    drop(store);

    let reopened = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(
        reopened.load_transcript("t", "s").await.unwrap(),
        Some(before_restart)
    );
}

#[tokio::test]
async fn a_transcript_larger_than_a_record_survives_restarts_split_over_snapshot_lines() {
    use crate::model::TranscriptMutation;
    use crate::ports::TranscriptStore;

    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store.create_transcript("t", "s", None).await.unwrap();
    // Each turn fits a record; together they pass the record limit.
    let turn = "y".repeat(1 << 20);
    let turns = replay::MAX_RECORD_BYTES / turn.len() + 4;
    for _ in 0..turns {
        let mutation = TranscriptMutation::AppendMessages(vec![message("tool", &turn)]);
        store
            .mutate_transcript("t", "s", mutation, None)
            .await
            .unwrap();
    }
    store.close().await.unwrap();
    drop(store);
    // The first start compacts the journal into a snapshot; the second reads that snapshot.
    for _ in 0..2 {
        let reopened = JsonlStore::open(dir.path(), StoreOptions::default())
            .await
            .unwrap();
        let transcript = reopened.load_transcript("t", "s").await.unwrap().unwrap();
        assert_eq!(transcript.entries.len(), turns);
        reopened.close().await.unwrap();
    }
}

#[tokio::test]
async fn memories_survive_a_restart_and_a_compaction_and_deletes_stay_deleted() {
    use crate::model::MemoryRecord;
    use crate::ports::AgentMemories;
    let memory = |name: &str| MemoryRecord {
        scope: "tenant".to_owned(),
        name: name.to_owned(),
        description: "d".to_owned(),
        memory_type: "user".to_owned(),
        body: "b".repeat(200),
        updated_at_ms: 0,
    };
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        jsonl_compaction_min_bytes: 1,
        ..StoreOptions::default()
    };
    let store = JsonlStore::open(dir.path(), options.clone()).await.unwrap();
    for name in ["kept", "gone"] {
        store.save_memory("t", memory(name), 10).await.unwrap();
    }
    assert!(store.delete_memory("t", "tenant", "gone").await.unwrap());
    store.close().await.unwrap();
    for _ in 0..2 {
        // Once from the journal as written, once from the compacted one.
        let reopened = JsonlStore::open(dir.path(), options.clone()).await.unwrap();
        let names: Vec<String> = reopened
            .list_memories("t", "tenant")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(names, ["kept"]);
        reopened.put_session(&record()).await.unwrap();
        reopened.close().await.unwrap();
    }
}

/// QUEUE-01: queueing an input journals that input, not the queue. Forty 50 KB inputs each
/// write about their own size (the queue reached 2 MB), applying and cancelling write a line of
/// a few hundred bytes, and a restart (the journal as written, then the snapshot it compacts to)
/// rebuilds the same queue in order.
#[tokio::test]
async fn queue_01_a_queued_input_journals_the_input_not_the_queue() {
    use crate::model::TranscriptMutation;
    use crate::ports::TranscriptStore;

    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join(JOURNAL_FILE);
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    store.put_session(&record()).await.unwrap();
    store.create_transcript("t", "s", None).await.unwrap();
    let input = |n: usize| {
        let mut input = message("user", &format!("{n}:{}", "q".repeat(50_000)));
        input.insert("inputId".into(), format!("input-{n}").into());
        input
    };
    let mut written = Vec::new();
    for n in 0..40 {
        let before = std::fs::metadata(&journal).unwrap().len();
        let mutation = TranscriptMutation::EnqueueInput(input(n));
        store
            .mutate_transcript("t", "s", mutation, None)
            .await
            .unwrap();
        written.push(std::fs::metadata(&journal).unwrap().len() - before);
    }
    assert!(
        written.iter().all(|&bytes| bytes < 51_000),
        "journal bytes per queued input: {written:?}"
    );
    for mutation in [
        TranscriptMutation::CancelInput {
            input_id: "input-3".into(),
        },
        TranscriptMutation::ApplyInput {
            input_id: "input-0".into(),
            request_id: "request-1".into(),
            message: message("user", "applied"),
        },
    ] {
        let before = std::fs::metadata(&journal).unwrap().len();
        store
            .mutate_transcript("t", "s", mutation, None)
            .await
            .unwrap();
        let bytes = std::fs::metadata(&journal).unwrap().len() - before;
        assert!(bytes < 1_000, "a dequeue wrote {bytes} bytes");
    }
    // Replacing a queued input keeps its place.
    let mut replaced = input(7);
    replaced.insert("content".into(), "replaced".into());
    let mutation = TranscriptMutation::EnqueueInput(replaced);
    store
        .mutate_transcript("t", "s", mutation, None)
        .await
        .unwrap();
    let expected = store.load_transcript("t", "s").await.unwrap().unwrap();
    assert_eq!(expected.pending_inputs.len(), 38);
    assert_eq!(expected.pending_inputs[5]["content"], "replaced");
    store.close().await.unwrap();
    drop(store);

    for _ in 0..2 {
        let reopened = JsonlStore::open(dir.path(), StoreOptions::default())
            .await
            .unwrap();
        let restored = reopened.load_transcript("t", "s").await.unwrap();
        assert_eq!(restored.as_ref(), Some(&expected));
        reopened.close().await.unwrap();
    }
}

/// A journal written before queued inputs were journaled one by one (each change held the whole
/// pending list as `pendingInputs`) still replays to the same queue.
#[tokio::test]
async fn a_journal_with_whole_pending_lists_still_replays() {
    use crate::ports::TranscriptStore;

    let dir = tempfile::tempdir().unwrap();
    let pending = |ids: &[&str]| -> Vec<Value> {
        ids.iter()
            .map(|id| serde_json::json!({"inputId": id, "role": "user", "content": id}))
            .collect()
    };
    let transcript = serde_json::json!({
        "sessionId": "s", "createdAtMs": 1, "lastActivityMs": 1, "entries": [], "pendingInputs": [],
    });
    let change = |ids: &[&str]| {
        serde_json::json!({"v": 1, "kind": "transcript_change", "tenantId": "t", "sessionId": "s",
            "change": {"appended": [], "pendingInputs": pending(ids), "lastActivityMs": 2}})
    };
    let lines = [
        serde_json::json!({"v": 1, "kind": "transcript", "tenantId": "t", "sessionId": "s",
            "transcript": transcript}),
        change(&["a"]),
        change(&["a", "b"]),
        change(&["b"]),
    ];
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    std::fs::write(dir.path().join(JOURNAL_FILE), text).unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    let doc = store.load_transcript("t", "s").await.unwrap().unwrap();
    assert_eq!(doc.pending_inputs.len(), 1);
    assert_eq!(doc.pending_inputs[0]["inputId"], "b");
    store.close().await.unwrap();
}

/// A webhook delivery is journaled on the line of the event that causes it, and the outbox
/// (endpoints, deliveries, their attempts) survives a restart and a compaction; claims do not.
#[tokio::test]
async fn a_webhook_delivery_shares_its_events_line_and_survives_restarts() {
    use crate::outbox::*;
    use crate::ports::WebhookOutbox;
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        jsonl_compaction_min_bytes: 1,
        ..StoreOptions::default()
    };
    let store = JsonlStore::open(dir.path(), options.clone()).await.unwrap();
    let subscription = WebhookSubscription {
        tenant_id: "t".to_owned(),
        endpoint_id: "hook".to_owned(),
        event_types: vec![SESSION_CLOSED.to_owned()],
    };
    store
        .sync_webhook_endpoints(std::slice::from_ref(&subscription))
        .await
        .unwrap();
    for session in ["s-1", "s-2"] {
        let closed = NewEvent {
            session_id: session.into(),
            request_id: None,
            occurred_at: String::new(),
            event_type: EventType::SessionClosed,
            data: serde_json::json!({"reason": "user"})
                .as_object()
                .unwrap()
                .clone(),
        };
        store.append_event("t", closed, None).await.unwrap();
    }
    let journal = std::fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap();
    let closing_lines: Vec<&str> = journal
        .lines()
        .filter(|line| line.contains(r#""type":"session.closed""#))
        .collect();
    assert_eq!(closing_lines.len(), 2);
    for line in closing_lines {
        assert!(line.contains(r#""kind":"batch""#), "{line}");
        assert!(line.contains(r#""kind":"webhook_delivery""#), "{line}");
    }
    let claimed = store.claim_webhook_deliveries(10, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 2);
    store
        .record_webhook_attempt(&claimed[0], &AttemptOutcome::Delivered, 60_000)
        .await
        .unwrap();
    let before = store
        .list_webhook_deliveries("t", "hook", None, 0, 10)
        .await
        .unwrap();
    store.close().await.unwrap();
    for _ in 0..2 {
        // Once from the journal as written, once from the compacted one.
        let reopened = JsonlStore::open(dir.path(), options.clone()).await.unwrap();
        let after = reopened
            .list_webhook_deliveries("t", "hook", None, 0, 10)
            .await
            .unwrap();
        assert_eq!(after, before);
        assert_eq!(reopened.list_webhook_endpoints().await.unwrap().len(), 1);
        let again = reopened.claim_webhook_deliveries(10, 60_000).await.unwrap();
        assert_eq!(again.len(), 1, "the undelivered one, its claim void");
        assert_eq!(again[0].delivery.session_id, "s-2");
        reopened.put_session(&record()).await.unwrap();
        reopened.close().await.unwrap();
    }
}
