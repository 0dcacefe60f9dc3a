//! JSONL-05: journals with edge-case bytes, each with its documented result (docs/reliability.md).
//! Accepted: an empty file, a file of only `\n`, blank lines (a trailing one included) and CRLF
//! line ends (`\r` is JSON whitespace). Refused with `file:line`: a UTF-8 byte-order mark (this
//! store never writes one) and invalid UTF-8 inside a JSON string. Nothing panics, and an
//! accepted journal keeps working.

use std::fs;
use std::path::Path;

use super::open_default;
use crate::support::{T, session, text_event};
use agent_runtime_store::jsonl::JOURNAL_FILE;
use agent_runtime_store::*;

/// A real journal: one session and three events, as this store writes it.
async fn valid_journal() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let store = open_default(dir.path()).await;
    store.put_session(&session("s")).await.unwrap();
    for n in 1..=3 {
        store
            .append_event(T, text_event("s", &format!("event {n}")), None)
            .await
            .unwrap();
    }
    store.close().await.unwrap();
    fs::read(dir.path().join(JOURNAL_FILE)).unwrap()
}

async fn open_with(bytes: &[u8]) -> (tempfile::TempDir, StoreResult<JsonlStore>) {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(JOURNAL_FILE), bytes).unwrap();
    let opened = JsonlStore::open(dir.path(), StoreOptions::default()).await;
    (dir, opened)
}

async fn events_of(store: &JsonlStore) -> Vec<u64> {
    match store.read_events(T, "s", 0, 100).await {
        Ok(page) => page.events.iter().map(|e| e.sequence).collect(),
        Err(_) => Vec::new(),
    }
}

fn corrupt_at(opened: StoreResult<JsonlStore>, line: usize, dir: &Path) {
    match opened {
        Err(StoreError::Runtime {
            code: RuntimeErrorCode::CorruptJournal,
            message,
        }) => assert!(
            message.contains(&format!("{}:{line} ", dir.join(JOURNAL_FILE).display())),
            "{message}"
        ),
        Err(other) => panic!("expected a corrupt journal at line {line}, got {other:?}"),
        Ok(_) => panic!("expected a corrupt journal at line {line}"),
    }
}

#[tokio::test]
async fn jsonl_05_edge_case_files_have_documented_results() {
    let valid = valid_journal().await;
    let lines = valid.iter().filter(|b| **b == b'\n').count();

    // Accepted, empty.
    for bytes in [&b""[..], b"\n", b"\n\n\n"] {
        let (_dir, opened) = open_with(bytes).await;
        let store = opened.expect("an empty journal opens");
        assert!(events_of(&store).await.is_empty());
    }

    // Accepted, with everything in it: CRLF line ends, blank lines between and after.
    let crlf: Vec<u8> = valid
        .split_inclusive(|b| *b == b'\n')
        .flat_map(|line| {
            let body = &line[..line.len() - 1];
            [body, b"\r\n"].concat()
        })
        .collect();
    let spaced: Vec<u8> = valid
        .split_inclusive(|b| *b == b'\n')
        .flat_map(|line| [line, b"\n"].concat())
        .collect();
    for bytes in [crlf, spaced, [valid.as_slice(), b"\n"].concat()] {
        let (_dir, opened) = open_with(&bytes).await;
        let store = opened.expect("accepted");
        assert_eq!(events_of(&store).await, vec![1, 2, 3]);
        // And it keeps working.
        let next = store
            .append_event(T, text_event("s", "after"), None)
            .await
            .unwrap();
        assert_eq!(next.sequence, 4);
    }

    // Refused with the line: a byte-order mark before the first line.
    let (dir, opened) = open_with(&[b"\xEF\xBB\xBF", valid.as_slice()].concat()).await;
    corrupt_at(opened, 1, dir.path());

    // Refused with the line: invalid UTF-8 inside a JSON string of the last event.
    let text = String::from_utf8(valid.clone()).unwrap();
    let last = text.lines().count();
    assert_eq!(last, lines);
    let mut broken = valid.clone();
    let at = text.rfind("event 3").unwrap();
    broken[at] = 0xFF;
    let (dir, opened) = open_with(&broken).await;
    corrupt_at(opened, last, dir.path());
}
