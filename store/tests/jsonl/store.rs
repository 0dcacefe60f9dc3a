//! docs/storage.md §10.E against the JSONL store (cases 36-44, adapted to an OS advisory lock),
//! plus a restart that must bring back every port's state unchanged.

use std::fs::{self, OpenOptions};
use std::path::Path;
use std::sync::Arc;

use super::lock_is_free;
use crate::support::{
    T, assert_retention_scenario_restored, event, exercise_every_port, session,
    write_retention_scenario,
};
use agent_runtime::clock::ManualClock;
use agent_runtime_store::jsonl::{JOURNAL_FILE, LOCK_FILE};
use agent_runtime_store::*;
use serde_json::{Value, json};

fn options(clock: &Arc<ManualClock>, max_events: u64) -> StoreOptions {
    StoreOptions {
        max_events_per_session: max_events,
        ..StoreOptions::with_clock(clock.clone())
    }
}

fn journal_lines(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join(JOURNAL_FILE))
        .unwrap()
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

fn kinds(dir: &Path) -> Vec<String> {
    journal_lines(dir)
        .iter()
        .map(|line| {
            let value: Value = serde_json::from_str(line).unwrap();
            value["kind"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn line_of(entry: &JournalEntry) -> String {
    String::from_utf8(journal::encode_line(std::slice::from_ref(entry)).unwrap()).unwrap()
}

fn session_line() -> String {
    line_of(&JournalEntry::Session {
        record: session("s").into(),
    })
}

async fn open(dir: &Path) -> StoreResult<JsonlStore> {
    JsonlStore::open(dir, StoreOptions::default()).await
}

/// Case 36.
#[tokio::test]
async fn a_reopened_store_keeps_retention_keys_and_sealed_commands() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let store = JsonlStore::open(dir.path(), options(&clock, 2))
        .await
        .unwrap();
    let terminal = write_retention_scenario(&store).await;
    store.close().await.unwrap();

    let reopened = JsonlStore::open(dir.path(), options(&clock, 2))
        .await
        .unwrap();
    clock.advance(10_000);
    assert_retention_scenario_restored(&reopened, &terminal).await;
    reopened.close().await.unwrap();
}

/// Case 37.
#[tokio::test]
async fn start_up_compacts_the_journal_to_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let store = JsonlStore::open(dir.path(), options(&clock, 2))
        .await
        .unwrap();
    store.put_session(&session("s")).await.unwrap();
    for _ in 0..4 {
        store.append_event(T, event("s"), None).await.unwrap();
    }
    store.close().await.unwrap();
    assert_eq!(journal_lines(dir.path()).len(), 5);
    let store = JsonlStore::open(dir.path(), options(&clock, 2))
        .await
        .unwrap();
    store.close().await.unwrap();
    assert_eq!(kinds(dir.path()), ["session", "event", "event"]);
}

/// Case 38 and JSONL-03: an unterminated last line is skipped and cut off, valid JSON or not.
#[tokio::test]
async fn an_unterminated_last_line_is_skipped_and_cut_off() {
    for tail in [
        r#"{"v":1,"kind":"sess"#,
        r#"{"v":1,"kind":"event_log_reset","tenantId":"tenant","sessionId":"s"}"#,
    ] {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(JOURNAL_FILE),
            format!("{}{tail}", session_line()),
        )
        .unwrap();
        let store = open(dir.path()).await.unwrap();
        assert_eq!(store.get_session(T, "s").await.unwrap(), Some(session("s")));
        store.close().await.unwrap();
        let text = fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap();
        assert_eq!(text, session_line());
    }
}

#[tokio::test]
async fn a_torn_tail_never_becomes_mid_file_corruption() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join(JOURNAL_FILE),
        format!("{}{{\"v\":1,\"ki", session_line()),
    )
    .unwrap();
    let store = open(dir.path()).await.unwrap();
    store
        .append_event(T, event("s"), Some("after-tear"))
        .await
        .unwrap();
    drop(store); // no close: like a process that simply stops
    let reopened = open(dir.path()).await.unwrap();
    let stored = reopened
        .get_event_by_idempotency_key(T, "s", "after-tear")
        .await
        .unwrap();
    assert_eq!(stored.map(|e| e.sequence), Some(1));
    for line in journal_lines(dir.path()) {
        serde_json::from_str::<Value>(&line).unwrap();
    }
    reopened.close().await.unwrap();
}

