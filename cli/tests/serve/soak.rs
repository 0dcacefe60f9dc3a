//! RES-14: one tenant drives `serve` (JSONL, every default quota and bound) for 60 s the way the
//! outside attack of issue 38 did: sessions with 512 KB of metadata created and closed back to
//! back, and sessions whose queues are flooded with 512 KB inputs behind a request that waits
//! for an approval. The bounds must hold: no session holds more than its pending-input cap; the
//! store retains, after the closed-session sweep, at most the tenant's closed-session budget plus
//! what its open sessions hold; the server writes a bounded multiple of the bytes it accepted
//! (no rewrite of a growing queue), and its memory a bounded multiple of what the store retains.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Served, post_command, serve};

const LOAD: Duration = Duration::from_secs(60);
const PAYLOAD_BYTES: usize = 512 * 1024;
/// The defaults this test holds the server to (docs/configuration.md).
const CLOSED_BUDGET: u64 = 256 << 20;
const PENDING_INPUTS: usize = 32;
const PENDING_BYTES: u64 = 8 << 20;
/// Stated multiples: bytes written per accepted byte (a create journals its record and its
/// receipt, both carrying the metadata, a close both again: 4; compaction rewrites at most what
/// became dead: 4 more), and resident memory per retained byte over a fixed base (the JSONL
/// store holds what it retains as JSON text; see docs/security.md, Known limits).
const WRITES_PER_ACCEPTED_BYTE: u64 = 8;
const RESIDENT_PER_RETAINED_BYTE: u64 = 3;
const RESIDENT_BASE: u64 = 160 << 20;

