//! JSONL-04: lines that are valid JSON but make no sense — a duplicate sequence, a sequence that
//! goes backwards, a gap, an unknown event type, a session id that does not match its entry, a
//! missing required field — fail start-up with `file:line` wherever they are, except in the
//! unterminated tail (decision S7). Nothing is reordered or deduplicated to make them fit.

use std::fs;
use std::path::Path;

use super::open_default;
use crate::support::{T, session, text_event};
use agent_runtime_store::jsonl::JOURNAL_FILE;
use agent_runtime_store::*;
use serde_json::{Value, json};

/// A journal written by the store, one state change per line:
/// 1 session `s`, 2-4 events 1-3 of `s` (the third keyed `k`), 5 the transcript of `s`,
/// 6-7 durable events 1-2 of `s`, 8 session `t`.
async fn valid_lines() -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let store = open_default(dir.path()).await;
    store.put_session(&session("s")).await.unwrap();
    for n in 1..=3 {
        let key = (n == 3).then_some("k");
        store
            .append_event(T, text_event("s", &format!("event {n}")), key)
            .await
            .unwrap();
    }
    store.create_transcript(T, "s", None).await.unwrap();
    for expected in [ExpectedSequence::Empty, ExpectedSequence::At(1)] {
        let draft = DurableEventDraft {
            event_type: "session_created".into(),
            data: Default::default(),
            occurred_at: None,
            correlation: Correlation::default(),
        };
        store
            .append_durable(T, "s", vec![draft], expected, None)
            .await
            .unwrap();
    }
    store.put_session(&session("t")).await.unwrap();
    store.close().await.unwrap();
    let text = fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 8, "{text}");
    lines
}

fn render(lines: &[Value]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

async fn open_text(text: &str) -> (tempfile::TempDir, StoreResult<JsonlStore>) {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(JOURNAL_FILE), text).unwrap();
    let opened = JsonlStore::open(dir.path(), StoreOptions::default()).await;
    (dir, opened)
}

fn assert_corrupt_at(case: &str, opened: StoreResult<JsonlStore>, line: usize, dir: &Path) {
    let prefix = format!("{}:{line} ", dir.join(JOURNAL_FILE).display());
    match opened {
        Err(StoreError::Runtime {
            code: RuntimeErrorCode::CorruptJournal,
            message,
        }) => assert!(message.contains(&prefix), "{case}: {message}"),
        Err(other) => panic!("{case}: expected a corrupt journal at line {line}, got {other:?}"),
        Ok(_) => panic!("{case}: expected a corrupt journal at line {line}, the store opened"),
    }
}

/// Every damaged variant fails at `line` and leaves the file as it was (no compaction ran).
async fn expect_refused(case: &str, lines: &[Value], line: usize) {
    let text = render(lines);
    let (dir, opened) = open_text(&text).await;
    assert_corrupt_at(case, opened, line, dir.path());
    assert_eq!(
        fs::read_to_string(dir.path().join(JOURNAL_FILE)).unwrap(),
        text,
        "{case}: a refused journal is not rewritten"
    );
    // The same damage as the unterminated last line is a torn write: skipped (decision S7).
    let torn = render(&lines[..line - 1]) + &lines[line - 1].to_string();
    let (_dir, opened) = open_text(&torn).await;
    if let Err(error) = opened {
        panic!("{case}: as the torn tail it is skipped, got {error:?}");
    }
}

#[tokio::test]
async fn jsonl_04_valid_json_with_bad_semantics_fails_start_up_with_its_line() {
    let valid = valid_lines().await;
    let (_dir, opened) = open_text(&render(&valid)).await;
    let store = opened.expect("the unmodified journal opens");
    let page = store.read_events(T, "s", 0, 10).await.unwrap();
    assert_eq!(page.events.len(), 3);

    // A duplicate sequence: event 2 twice.
    let mut lines = valid.clone();
    lines.insert(3, valid[2].clone());
    expect_refused("duplicate event", &lines, 4).await;

    // A sequence that goes backwards: the third event numbered 1.
    let mut lines = valid.clone();
    lines[3]["event"]["sequence"] = json!(1);
    expect_refused("backwards sequence", &lines, 4).await;

    // Reordered: events 3 and 2 swapped (never sorted back into place).
    let mut lines = valid.clone();
    lines.swap(2, 3);
    expect_refused("swapped events", &lines, 3).await;

    // A gap: event 2 missing.
    let mut lines = valid.clone();
    lines.remove(2);
    expect_refused("gap", &lines, 3).await;

    // A sequence of zero.
    let mut lines = valid.clone();
    lines[1]["event"]["sequence"] = json!(0);
    expect_refused("sequence zero", &lines, 2).await;

    // An unknown event type.
    let mut lines = valid.clone();
    lines[2]["event"]["type"] = json!("session.mystery");
    expect_refused("unknown event type", &lines, 3).await;

    // A session id that does not match: in the envelope, or in the entry around it.
    let mut lines = valid.clone();
    lines[2]["event"]["sessionId"] = json!("other");
    expect_refused("envelope of another session", &lines, 3).await;
    let mut lines = valid.clone();
    lines[2]["sessionId"] = json!("other");
    expect_refused("entry of another session", &lines, 3).await;
    // The transcript of another session filed under `s`.
    let mut lines = valid.clone();
    lines[4]["transcript"]["sessionId"] = json!("other");
    expect_refused("transcript of another session", &lines, 5).await;
    // An idempotency key of `s` that names an event of another session.
    let mut lines = valid.clone();
    let mut key = json!({
        "v": 1,
        "kind": "event_key",
        "tenantId": T,
        "sessionId": "s",
        "idempotencyKey": "k2",
        "event": valid[3]["event"].clone(),
    });
    key["event"]["sessionId"] = json!("other");
    lines.insert(4, key);
    expect_refused("key of another session", &lines, 5).await;

    // Missing required fields: of an event envelope, of an entry, of a session record.
    for (case, line, pointer) in [
        ("envelope without eventId", 3, "/event/eventId"),
        ("envelope without type", 3, "/event/type"),
        ("event entry without tenantId", 3, "/tenantId"),
        ("session without createdBy", 1, "/record/createdBy"),
        ("durable event without sequence", 6, "/event/sequence"),
    ] {
        let mut lines = valid.clone();
        let (parent, field) = pointer.rsplit_once('/').unwrap();
        let removed = lines[line - 1]
            .pointer_mut(if parent.is_empty() { "" } else { parent })
            .and_then(Value::as_object_mut)
            .and_then(|object| object.remove(field));
        assert!(removed.is_some(), "{case}: {pointer} exists");
        expect_refused(case, &lines, line).await;
    }

    // Durable events: a duplicate and a gap.
    let mut lines = valid.clone();
    lines.insert(7, valid[6].clone());
    expect_refused("duplicate durable event", &lines, 8).await;
    let mut lines = valid.clone();
    lines.remove(5);
    expect_refused("durable gap", &lines, 6).await;

    // Inside a batch line, the same rules hold for each entry.
    let mut lines = valid.clone();
    let mut second = valid[2].clone();
    let mut third = valid[3].clone();
    for entry in [&mut second, &mut third] {
        entry.as_object_mut().unwrap().remove("v");
    }
    third["event"]["sequence"] = json!(2);
    let batch = json!({"v": 1, "kind": "batch", "entries": [second, third]});
    lines.splice(2..4, [batch]);
    expect_refused("duplicate inside a batch", &lines, 3).await;
}
