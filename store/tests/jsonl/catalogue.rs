//! P0 entries of the reliability catalogue (docs/reliability.md: JSONL and SSE) against the
//! JSONL store: JSONL-01, JSONL-02, JSONL-06 and the restart half of SSE-01. JSONL-08 needs the
//! journal handle and lives in store/src/jsonl/tests.rs; the concurrent half of SSE-01 is the
//! conformance case `events::sse_01_concurrent_appenders_get_gapless_sequences`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::lock_is_free;
use crate::support::{T, session, text_event};
use agent_runtime::protocol::EventEnvelope;
use agent_runtime_store::jsonl::JOURNAL_FILE;
use agent_runtime_store::*;
use serde_json::{Value, json};

async fn open(dir: &Path) -> StoreResult<JsonlStore> {
    JsonlStore::open(dir, StoreOptions::default()).await
}

fn journal_bytes(dir: &Path) -> Vec<u8> {
    fs::read(dir.join(JOURNAL_FILE)).unwrap()
}

/// Every log line of this test process, captured by a global `tracing` subscriber (nextest runs
/// each test in its own process; under `cargo test` the buffer is shared, which the assertions
/// tolerate because they look for a path unique to their temporary directory).
fn captured_logs() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Capture(logs))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        logs
    })
}

struct Capture(&'static Mutex<Vec<u8>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A journal of exactly 100 committed lines: one session line, then 99 event lines (line `n` for
/// n >= 2 holds the event with sequence n - 1).
async fn write_hundred_lines(dir: &Path) {
    let store = open(dir).await.unwrap();
    store.put_session(&session("s")).await.unwrap();
    for n in 1..=99 {
        store
            .append_event(T, text_event("s", &format!("line {n}")), None)
            .await
            .unwrap();
    }
    store.close().await.unwrap();
    let lines = journal_bytes(dir).iter().filter(|b| **b == b'\n').count();
    assert_eq!(lines, 100);
}

/// Every line of the journal parses as JSON and ends with `\n`; returns how many there are.
fn valid_lines(dir: &Path) -> usize {
    let bytes = journal_bytes(dir);
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "no torn tail left"
    );
    let text = String::from_utf8(bytes).unwrap();
    for (index, line) in text.lines().enumerate() {
        let parsed: Result<Value, _> = serde_json::from_str(line);
        assert!(
            parsed.is_ok(),
            "line {} is not valid JSON: {line}",
            index + 1
        );
    }
    text.lines().count()
}

#[tokio::test]
async fn jsonl_01_truncated_last_line_is_skipped_and_removed() {
    let logs = captured_logs();
    let dir = tempfile::tempdir().unwrap();
    write_hundred_lines(dir.path()).await;
    // The 101st line, torn by a crash: no `\n`, not valid JSON.
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join(JOURNAL_FILE))
        .unwrap();
    file.write_all(br#"{"v":1,"kind":"event","tenantId":"ten"#)
        .unwrap();
    drop(file);

    let store = open(dir.path())
        .await
        .expect("start-up skips the torn tail");
    let warning = format!("{}:101", dir.path().join(JOURNAL_FILE).display());
    let logged = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let line = logged
        .lines()
        .find(|line| line.contains(&warning))
        .unwrap_or_else(|| panic!("a warning naming {warning}; logged: {logged}"));
    assert!(line.contains("WARN"), "{line}");
    // The partial bytes are gone before the next append can land behind them.
    assert_eq!(valid_lines(dir.path()), 100);
    let next = store
        .append_event(T, text_event("s", "after the crash"), None)
        .await
        .unwrap();
    assert_eq!(next.sequence, 100);
    assert_eq!(valid_lines(dir.path()), 101);
    // Dropped without close (another crash), then restarted: exactly 101 valid lines.
    drop(store);
    let reopened = open(dir.path()).await.unwrap();
    assert_eq!(valid_lines(dir.path()), 101);
    let head = reopened.latest_event_sequence(T, "s").await.unwrap();
    assert_eq!(head, Some(100));
    reopened.close().await.unwrap();
}

