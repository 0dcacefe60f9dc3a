//! JSONL-12: start-up compacts the journal by writing `server-store.jsonl.tmp`, fsyncing it,
//! renaming it over `server-store.jsonl` and fsyncing the directory. A crash can stop it after
//! any of those steps; each test builds the files such a crash leaves (a power cut that loses the
//! un-fsynced rename leaves the same files as a crash before it) and reopens the directory.
//!
//! Whatever the step, the reopened store holds exactly the state that was written: never the
//! old history and the snapshot together (events twice) and never neither. The temp file is
//! never read; the next compaction replaces it, so none is left after a successful start.

use std::fs;
use std::path::Path;

use super::open_default;
use crate::support::{T, event, exercise_every_port, session};
use agent_runtime_store::jsonl::{COMPACTION_TEMP_FILE, JOURNAL_FILE};
use agent_runtime_store::*;

/// What a crash can interrupt: the journal as the store appended it (`old`), the snapshot the
/// next start-up compacts it to (`new`), and the state both stand for.
struct Versions {
    old: Vec<u8>,
    new: Vec<u8>,
    state: Vec<JournalEntry>,
}

async fn versions() -> Versions {
    let dir = tempfile::tempdir().unwrap();
    let store = open_default(dir.path()).await;
    exercise_every_port(&store).await;
    let state = store.snapshot().unwrap();
    store.close().await.unwrap();
    let old = fs::read(dir.path().join(JOURNAL_FILE)).unwrap();

    // A clean restart performs the whole compaction; what it leaves is the new version.
    let store = open_default(dir.path()).await;
    store.close().await.unwrap();
    let new = fs::read(dir.path().join(JOURNAL_FILE)).unwrap();
    assert_ne!(old, new, "the history must differ from its snapshot");
    Versions { old, new, state }
}

fn count_events(entries: &[JournalEntry]) -> usize {
    entries
        .iter()
        .filter(|entry| matches!(entry, JournalEntry::Event { .. }))
        .count()
}

/// Reopens `dir` and checks it holds exactly `versions.state`, compacted to `versions.new`, with
/// no temp file left, and that it goes on taking writes.
async fn assert_reopens_with_one_version(dir: &Path, versions: &Versions, step: &str) {
    let store = JsonlStore::open(dir, StoreOptions::default())
        .await
        .unwrap_or_else(|error| panic!("{step}: the store did not open: {error}"));
    let state = store.snapshot().unwrap();
    assert_eq!(
        count_events(&state),
        count_events(&versions.state),
        "{step}: every event exactly once"
    );
    assert_eq!(state, versions.state, "{step}: the state that was written");
    assert_eq!(
        fs::read(dir.join(JOURNAL_FILE)).unwrap(),
        versions.new,
        "{step}: the journal is the compacted snapshot"
    );
    assert!(
        !dir.join(COMPACTION_TEMP_FILE).exists(),
        "{step}: the temp file was replaced and renamed"
    );
    let next = store.append_event(T, event("s"), None).await.unwrap();
    assert_eq!(next.sequence, 4, "{step}: appends continue the log");
    store.close().await.unwrap();
}

fn directory_with(journal: &[u8], temp: Option<&[u8]>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(JOURNAL_FILE), journal).unwrap();
    if let Some(temp) = temp {
        fs::write(dir.path().join(COMPACTION_TEMP_FILE), temp).unwrap();
    }
    dir
}

#[tokio::test]
async fn jsonl_12_a_crash_before_the_rename_leaves_the_old_journal_and_the_temp_file_is_never_read()
{
    let versions = versions().await;
    let new = &versions.new;
    let first_line = new.iter().position(|b| *b == b'\n').unwrap() + 1;
    let partials = [
        ("temp created, nothing written", &new[..0]),
        ("temp torn inside its first line", &new[..first_line / 2]),
        ("temp cut after its first line", &new[..first_line]),
        ("temp torn half way", &new[..new.len() / 2]),
        ("temp cut before its last byte", &new[..new.len() - 1]),
        // Written and fsynced but not renamed; also what a power cut leaves when it loses a
        // rename whose directory was not fsynced yet.
        ("temp complete, not renamed", &new[..]),
    ];
    for (step, temp) in partials {
        let dir = directory_with(&versions.old, Some(temp));
        assert_reopens_with_one_version(dir.path(), &versions, step).await;
    }
}

#[tokio::test]
async fn jsonl_12_a_crash_after_the_rename_leaves_the_new_journal() {
    let versions = versions().await;
    // Renamed, directory not fsynced yet (or fsynced: the same files).
    let dir = directory_with(&versions.new, None);
    assert_reopens_with_one_version(dir.path(), &versions, "renamed").await;
}

/// A temp file from an older crash holds a state the journal has since moved past (and one
/// session the journal never had): it must not be merged in or preferred.
#[tokio::test]
async fn jsonl_12_a_stale_temp_file_from_an_older_state_is_not_merged_in() {
    let versions = versions().await;
    let stale = tempfile::tempdir().unwrap();
    let store = open_default(stale.path()).await;
    store.put_session(&session("s")).await.unwrap();
    store.put_session(&session("only-in-temp")).await.unwrap();
    store.append_event(T, event("s"), Some("k1")).await.unwrap();
    store.close().await.unwrap();
    let stale_snapshot = fs::read(stale.path().join(JOURNAL_FILE)).unwrap();

    let dir = directory_with(&versions.old, Some(&stale_snapshot));
    assert_reopens_with_one_version(dir.path(), &versions, "stale temp").await;
    let store = open_default(dir.path()).await;
    assert_eq!(store.get_session(T, "only-in-temp").await.unwrap(), None);
    store.close().await.unwrap();
}