fn expect_corrupt(error: StoreError, fragment: &str) {
    assert_eq!(
        error.runtime_code(),
        Some(RuntimeErrorCode::CorruptJournal),
        "{error}"
    );
    assert!(
        error.to_string().contains(fragment),
        "{error} lacks {fragment}"
    );
    assert!(
        error
            .to_string()
            .contains("Delete the directory to start from an empty store.")
    );
}

/// Case 39.
#[tokio::test]
async fn a_bad_line_in_the_middle_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{}not json\n{}", session_line(), session_line());
    fs::write(dir.path().join(JOURNAL_FILE), text).unwrap();
    let error = open(dir.path()).await.err().unwrap();
    expect_corrupt(error, "server-store.jsonl:2 is not valid JSON.");
}

/// Case 40, and entries that parse but make no sense.
#[tokio::test]
async fn unknown_versions_kinds_and_out_of_order_events_are_corrupt() {
    let mut v2: Value = serde_json::from_str(&session_line()).unwrap();
    v2["v"] = json!(2);
    let store = MemoryStore::new(StoreOptions::default());
    store.append_event(T, event("s"), None).await.unwrap();
    store.append_event(T, event("s"), None).await.unwrap();
    let mut events: Vec<String> = store.snapshot().unwrap().iter().map(line_of).collect();
    events.reverse();
    let cases = [
        (
            format!("{v2}\n"),
            "server-store.jsonl:1 is not a known journal entry",
        ),
        (
            format!("{}{{\"v\":1,\"kind\":\"mystery\"}}\n", session_line()),
            "server-store.jsonl:2 is not a known journal entry",
        ),
        (
            events.concat(),
            "server-store.jsonl:2 is not a known journal entry (Journal event",
        ),
    ];
    for (text, fragment) in cases {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(JOURNAL_FILE), text).unwrap();
        expect_corrupt(open(dir.path()).await.err().unwrap(), fragment);
    }
}

/// Case 41 (a JSONL store only exists once opened, so "before initialize" cannot happen).
#[tokio::test]
async fn a_closed_store_refuses_use_and_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await.unwrap();
    store.put_session(&session("s")).await.unwrap();
    let health = store.health_check().await;
    assert!(health.ready);
    assert_eq!(health.details["backend"], "jsonl");
    assert_eq!(health.details["state"], "ready");
    assert_eq!(
        health.details["directory"],
        dir.path().display().to_string()
    );
    store.close().await.unwrap();
    let error = store.put_session(&session("s")).await.unwrap_err();
    assert_eq!(error, StoreError::NotOpen("JsonlStore is closed".into()));
    let health = store.health_check().await;
    assert!(!health.ready);
    assert_eq!(health.details["state"], "closed");
}

/// Case 42: a held lock, by another store or by anyone else.
#[tokio::test]
async fn a_held_lock_is_reported_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path()).await.unwrap();
    let error = open(dir.path()).await.err().unwrap();
    assert_eq!(error.runtime_code(), Some(RuntimeErrorCode::Locked));
    let message = error.to_string();
    let lock_path = dir.path().join(LOCK_FILE).display().to_string();
    assert!(message.contains(&lock_path), "{message}");
    assert!(
        message.to_lowercase().contains("another process"),
        "{message}"
    );
    first.close().await.unwrap();

    let foreign = OpenOptions::new()
        .write(true)
        .open(dir.path().join(LOCK_FILE))
        .unwrap();
    foreign.lock().unwrap();
    let error = open(dir.path()).await.err().unwrap();
    assert_eq!(error.runtime_code(), Some(RuntimeErrorCode::Locked));
}

/// Case 43.
#[tokio::test]
async fn close_releases_the_lock_for_the_next_store() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path()).await.unwrap();
    assert!(!lock_is_free(dir.path()));
    first.close().await.unwrap();
    assert!(lock_is_free(dir.path()));
    let second = open(dir.path()).await.unwrap();
    assert!(!lock_is_free(dir.path()));
    second.close().await.unwrap();
    assert!(lock_is_free(dir.path()));
}