#[tokio::test]
async fn jsonl_02_corruption_before_the_tail_fails_with_line_number() {
    let dir = tempfile::tempdir().unwrap();
    write_hundred_lines(dir.path()).await;
    let pristine = journal_bytes(dir.path());
    let lines: Vec<&[u8]> = pristine.split_inclusive(|b| *b == b'\n').collect();
    assert_eq!(lines.len(), 100);
    let line_57 = lines[56];
    assert!(
        std::str::from_utf8(line_57)
            .unwrap()
            .contains(r#""sequence":56,"#)
    );

    let flip = |line: &[u8], at: usize, bit: u8| {
        let mut flipped = line.to_vec();
        flipped[at] ^= bit;
        flipped
    };
    let digit = line_57
        .windows(12)
        .position(|w| w == br#""sequence":5"#)
        .unwrap()
        + 12;
    // A flipped bit is detected when it breaks the JSON or the journal's semantics (here the
    // sequence: 56 -> 57 is out of order). A flip inside free text that leaves valid JSON with
    // valid semantics is not detectable: journal lines carry no checksum (reported product gap).
    let mutations: Vec<(&str, Vec<u8>)> = vec![
        ("invalid JSON", b"not json\n".to_vec()),
        ("NUL run", [vec![0u8; 64], b"\n".to_vec()].concat()),
        (
            "truncated line",
            [&line_57[..line_57.len() / 2], b"\n"].concat(),
        ),
        ("flipped bit in the structure", flip(line_57, 0, 0x01)),
        (
            "flipped bit in the sequence",
            flip(line_57, digit + 1, 0x01),
        ),
    ];
    for (what, replacement) in mutations {
        let mut corrupted = Vec::new();
        for (index, line) in lines.iter().enumerate() {
            corrupted.extend_from_slice(if index == 56 { &replacement } else { line });
        }
        fs::write(dir.path().join(JOURNAL_FILE), &corrupted).unwrap();

        let error = match open(dir.path()).await {
            Ok(_) => panic!("{what}: a corrupt line 57 must fail start-up"),
            Err(error) => error,
        };
        assert_eq!(
            error.runtime_code(),
            Some(RuntimeErrorCode::CorruptJournal),
            "{what}: {error}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&format!("{JOURNAL_FILE}:57 ")),
            "{what}: {message}"
        );
        assert_eq!(
            journal_bytes(dir.path()),
            corrupted,
            "{what}: nothing is rewritten"
        );
        assert!(
            !dir.path().join("server-store.jsonl.tmp").exists(),
            "{what}: no compaction started"
        );
        assert!(lock_is_free(dir.path()), "{what}: the lock is released");
    }
}

/// One step of the JSONL-06 workload.
async fn run_step(store: &JsonlStore, step: usize, leases: &mut BTreeMap<String, String>) {
    let command = format!("c{}", step / 4);
    match step % 7 {
        0 => store
            .put_session(&session(&format!("s{}", step % 3)))
            .await
            .unwrap(),
        1 => {
            store
                .append_event(
                    T,
                    text_event("s0", &format!("k{step}")),
                    Some(&format!("k{step}")),
                )
                .await
                .unwrap();
        }
        2 => {
            let batch = vec![text_event("s0", "a"), text_event("s0", "b")];
            store.append_events(T, "s0", batch, None).await.unwrap();
        }
        3 => match store
            .claim_command(T, &command, "fp", 30_000)
            .await
            .unwrap()
        {
            CommandClaim::Claimed { lease_id } => {
                leases.insert(command, lease_id);
            }
            other => panic!("{other:?}"),
        },
        4 => {
            let (command, lease) = leases.iter().next_back().unwrap();
            store
                .seal_command(T, command, lease, &sealing())
                .await
                .unwrap();
        }
        5 => {
            let (command, lease) = leases.iter().next_back().unwrap();
            let result = json!({"step": step});
            store
                .complete_command(T, command, lease, &result)
                .await
                .unwrap();
        }
        _ => {
            store
                .append_event(T, text_event("s1", "other session"), None)
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonl_06_crash_point_enumeration() {
    // 21 acknowledged calls (sessions, keyed and batch appends, claim/seal/complete) and a
    // restart at every byte of their journal: a few thousand opens, scaled to run in seconds.
    let source = tempfile::tempdir().unwrap();
    let store = open(source.path()).await.unwrap();
    let mut acknowledged = vec![(0u64, store.snapshot().unwrap())];
    let mut leases = BTreeMap::new();
    for step in 0..21 {
        run_step(&store, step, &mut leases).await;
        let length = journal_bytes(source.path()).len() as u64;
        acknowledged.push((length, store.snapshot().unwrap()));
    }
    store.close().await.unwrap();
    let journal = journal_bytes(source.path());
    assert_eq!(journal.len() as u64, acknowledged.last().unwrap().0);

    // Every open compacts with two fsyncs; on tmpfs (where there is one) they cost nothing, which
    // keeps a restart at every byte within seconds. The crash semantics do not depend on the disk.
    let shm = Path::new("/dev/shm");
    let crashed = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    for k in 0..=journal.len() {
        // The process stopped after byte k of its writes.
        fs::write(crashed.path().join(JOURNAL_FILE), &journal[..k]).unwrap();
        let store = open(crashed.path())
            .await
            .unwrap_or_else(|error| panic!("crash after byte {k}: start-up failed: {error}"));
        // Exactly the calls whose line (with its `\n`) was complete: a prefix of the attempted
        // ones, including every acknowledged one.
        let (_, expected) = acknowledged
            .iter()
            .rev()
            .find(|(length, _)| *length <= k as u64)
            .unwrap();
        assert_eq!(&store.snapshot().unwrap(), expected, "crash after byte {k}");
        store.close().await.unwrap();
    }
}

/// Appends from 20 concurrent writers until the store refuses (it was closed under them);
/// returns what was acknowledged.
async fn appenders_until_closed(
    store: &JsonlStore,
    progress: &Arc<AtomicUsize>,
    round: usize,
) -> Vec<EventEnvelope> {
    let writers: Vec<_> = (0..20)
        .map(|writer| {
            let store = store.clone();
            let progress = Arc::clone(progress);
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for n in 0.. {
                    let text = format!("r{round}-w{writer}-{n}");
                    let stored = if n % 2 == 0 {
                        store
                            .append_event(T, text_event("s", &text), Some(&text))
                            .await
                            .map(|e| vec![e])
                    } else {
                        let batch = vec![text_event("s", &text), text_event("s", &text)];
                        store.append_events(T, "s", batch, None).await
                    };
                    match stored {
                        Ok(events) => {
                            progress.fetch_add(events.len(), Ordering::SeqCst);
                            acknowledged.extend(events);
                        }
                        Err(StoreError::NotOpen(_)) => break,
                        Err(other) => panic!("unexpected append failure: {other}"),
                    }
                    if round == 1 && n == 5 {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                acknowledged
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.extend(writer.await.unwrap());
    }
    acknowledged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_01_sequences_continue_after_a_restart_mid_load_on_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await.unwrap();
    let progress = Arc::new(AtomicUsize::new(0));
    // Round 0: 20 writers, and the server stops under them once ~60 events are in.
    let load = {
        let store = store.clone();
        let progress = Arc::clone(&progress);
        tokio::spawn(async move { appenders_until_closed(&store, &progress, 0).await })
    };
    while progress.load(Ordering::SeqCst) < 60 {
        tokio::task::yield_now().await;
    }
    store.close().await.unwrap();
    let mut acknowledged = load.await.unwrap();
    drop(store);

    // Restart, then round 1: 20 writers x 6 calls, run to completion.
    let store = open(dir.path()).await.unwrap();
    let head_before = store.latest_event_sequence(T, "s").await.unwrap().unwrap();
    assert_eq!(
        head_before,
        acknowledged.len() as u64,
        "nothing acknowledged lost"
    );
    let after_restart = appenders_until_closed(&store, &progress, 1).await;
    assert!(
        after_restart.iter().all(|e| e.sequence > head_before),
        "no sequence is reused after the restart"
    );
    acknowledged.extend(after_restart);

    acknowledged.sort_by_key(|e| e.sequence);
    let total = acknowledged.len() as u64;
    let sequences: Vec<u64> = acknowledged.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (1..=total).collect::<Vec<_>>(),
        "gapless, each once"
    );
    let mut stored = Vec::new();
    let mut after = 0;
    loop {
        let page = store.read_events(T, "s", after, 1000).await.unwrap();
        stored.extend(page.events);
        after = stored.last().map_or(0, |e| e.sequence);
        if !page.has_more {
            break;
        }
    }
    assert_eq!(
        stored, acknowledged,
        "each sequence holds what was acknowledged"
    );
    store.close().await.unwrap();
}

/// What these receipts are sealed as acting on (it does not matter here).
fn sealing() -> agent_runtime_store::CommandTarget {
    agent_runtime_store::CommandTarget::new("session.close", None)
}