fn proc_value(pid: u32, file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap();
    let line = text
        .lines()
        .find(|line| line.starts_with(key))
        .unwrap_or_else(|| panic!("{key} in /proc/{pid}/{file}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn resident(pid: u32) -> u64 {
    proc_value(pid, "status", "VmRSS:") * 1024
}

fn written(pid: u32) -> u64 {
    proc_value(pid, "io", "write_bytes:")
}

/// Text no store compresses much.
fn payload(seed: u64) -> String {
    agent_runtime_store::testing::rng::SeededRng::new(seed).letters(PAYLOAD_BYTES)
}

/// Sends a command; counts its body when it was accepted.
async fn send(served: &Served, accepted: &AtomicU64, kind: &str, data: Value) -> (u16, Value) {
    let size = data.to_string().len() as u64;
    let id = agent_runtime::ids::nanoid();
    let (status, body) = post_command(served, &id, kind, data, &[]).await;
    if status == 200 {
        accepted.fetch_add(size, Ordering::Relaxed);
    }
    (status, body)
}

/// `session.read`, retried while the tenant's admission refuses it: the load may have spent the
/// minute's command budget just before.
async fn read_admitted(served: &Served, session: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let data = json!({ "sessionId": session });
        let (status, read) = send(served, &AtomicU64::new(0), "session.read", data).await;
        if status == 200 {
            return read;
        }
        let retryable = read["error"]["retryable"] == true;
        assert!(retryable && Instant::now() < deadline, "{status}: {read}");
        let wait = read["error"]["retryAfterMs"].as_u64().unwrap_or(1000);
        tokio::time::sleep(Duration::from_millis(wait.min(5000))).await;
    }
}

async fn churn_sessions(served: Arc<Served>, accepted: Arc<AtomicU64>, until: Instant, seed: u64) {
    let mut n = seed;
    while Instant::now() < until {
        n += 1;
        let metadata = json!({ "blob": payload(n) });
        let (status, body) = send(
            &served,
            &accepted,
            "session.create",
            json!({ "metadata": metadata }),
        )
        .await;
        if status != 200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let session = body["data"]["session"]["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        send(
            &served,
            &accepted,
            "session.close",
            json!({ "sessionId": session }),
        )
        .await;
    }
}

async fn flood_queue(
    served: Arc<Served>,
    accepted: Arc<AtomicU64>,
    until: Instant,
    seed: u64,
) -> String {
    let (_, created) = send(&served, &accepted, "session.create", json!({})).await;
    let session = created["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let waiting = json!({ "sessionId": session, "input": "demo:approval" });
    send(&served, &accepted, "input.submit", waiting).await;
    let mut n = seed;
    while Instant::now() < until {
        n += 1;
        let input = json!({ "sessionId": session, "input": payload(n), "priority": "later" });
        let (status, body) = send(&served, &accepted, "input.submit", input).await;
        if status != 200 {
            assert_eq!(status, 429, "{body}");
            assert_eq!(body["error"]["code"], "RATE_LIMITED", "{body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    session
}

fn stop(served: &mut Served) {
    let child = served.child.as_mut().unwrap();
    crate::support::cluster::signal(child, "-TERM");
    assert!(child.wait().unwrap().success());
}

/// The journal a restart compacts to: what the store retains.
fn retained_after_restart(data_dir: &Path) -> u64 {
    let mut restarted = serve(data_dir);
    let bytes = std::fs::metadata(data_dir.join("server-store.jsonl"))
        .unwrap()
        .len();
    stop(&mut restarted);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn res_14_one_tenant_at_the_default_quotas_stays_within_the_stated_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(dir.path());
    let pid = served.child.as_ref().unwrap().id();
    let written_before = written(pid);
    let accepted = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + LOAD;
    let shared = Arc::new(Served::remote(&served.base, &served.token));
    let mut tasks = Vec::new();
    for seed in [1_000, 2_000] {
        tasks.push(tokio::spawn(churn_sessions(
            Arc::clone(&shared),
            Arc::clone(&accepted),
            until,
            seed,
        )));
    }
    let floods: Vec<_> = [3_000, 4_000]
        .into_iter()
        .map(|seed| {
            tokio::spawn(flood_queue(
                Arc::clone(&shared),
                Arc::clone(&accepted),
                until,
                seed,
            ))
        })
        .collect();
    let mut peak = 0;
    while Instant::now() < until {
        peak = peak.max(resident(pid));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut flooded = Vec::new();
    for flood in floods {
        flooded.push(flood.await.unwrap());
    }
    for session in &flooded {
        let read = read_admitted(&shared, session).await;
        let pending = read["data"]["pendingInputs"].as_array().unwrap();
        assert!(pending.len() <= PENDING_INPUTS, "{} pending", pending.len());
        let bytes: u64 = pending
            .iter()
            .map(|p| p["content"].as_str().map_or(0, str::len) as u64)
            .sum();
        assert!(bytes <= PENDING_BYTES, "{bytes} pending bytes");
    }
    // The closed-session sweep runs every 30 s: wait for the one after the load.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let resident_after = resident(pid);
    let written_total = written(pid) - written_before;
    stop(&mut served);
    let retained = retained_after_restart(dir.path());
    let accepted = accepted.load(Ordering::Relaxed);
    eprintln!(
        "RES-14: accepted {accepted} bytes, wrote {written_total} ({:.2} per accepted byte), \
         retains {retained}, resident {resident_after} after the sweep ({:.2} per retained byte \
         over the base), peak {peak}",
        written_total as f64 / accepted.max(1) as f64,
        resident_after.saturating_sub(RESIDENT_BASE) as f64 / retained.max(1) as f64,
    );
    assert!(
        accepted > 64 << 20,
        "the load reached the store: {accepted} bytes"
    );
    let open_sessions = 2 * PENDING_BYTES + (16 << 20);
    assert!(
        retained <= CLOSED_BUDGET + open_sessions,
        "retains {retained} bytes: over the closed-session budget"
    );
    assert!(
        written_total <= WRITES_PER_ACCEPTED_BYTE * accepted,
        "wrote {written_total} bytes for {accepted} accepted"
    );
    assert!(
        resident_after <= RESIDENT_BASE + RESIDENT_PER_RETAINED_BYTE * retained,
        "resident {resident_after} bytes for {retained} retained"
    );
}