/// Case 44.
#[tokio::test]
async fn a_failed_start_up_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(JOURNAL_FILE), "not json\n").unwrap();
    expect_corrupt(
        open(dir.path()).await.err().unwrap(),
        "server-store.jsonl:1 is not valid JSON",
    );
    assert!(lock_is_free(dir.path()));
    expect_corrupt(
        open(dir.path()).await.err().unwrap(),
        "server-store.jsonl:1",
    );
    assert!(lock_is_free(dir.path()));
}

#[tokio::test]
async fn the_fsync_mode_writes_the_same_journal() {
    let dir = tempfile::tempdir().unwrap();
    let synced = StoreOptions {
        fsync: true,
        ..StoreOptions::default()
    };
    let store = JsonlStore::open(dir.path(), synced.clone()).await.unwrap();
    store.put_session(&session("s")).await.unwrap();
    store.close().await.unwrap();
    let store = JsonlStore::open(dir.path(), synced).await.unwrap();
    assert_eq!(store.get_session(T, "s").await.unwrap(), Some(session("s")));
    store.close().await.unwrap();
}

/// Everything a client of the ports can read back.
async fn observe(store: &JsonlStore) -> Value {
    let mut out = serde_json::Map::new();
    let sessions = store
        .list_sessions(T, None, Some(100))
        .await
        .unwrap()
        .sessions;
    out.insert("sessions".into(), serde_json::to_value(sessions).unwrap());
    for session in ["s", "trimmed", "routed"] {
        let events = store.read_events(T, session, 0, 1000).await.unwrap().events;
        out.insert(
            format!("events/{session}"),
            serde_json::to_value(events).unwrap(),
        );
        let range = store.event_stream_range(T, session).await.unwrap();
        out.insert(
            format!("range/{session}"),
            json!(range.map(|r| (r.first_sequence, r.head_sequence))),
        );
    }
    for (session, key) in [("s", "k1"), ("trimmed", "old")] {
        let stored = store
            .get_event_by_idempotency_key(T, session, key)
            .await
            .unwrap();
        out.insert(
            format!("key/{session}/{key}"),
            serde_json::to_value(stored).unwrap(),
        );
    }
    for command in ["done", "claimed", "abandoned"] {
        let claim = store.claim_command(T, command, "fp", 30_000).await.unwrap();
        let claim = match claim {
            CommandClaim::Claimed { .. } => "claimed".to_owned(),
            other => format!("{other:?}"),
        };
        out.insert(format!("command/{command}"), json!(claim));
    }
    for session in ["s", "fork"] {
        let transcript = store.load_transcript(T, session).await.unwrap();
        out.insert(
            format!("transcript/{session}"),
            serde_json::to_value(transcript).unwrap(),
        );
    }
    let durable = store
        .read_durable(T, "routed", 0, 100)
        .await
        .unwrap()
        .events;
    out.insert("durable".into(), serde_json::to_value(durable).unwrap());
    let lease = store.get_execution_lease(T, "routed").await.unwrap();
    out.insert("lease".into(), serde_json::to_value(lease).unwrap());
    let route = store.get_session_route(T, "routed").await.unwrap();
    out.insert("route".into(), serde_json::to_value(route).unwrap());
    let workers = store.list_workers().await.unwrap();
    out.insert("workers".into(), serde_json::to_value(workers).unwrap());
    Value::Object(out)
}

