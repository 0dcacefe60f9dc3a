//! JSONL-09: the disk fills up in the middle of a journal line. The store lives on a small tmpfs
//! (mounted by the test, so it needs root or CAP_SYS_ADMIN); appends go on until one hits ENOSPC
//! part-way through its line. That append is not acknowledged and fails with a clear error, the
//! store refuses further writes and shows only acknowledged state; a restart while the disk is
//! still full fails cleanly without touching the journal; once space is freed, the restart skips
//! and cuts off the torn line (decision S7) and every acknowledged event is there.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{T, session, text_event};
use agent_runtime_store::jsonl::{COMPACTION_TEMP_FILE, JOURNAL_FILE};
use agent_runtime_store::*;

/// A tmpfs mounted for the test's lifetime; unmounted on drop, even when the test fails.
struct Tmpfs {
    _parent: tempfile::TempDir,
    path: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("disk");
        fs::create_dir(&path).unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .expect("running mount");
        assert!(
            output.status.success(),
            "JSONL-09 mounts a small tmpfs and needs root (or CAP_SYS_ADMIN): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Self {
            _parent: parent,
            path,
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

fn ends_with_newline(path: &Path) -> bool {
    fs::read(path).unwrap().last() == Some(&b'\n')
}

#[tokio::test]
async fn jsonl_09_disk_full_mid_line_is_not_acknowledged_and_the_store_recovers_after_freeing_space()
 {
    let disk = Tmpfs::mount("256k");
    let directory = disk.path.join("store");
    // Space that can be given back later.
    let ballast = disk.path.join("ballast");
    fs::write(&ballast, vec![0_u8; 160 << 10]).unwrap();
    let options = StoreOptions {
        fsync: true,
        ..StoreOptions::default()
    };
    let store = JsonlStore::open(&directory, options.clone()).await.unwrap();
    store.put_session(&session("s")).await.unwrap();

    // Lines of ~10 KB that do not end on a page boundary: the one that does not fit is written
    // in part, then the write fails.
    let payload = "x".repeat(10_001);
    let mut acknowledged = Vec::new();
    let failure = loop {
        assert!(acknowledged.len() < 100, "the 256 KiB disk never filled up");
        let text = format!("{} {payload}", acknowledged.len() + 1);
        match store.append_event(T, text_event("s", &text), None).await {
            Ok(event) => acknowledged.push((event.sequence, text)),
            Err(error) => break error,
        }
    };
    assert!(!acknowledged.is_empty());
    match &failure {
        StoreError::Backend {
            message,
            retry_safe: false,
        } => {
            assert!(message.contains("appending to"), "{message}");
            assert!(message.contains("No space left on device"), "{message}");
        }
        other => panic!("expected a journal write failure, got {other:?}"),
    }
    let journal = directory.join(JOURNAL_FILE);
    assert!(
        !ends_with_newline(&journal),
        "the failed append left part of its line in the file"
    );

    // Consistent afterwards: writes refused, reads show only acknowledged events.
    let refused = store.put_session(&session("later")).await.unwrap_err();
    assert_eq!(
        refused.runtime_code(),
        Some(RuntimeErrorCode::JournalFailed)
    );
    let page = store.read_events(T, "s", 0, 1000).await.unwrap();
    let sequences: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    let expected: Vec<u64> = acknowledged.iter().map(|(sequence, _)| *sequence).collect();
    assert_eq!(
        sequences, expected,
        "the unacknowledged event is not readable"
    );
    assert!(!store.health_check().await.ready);
    let _ = store.close().await;
    drop(store);

    // A restart while the disk is still full: compaction cannot write its snapshot, start-up
    // fails with the reason, and the journal is left as it was.
    let before = fs::read(&journal).unwrap();
    match JsonlStore::open(&directory, options.clone()).await {
        Err(StoreError::Backend { message, .. }) => {
            assert!(message.contains("No space left on device"), "{message}")
        }
        Err(other) => panic!("expected a disk-full start-up failure, got {other:?}"),
        Ok(_) => panic!("the snapshot of a full disk cannot have been written"),
    }
    assert_eq!(fs::read(&journal).unwrap(), before);
    assert!(
        !directory.join(COMPACTION_TEMP_FILE).exists(),
        "the snapshot that did not fit was removed, giving its space back"
    );

    // Space freed: the torn line is skipped and cut off, every acknowledged event is there.
    fs::remove_file(&ballast).unwrap();
    let store = JsonlStore::open(&directory, options).await.unwrap();
    assert!(ends_with_newline(&journal), "the torn line was cut off");
    let page = store.read_events(T, "s", 0, 1000).await.unwrap();
    let stored: Vec<(u64, String)> = page
        .events
        .iter()
        .map(|e| (e.sequence, e.data["text"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(stored, acknowledged);
    let next = store
        .append_event(T, text_event("s", "after"), None)
        .await
        .unwrap();
    assert_eq!(next.sequence, acknowledged.len() as u64 + 1);
    store.close().await.unwrap();
}
