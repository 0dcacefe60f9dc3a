//! A JSONL writer killed with SIGKILL in the middle of writes loses nothing it acknowledged.
//!
//! The test re-runs its own test binary as a child process, where the `writer_child` test (inert
//! unless `JSONL_CRASH_CHILD_DIR` is set) appends events forever and prints each acknowledged
//! sequence. The parent kills it mid-stream, reopens the directory and checks every
//! acknowledged event is there.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_runtime_store::*;
use support::{T, event};

const CHILD_DIR_VAR: &str = "JSONL_CRASH_CHILD_DIR";
const ACK: &str = "ACK ";

/// The child side; does nothing in a normal test run.
#[tokio::test]
async fn writer_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_VAR) else {
        return;
    };
    let store = JsonlStore::open(&dir, StoreOptions::default())
        .await
        .unwrap();
    let mut stdout = std::io::stdout().lock();
    for n in 0u64.. {
        let key = format!("key-{n}");
        // Alternate keyed single appends and unkeyed batches so both paths are cut mid-stream.
        let sequences: Vec<u64> = if n % 2 == 0 {
            vec![
                store
                    .append_event(T, event("s"), Some(&key))
                    .await
                    .unwrap()
                    .sequence,
            ]
        } else {
            let batch = vec![event("s"), event("s")];
            let stored = store.append_events(T, "s", batch, None).await.unwrap();
            stored.iter().map(|e| e.sequence).collect()
        };
        for sequence in sequences {
            writeln!(stdout, "{ACK}{sequence}").unwrap();
        }
        stdout.flush().unwrap();
    }
}

/// The acknowledged sequence on a line of the child's output. libtest may print its own
/// `test writer_child ... ` in front of the first one, so the marker is searched, not anchored.
fn parse_ack(line: &str) -> Option<u64> {
    let (_, sequence) = line.split_once(ACK)?;
    Some(sequence.trim().parse().expect("an acknowledged sequence"))
}

#[tokio::test]
async fn sigkill_mid_write_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["writer_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_VAR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acknowledged = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acknowledged.len() < 3_000 {
        assert!(
            Instant::now() < deadline,
            "the writer did not make progress"
        );
        let line = lines.next().expect("the writer exited early").unwrap();
        acknowledged.extend(parse_ack(&line));
    }
    // SIGKILL while the writer is still appending.
    child.kill().unwrap();
    // Acknowledgements already in the pipe count too.
    for line in lines {
        acknowledged.extend(parse_ack(&line.unwrap()));
    }
    child.wait().unwrap();
    let last_acknowledged = *acknowledged.last().unwrap();
    let in_order = acknowledged.iter().copied().eq(1..=last_acknowledged);
    assert!(
        in_order,
        "acknowledged sequences are 1..={last_acknowledged} in order"
    );

    // No stale lock: the kernel released it with the process.
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .expect("the directory opens after a crash");
    let range = store.event_stream_range(T, "s").await.unwrap().unwrap();
    assert_eq!(range.first_sequence, 1);
    assert!(range.head_sequence >= last_acknowledged);
    let mut expected = 1;
    let mut after = 0;
    loop {
        let page = store.read_events(T, "s", after, 1000).await.unwrap();
        for stored in &page.events {
            assert_eq!(stored.sequence, expected, "sequences are contiguous");
            expected += 1;
        }
        after = expected - 1;
        if !page.has_more {
            break;
        }
    }
    assert_eq!(after, range.head_sequence);
    // Keyed appends survived with their keys: every even round was keyed.
    let keyed = store
        .get_event_by_idempotency_key(T, "s", "key-0")
        .await
        .unwrap();
    assert_eq!(keyed.map(|e| e.sequence), Some(1));
    store.close().await.unwrap();
}