#[tokio::test]
async fn a_reopened_directory_reads_back_every_port_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let store = JsonlStore::open(dir.path(), options(&clock, 10))
        .await
        .unwrap();
    exercise_every_port(&store).await;
    // The replayed state equals the written one, record for record; then what clients read
    // back is the same from one restart to the next.
    let before = store.snapshot().unwrap();
    store.close().await.unwrap();

    let reopened = JsonlStore::open(dir.path(), options(&clock, 10))
        .await
        .unwrap();
    assert_eq!(reopened.snapshot().unwrap(), before);
    let first_view = observe(&reopened).await;
    reopened.close().await.unwrap();
    assert_eq!(first_view["events/s"].as_array().unwrap().len(), 3);
    assert_eq!(first_view["events/trimmed"][0]["sequence"], 1);
    assert_eq!(
        first_view["command/done"],
        json!("Completed { result: Object {\"ok\": Bool(true)} }")
    );
    assert_eq!(
        first_view["command/abandoned"],
        json!("Abandoned { reason: \"gone\" }")
    );
    assert_eq!(
        first_view["command/claimed"],
        json!("InProgress { retry_after_ms: 30000 }")
    );
    assert_eq!(first_view["route"]["state"], "provisioning");
    assert_eq!(first_view["durable"].as_array().unwrap().len(), 2);
    assert_eq!(
        first_view["transcript/fork"]["entries"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let again = JsonlStore::open(dir.path(), options(&clock, 10))
        .await
        .unwrap();
    assert_eq!(observe(&again).await, first_view);
    // The lease and route still fence: the old fence works, no fence does not.
    let lease = again
        .get_execution_lease(T, "routed")
        .await
        .unwrap()
        .unwrap();
    again
        .append_events(T, "routed", vec![event("routed")], Some(&lease.fence()))
        .await
        .unwrap();
    let unfenced = again
        .append_event(T, event("routed"), None)
        .await
        .unwrap_err();
    assert_eq!(
        unfenced.runtime_code(),
        Some(RuntimeErrorCode::LeaseRequired)
    );
    again.close().await.unwrap();
}

/// RES-07: a session that keeps producing events costs the disk what the store retains, not
/// everything it ever wrote: a running store rewrites its journal as a snapshot once it is past
/// `jsonl_compaction_min_bytes` and mostly dead, so 20,000 events into a session that retains 50
/// never leave more than a bounded journal, another session is untouched, appends and reads go on
/// across every rewrite, and a restart brings back exactly the retained state.
#[tokio::test]
async fn res_07_a_runaway_session_keeps_the_journal_bounded_while_it_runs() {
    const RETAINED: u64 = 50;
    const MIN_BYTES: u64 = 64 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let options = StoreOptions {
        jsonl_compaction_min_bytes: MIN_BYTES,
        ..options(&clock, RETAINED)
    };
    let store = JsonlStore::open(dir.path(), options.clone()).await.unwrap();
    store.put_session(&session("calm")).await.unwrap();
    for i in 0..10 {
        store
            .append_event(T, event("calm"), Some(&format!("calm-{i}")))
            .await
            .unwrap();
    }
    store.put_session(&session("runaway")).await.unwrap();
    let journal = dir.path().join(JOURNAL_FILE);
    let mut written = 0u64;
    let mut largest = 0u64;
    for i in 0..20_000u64 {
        let appended = store.append_event(T, event("runaway"), None).await.unwrap();
        assert_eq!(appended.sequence, i + 1, "sequences go on across rewrites");
        let size = fs::metadata(&journal).unwrap().len();
        written += 1;
        largest = largest.max(size);
        if i % 5_000 == 4_999 {
            let page = store
                .read_events(T, "runaway", i + 1 - RETAINED, 1_000)
                .await
                .unwrap();
            assert_eq!(
                page.events.len() as u64,
                RETAINED,
                "the retained tail reads back"
            );
        }
    }
    // One event line is under 400 bytes: everything written is several MB, the journal never
    // more than twice the threshold plus a line.
    assert!(
        written * 200 > 16 * MIN_BYTES,
        "the test wrote far past the threshold"
    );
    assert!(
        largest <= 2 * MIN_BYTES + 1024,
        "the journal peaked at {largest} bytes"
    );
    store.close().await.unwrap();

    let reopened = JsonlStore::open(dir.path(), options).await.unwrap();
    let runaway = reopened
        .read_events(T, "runaway", 20_000 - RETAINED, 1_000)
        .await
        .unwrap();
    let sequences: Vec<u64> = runaway.events.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        ((20_000 - RETAINED + 1)..=20_000).collect::<Vec<_>>()
    );
    let calm = reopened.read_events(T, "calm", 0, 100).await.unwrap();
    assert_eq!(calm.events.len(), 10, "the other session is untouched");
    let replayed = reopened
        .append_event(T, event("calm"), Some("calm-3"))
        .await
        .unwrap();
    assert_eq!(
        replayed.sequence, 4,
        "idempotency keys survive the rewrites"
    );
    reopened.close().await.unwrap();
}
