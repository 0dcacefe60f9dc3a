//! A JSONL writer killed with SIGKILL in the middle of writes loses nothing it acknowledged, and
//! another process reads back exactly what it acknowledged: sessions, events (sequences and ids),
//! idempotency keys and command receipts.
//!
//! The test re-runs its own test binary as a child process, where the `writer_child` test (inert
//! unless `JSONL_CRASH_CHILD_DIR` is set) writes forever and prints each acknowledged write. The
//! parent kills it mid-stream, reopens the directory and checks every acknowledged write is there.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{T, event, lease_of, session};
use agent_runtime_store::*;
use serde_json::json;

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
        if n % 2 == 0 {
            let stored = store.append_event(T, event("s"), Some(&key)).await.unwrap();
            writeln!(
                stdout,
                "{ACK}event {} {} {key}",
                stored.sequence, stored.event_id
            )
            .unwrap();
        } else {
            let batch = vec![event("s"), event("s")];
            for stored in store.append_events(T, "s", batch, None).await.unwrap() {
                writeln!(stdout, "{ACK}event {} {}", stored.sequence, stored.event_id).unwrap();
            }
        }
        // A whole command receipt (claim, seal, complete) and now and then a session record.
        let command = format!("command-{n}");
        let lease = lease_of(&store, &command, 60_000).await;
        store
            .seal_command(T, &command, &lease, &sealing())
            .await
            .unwrap();
        store
            .complete_command(T, &command, &lease, &json!({ "n": n }))
            .await
            .unwrap();
        writeln!(stdout, "{ACK}receipt {command} {n}").unwrap();
        if n % 5 == 0 {
            let id = format!("session-{n}");
            store.put_session(&session(&id)).await.unwrap();
            writeln!(stdout, "{ACK}session {id}").unwrap();
        }
        stdout.flush().unwrap();
    }
}

/// Everything the child acknowledged.
#[derive(Default)]
struct Acknowledged {
    /// (sequence, event id), in acknowledgement order.
    events: Vec<(u64, String)>,
    keys: HashMap<String, u64>,
    receipts: Vec<(String, u64)>,
    sessions: Vec<String>,
}

impl Acknowledged {
    /// Takes one line of the child's output. libtest may print its own `test writer_child ... `
    /// in front of the first one, so the marker is searched, not anchored.
    fn take(&mut self, line: &str) {
        let Some((_, ack)) = line.split_once(ACK) else {
            return;
        };
        let fields: Vec<&str> = ack.split_whitespace().collect();
        match fields.as_slice() {
            ["event", sequence, event_id, rest @ ..] => {
                let sequence: u64 = sequence.parse().unwrap();
                self.events.push((sequence, (*event_id).to_owned()));
                if let [key] = rest {
                    self.keys.insert((*key).to_owned(), sequence);
                }
            }
            ["receipt", command, n] => {
                self.receipts
                    .push(((*command).to_owned(), n.parse().unwrap()));
            }
            ["session", id] => self.sessions.push((*id).to_owned()),
            other => panic!("unexpected acknowledgement {other:?}"),
        }
    }
}

#[tokio::test]
async fn sigkill_mid_write_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "jsonl::crash::writer_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_VAR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acknowledged = Acknowledged::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acknowledged.events.len() < 3_000 {
        assert!(
            Instant::now() < deadline,
            "the writer did not make progress"
        );
        let line = lines.next().expect("the writer exited early").unwrap();
        acknowledged.take(&line);
    }
    // SIGKILL while the writer is still writing.
    child.kill().unwrap();
    // Acknowledgements already in the pipe count too.
    for line in lines {
        acknowledged.take(&line.unwrap());
    }
    child.wait().unwrap();
    let last_acknowledged = acknowledged.events.last().unwrap().0;
    let in_order = acknowledged
        .events
        .iter()
        .map(|(sequence, _)| *sequence)
        .eq(1..=last_acknowledged);
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
    let mut stored_ids = Vec::new();
    let mut after = 0;
    loop {
        let page = store.read_events(T, "s", after, 1000).await.unwrap();
        for stored in &page.events {
            assert_eq!(stored.sequence, after + 1, "sequences are contiguous");
            after = stored.sequence;
            stored_ids.push(stored.event_id.clone());
        }
        if !page.has_more {
            break;
        }
    }
    assert_eq!(after, range.head_sequence);
    for (sequence, event_id) in &acknowledged.events {
        assert_eq!(
            &stored_ids[*sequence as usize - 1],
            event_id,
            "event {sequence} kept its id"
        );
    }
    for (key, sequence) in &acknowledged.keys {
        let keyed = store
            .get_event_by_idempotency_key(T, "s", key)
            .await
            .unwrap();
        assert_eq!(keyed.map(|e| e.sequence), Some(*sequence), "{key}");
    }
    for (command, n) in &acknowledged.receipts {
        let replay = store.claim_command(T, command, "fp", 60_000).await.unwrap();
        assert_eq!(
            replay,
            CommandClaim::Completed {
                result: json!({ "n": n })
            },
            "{command}"
        );
    }
    assert!(!acknowledged.sessions.is_empty());
    for id in &acknowledged.sessions {
        let record = store.get_session(T, id).await.unwrap();
        assert_eq!(record, Some(session(id)), "{id}");
    }
    store.close().await.unwrap();
}

/// What these receipts are sealed as acting on (it does not matter here).
fn sealing() -> agent_runtime_store::CommandTarget {
    agent_runtime_store::CommandTarget::new("session.close", None)
}
