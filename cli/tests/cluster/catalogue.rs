//! P0 lease entries of the reliability catalogue (docs/reliability.md, the LEASE entries: LEASE-01,
//! LEASE-02, LEASE-13) on the cluster as real processes: PostgreSQL, two executors and two
//! gateways as child processes of this test (`crate::support::cluster`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::cluster::{
    Cluster, create_session, lease_ttl, route, route_after, signal, submit,
};
use crate::support::{Served, assert_lost, contiguous, events_until, stream_type};
use serde_json::{Value, json};

/// Sends a command with the given id; returns the HTTP status and the body.
async fn command_with_id(served: &Served, id: &str, kind: &str, data: Value) -> (u16, Value) {
    crate::support::post_command(served, id, kind, data, &[]).await
}

async fn command(served: &Served, kind: &str, data: Value) -> Value {
    crate::support::command(served, kind, data).await
}

fn ends(request_id: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e: &Value| stream_type(e) == Some("result") && e["requestId"] == request_id
}

/// Runs one more input on gateway `served` and returns the whole stream up to its result, which
/// must be a success.
async fn next_input_succeeds(served: &Served, session: &str) -> Vec<Value> {
    let next = submit(served, session, "after the fault").await;
    let all = events_until(served, session, ends(&next)).await;
    assert!(contiguous(&all), "no event lost or duplicated");
    assert_eq!(all.last().unwrap()["data"]["subtype"], "success");
    all
}

/// LEASE-01. The owner is SIGKILLed during a multi-step turn (`demo:slow`, 40 deltas). The lease
/// expires, the other executor takes the session with a higher fencing token, and the started
/// request is not re-run: docs/agent.md §5 (a request that had started when its executor died is
/// never replayed: it ends with an error event, `EXECUTOR_LOST`), which is
/// stricter than the catalogue (it may retry side-effect-free steps; we retry nothing). The demo
/// provider runs no side-effecting tool here; LEASE-13 below covers a tool that must not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_01_executor_killed_mid_turn() {
    let mut cluster = Cluster::start().await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = create_session(&a).await;
    let request = submit(&a, &session, "demo:slow").await;
    events_until(&b, &session, |e| stream_type(e) == Some("content")).await;
    let (owner, token_before) = route(&a, &session).await;

    let killed = Instant::now();
    cluster.executor(&owner).kill().unwrap();
    let (new_owner, token_after) = route_after(&a, &session, &owner).await;
    let failover = killed.elapsed();
    // The session continues on the other executor within about the lease TTL. The dead owner
    // renewed its lease at the latest when it died, so the lease ends by kill + TTL; the survivor
    // looks for orphans every TTL/4 and its claim sweeps expired leases first, so it owns the
    // session by kill + 1.25 TTL. The 5 s on top absorb a loaded 2-core machine, the 100 ms
    // polling and the session.read round trips; a failover that waited for anything slower (the
    // gateways' 30 s recovery sweep, the 15 s failover window of commands) fails.
    let bound = lease_ttl() + lease_ttl() / 4 + Duration::from_secs(5);
    assert!(
        failover < bound,
        "the session moved {failover:?} after the kill; the bound is {bound:?}"
    );
    assert!(
        token_after > token_before,
        "the new holder's fencing token {token_after} is above {token_before}"
    );
    let interrupted = events_until(&b, &session, ends(&request)).await;
    assert!(contiguous(&interrupted));
    assert_lost(&interrupted, &request);
    assert_eq!(interrupted.last().unwrap()["data"]["subtype"], "error");
    let deltas = interrupted
        .iter()
        .filter(|e| stream_type(e) == Some("content"))
        .count();
    assert!(deltas < 40, "the turn was cut short, not finished");

    // Nothing of the interrupted request comes after its end: it was not re-run by the new owner.
    let all = next_input_succeeds(&b, &session).await;
    let end = interrupted.last().unwrap()["sequence"].as_u64().unwrap();
    let rerun: Vec<_> = all
        .iter()
        .filter(|e| e["sequence"].as_u64().unwrap() > end && e["requestId"] == request.as_str())
        .collect();
    assert!(
        rerun.is_empty(),
        "the interrupted request ran again: {rerun:?}"
    );
    assert_eq!(route(&a, &session).await.0, new_owner);
}

/// LEASE-02. The owner is SIGSTOPped past its lease TTL; the other executor takes the session
/// (higher fencing token) and appends events; then the old owner is SIGCONTed and tries to go on.
/// The store rejects its fenced writes in the write transaction (proved per backend by the
/// conformance cases `leases::stale_fence_after_a_successor_is_lost` and
/// `routes::stale_owner_is_fenced_out_after_a_successor`); here the log must hold no event of the
/// zombie after the successor's epoch began. The demo provider runs no sandboxed tool, so "E1
/// kills its bwrap children" is not exercised here (reported).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_02_zombie_executor_is_fenced() {
    let mut cluster = Cluster::start().await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = create_session(&a).await;
    let request = submit(&a, &session, "demo:slow").await;
    events_until(&a, &session, |e| stream_type(e) == Some("content")).await;
    let (owner, token_before) = route(&a, &session).await;

    signal(cluster.executor(&owner), "-STOP");
    let ended = events_until(&b, &session, ends(&request)).await;
    let lost_at = ended.last().unwrap()["sequence"].as_u64().unwrap();
    let (_, token_after) = route_after(&a, &session, &owner).await;
    assert!(token_after > token_before);
    // The successor appends while the zombie is still frozen.
    next_input_succeeds(&b, &session).await;

    signal(cluster.executor(&owner), "-CONT");
    // Its writes (deltas, renewals) are refused, and it lets the session go.
    cluster.wait_until_fenced_off(&owner).await;
    let all = next_input_succeeds(&a, &session).await;
    let stale: Vec<_> = all
        .iter()
        .filter(|e| e["sequence"].as_u64().unwrap() > lost_at && e["requestId"] == request.as_str())
        .collect();
    assert!(
        stale.is_empty(),
        "the fenced-off executor wrote after losing the session: {stale:?}"
    );
    let (holder, token_now) = route(&a, &session).await;
    assert_ne!(holder, owner, "the zombie did not take the session back");
    assert!(token_now >= token_after);
    assert!(
        cluster.executor(&owner).try_wait().unwrap().is_none(),
        "the woken executor keeps running (it lost one session, not its process)"
    );
}

/// LEASE-13. A tool call waits for approval; its executor is killed; the approval is sent while
/// the session has no live owner.
///
/// Deliberate deviation from the catalogue ("the approval applies to the same call under the new
/// lease and executes once"): approvals live in the owning executor's memory (docs/protocol.md §9)
/// and docs/agent.md §5 says a request that had started when its executor died is never
/// replayed: it ends with an error event (`EXECUTOR_LOST`). So we test our documented
/// behaviour: the pending approval ends cleanly with the request (terminal `error` EXECUTOR_LOST
/// and a `result`), the late approval is refused with PERMISSION_NOT_FOUND (docs/protocol.md §2.1:
/// "not pending … cancelled"), the same command replayed gets the same answer, the tool never
/// runs (neither unapproved nor twice), and the session goes on on the other executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_13_approval_after_executor_crash_never_runs_the_tool() {
    let mut cluster = Cluster::start().await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = create_session(&a).await;
    let request = submit(&a, &session, "demo:approval").await;
    let requested = events_until(&b, &session, |e| e["type"] == "permission.requested").await;
    let asked = requested.last().unwrap();
    assert_eq!(asked["data"]["toolName"], "demo_approval");
    let permission = asked["data"]["permissionRequestId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (owner, _) = route(&a, &session).await;

    cluster.executor(&owner).kill().unwrap();
    // Approve at once, while the dead executor still holds the lease. Until the session has a
    // live owner again the answer may be a retryable error; it must never be success.
    let resolve = json!({
        "sessionId": session, "permissionRequestId": permission, "approved": true, "scope": "once"
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let (command_id, status, answer) = loop {
        let id = agent_runtime::ids::nanoid();
        let (status, answer) =
            command_with_id(&b, &id, "permission.resolve", resolve.clone()).await;
        assert_ne!(answer["ok"], true, "a lost approval was accepted: {answer}");
        if answer["error"]["retryable"] != true {
            break (id, status, answer);
        }
        assert!(
            Instant::now() < deadline,
            "still retryable after the deadline: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["code"], "PERMISSION_NOT_FOUND");
    // Approving twice (the same command again) is idempotent: the same answer.
    let (again_status, again) =
        command_with_id(&a, &command_id, "permission.resolve", resolve.clone()).await;
    assert_eq!((again_status, &again), (status, &answer));

    let ended = events_until(&a, &session, ends(&request)).await;
    assert!(contiguous(&ended));
    assert_lost(&ended, &request);
    assert_eq!(ended.last().unwrap()["data"]["subtype"], "error");

    let all = next_input_succeeds(&b, &session).await;
    let ran: Vec<_> = all
        .iter()
        .filter(|e| {
            (stream_type(e) == Some("tool_result") && e["data"]["isError"] == false)
                || (stream_type(e) == Some("content") && e["data"]["delta"] == "approved")
        })
        .collect();
    assert!(ran.is_empty(), "the unapproved tool ran: {ran:?}");
    assert_eq!(
        all.iter()
            .filter(|e| e["type"] == "permission.requested")
            .count(),
        1,
        "the approval was not asked again behind the user's back"
    );
    // The new owner has no pending approval for the old id either.
    let (status, late) = command_with_id(
        &a,
        &agent_runtime::ids::nanoid(),
        "permission.resolve",
        resolve,
    )
    .await;
    assert_eq!(status, 404, "{late}");
}

/// JSONL-02, the process half (the store half is store/tests/jsonl/catalogue.rs): `serve` on a data
/// directory whose journal is corrupt at line 57 of 100 refuses to start, exits non-zero naming
/// `server-store.jsonl:57`, and rewrites nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonl_02_serve_exits_non_zero_on_a_corrupt_journal() {
    use agent_runtime_store::{EventLog, JsonlStore, NewEvent, StoreLifecycle, StoreOptions};

    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::open(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    for n in 1..=100 {
        let event = NewEvent {
            session_id: "s".into(),
            request_id: None,
            occurred_at: String::new(),
            event_type: agent_runtime::protocol::EventType::SessionStream,
            data: serde_json::from_value(json!({ "type": "content", "text": format!("{n}") }))
                .unwrap(),
        };
        store.append_event("t", event, None).await.unwrap();
    }
    store.close().await.unwrap();
    let journal = dir.path().join(agent_runtime_store::jsonl::JOURNAL_FILE);
    let text = std::fs::read_to_string(&journal).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 100);
    lines[56] = "not json";
    let corrupted = format!("{}\n", lines.join("\n"));
    std::fs::write(&journal, &corrupted).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "jsonl",
            "--data-dir",
        ])
        .arg(dir.path())
        .env("AGENT_RUNTIME_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let status = crate::support::wait_for_exit(&mut child);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "start-up must fail: {stderr}");
    assert!(
        stderr.contains("server-store.jsonl:57"),
        "the error names the file and line: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap(),
        corrupted,
        "nothing is rewritten"
    );
}

/// A fake OpenAI-compatible model: a user message containing `run: <command>` with no tool
/// result after it gets one Bash tool call running `<command>`; anything else gets a short text.
async fn fake_model() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|body: axum::body::Bytes| async move {
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let messages = body["messages"].as_array().cloned().unwrap_or_default();
            let last = messages.last().cloned().unwrap_or(Value::Null);
            let command = (last["role"] == "user")
                .then(|| last["content"].to_string())
                .and_then(|text| {
                    let (_, rest) = text.split_once("run: ")?;
                    Some(rest.trim_end_matches('"').replace("\\\"", "\""))
                });
            let chunk = |delta: Value, finish: Value| {
                let chunk = json!({"id": "c1", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                format!("data: {chunk}\n\n")
            };
            let mut stream = match command {
                Some(command) => {
                    let arguments = json!({ "command": command }).to_string();
                    let call = json!({"role": "assistant", "tool_calls": [{"index": 0,
                        "id": "call-1", "type": "function",
                        "function": {"name": "Bash", "arguments": arguments}}]});
                    chunk(call, Value::Null) + &chunk(json!({}), json!("tool_calls"))
                }
                None => {
                    chunk(json!({"role": "assistant", "content": "done"}), Value::Null)
                        + &chunk(json!({}), json!("stop"))
                }
            };
            stream.push_str("data: [DONE]\n\n");
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(axum::body::Body::from(stream))
                .unwrap()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/v1")
}

/// An executor configuration with the fake model and the built-in tools (no human approval:
/// `yolo`), rooted in `dir`.
async fn tool_config(dir: &std::path::Path) -> std::path::PathBuf {
    let model = fake_model().await;
    let key = dir.join("key");
    std::fs::write(&key, "sk-fake\n").unwrap();
    let config = dir.join("executor.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\nkind = \"openai\"\nmodel = \"fake\"\nbase_url = \"{model}\"\napi_key_file = \"{key}\"\nmax_retries = 0\n\n[tools]\nbuiltin_tools = true\nroots = [\"{root}\"]\nmode = \"yolo\"\n",
            key = key.display(),
            root = dir.display(),
        ),
    )
    .unwrap();
    config
}

/// Lines in `file` (0 when it does not exist).
fn lines_in(file: &std::path::Path) -> usize {
    std::fs::read_to_string(file).map_or(0, |text| text.lines().count())
}

/// Processes whose command line contains `needle` (a marker unique to one test).
fn processes_running(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // A zombie (`Z`) process has exited and only waits to be reaped.
        let exited = state
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if !exited && String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// LEASE-01 with a side-effecting tool: after one completed turn, the model runs Bash (append a
/// line to a counter, then sleep); the owner is SIGKILLed while the command runs. The tool call
/// started but never finished: the request ends with EXECUTOR_LOST, the tool_use has no
/// successful result, and the new owner never runs the command again (the counter keeps exactly
/// one line, also after the next input). Catalogue: "never re-run automatically if they have
/// side effects" (docs/agent.md §5: never replayed).
///
/// On the moved session, `session.read` returns the intact transcript (the earlier turn
/// and the interrupted input), no pending input, and a `lastEventSequence` after which a client
/// replays exactly the rest of the log, the interrupted request's end included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_01_a_started_bash_call_is_never_re_run_after_the_kill() {
    let dir = tempfile::tempdir().unwrap();
    let config = tool_config(dir.path()).await;
    let mut cluster = Cluster::start_with(Some(&config)).await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = create_session(&a).await;
    let first = submit(&a, &session, "hello before the tool").await;
    let done = events_until(&b, &session, ends(&first)).await;
    assert_eq!(done.last().unwrap()["data"]["subtype"], "success");
    let counter = dir.path().join("counter");
    let input = format!("run: echo x >> {} && exec sleep 20", counter.display());
    let request = submit(&a, &session, &input).await;
    let started = events_until(&b, &session, |e| stream_type(e) == Some("tool_use")).await;
    assert_eq!(started.last().unwrap()["data"]["name"], "Bash");
    let deadline = Instant::now() + Duration::from_secs(20);
    while lines_in(&counter) == 0 {
        assert!(Instant::now() < deadline, "the command never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (owner, token_before) = route(&a, &session).await;

    cluster.executor(&owner).kill().unwrap();
    let ended = events_until(&b, &session, ends(&request)).await;
    let (_, token_after) = route_after(&a, &session, &owner).await;
    assert!(token_after > token_before);
    let lost = assert_lost(&ended, &request);
    let succeeded: Vec<_> = ended
        .iter()
        .filter(|e| stream_type(e) == Some("tool_result") && e["data"]["isError"] == false)
        .collect();
    assert!(succeeded.is_empty(), "{succeeded:?}");
    let logged_use = ended
        .iter()
        .find(|e| stream_type(e) == Some("tool_use") && e["requestId"] == request.as_str())
        .expect("the log keeps the started tool call");
    assert!(logged_use["sequence"].as_u64() < lost["sequence"].as_u64());

    let log = cluster.stored_events(&session).await;
    let read = command(&a, "session.read", json!({ "sessionId": session })).await;
    assert_eq!(
        read["loaded"], true,
        "the new owner has the session loaded: {read}"
    );
    // The earlier turn and the interrupted input. The tool call that never got a result is not
    // shown: the transcript's read view never holds a dangling tool call (docs/storage.md §8), so
    // the conversation the next request sends the model stays valid.
    let messages = read["messages"].as_array().unwrap();
    let transcript: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        transcript,
        [
            ("user", "hello before the tool"),
            ("assistant", "done"),
            ("user", input.as_str()),
        ],
        "{messages:#?}"
    );
    assert!(
        messages.iter().all(|m| m.get("tool_calls").is_none()),
        "{messages:#?}"
    );
    assert_eq!(read["pendingInputs"], json!([]));
    assert_eq!(read["recovery"]["pendingInputCount"], 0);
    assert_eq!(
        log.last().unwrap(),
        ended.last().unwrap(),
        "the log ends the request"
    );
    // The cursor is the last event of the newest request the transcript fully covers: the
    // completed first turn (docs/protocol.md §7.3 step 1; only `request_completed` moves coverage,
    // docs/storage.md §8). Resuming after it, a client replays exactly the rest of the log, so it
    // learns how the interrupted request ended, which the snapshot does not say.
    let cursor = read["recovery"]["lastEventSequence"]
        .as_u64()
        .expect("a cursor");
    assert_eq!(
        Some(cursor),
        done.last().unwrap()["sequence"].as_u64(),
        "{read}"
    );
    let resumed = crate::support::events_after(&a, &session, cursor, ends(&request)).await;
    assert_eq!(resumed, log[cursor as usize..]);

    next_input_succeeds(&b, &session).await;
    assert_eq!(lines_in(&counter), 1, "the Bash command ran exactly once");
}

/// LEASE-02 with a running tool: the owner runs Bash (`sleep 60`) and is SIGSTOPped past its
/// TTL; the session moves; after SIGCONT the zombie learns it lost the lease and kills the
/// command (its child process disappears), and none of its writes lands. Without bubblewrap
/// (sandboxed Bash adds `--die-with-parent`): the executor's child is the command itself
/// (`exec`), so killing that child ends the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_02_a_zombie_kills_its_running_tool() {
    let dir = tempfile::tempdir().unwrap();
    let config = tool_config(dir.path()).await;
    let mut cluster = Cluster::start_with(Some(&config)).await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = create_session(&a).await;
    // `exec -a` names the sleeping process after a marker only this test uses.
    let marker = format!(
        "lease02-{}",
        agent_runtime::ids::nanoid().replace(['-', '_'], "x")
    );
    let input = format!("run: exec -a {marker} sleep 60");
    let request = submit(&a, &session, &input).await;
    events_until(&a, &session, |e| stream_type(e) == Some("tool_use")).await;
    let (owner, _) = route(&a, &session).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_running(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    signal(cluster.executor(&owner), "-STOP");
    let ended = events_until(&b, &session, ends(&request)).await;
    let lost_at = ended.last().unwrap()["sequence"].as_u64().unwrap();
    route_after(&a, &session, &owner).await;
    signal(cluster.executor(&owner), "-CONT");

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = processes_running(&marker);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the zombie's tool process {left:?} still runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = next_input_succeeds(&a, &session).await;
    let stale: Vec<_> = all
        .iter()
        .filter(|e| e["sequence"].as_u64().unwrap() > lost_at && e["requestId"] == request.as_str())
        .collect();
    assert!(
        stale.is_empty(),
        "the zombie wrote after losing the session: {stale:?}"
    );
}

/// LEASE-15 (issue 38 item 7): the host of the executor that owns a session stops answering
/// without resetting its connections (SIGSTOP: the kernel still acknowledges TCP, the process
/// answers nothing, as when a machine, its network or a container dies). An `input.submit` sent
/// after that must get a definite answer within seconds: the gateway's HTTP/2 pings find the
/// dead connection, the session's lease runs out (so the frozen executor can store nothing), the
/// input's effect is not stored, and the same execution runs on the other executor. Before, the
/// call waited out its 60 s timeout and the command stayed `COMMAND_IN_PROGRESS` until the
/// 10-minute abandonment, for an input that provably never ran. The input runs exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_15_a_frozen_executor_host_strands_no_command() {
    let mut cluster = Cluster::start().await;
    let a = cluster.served(0);
    let session = create_session(&a).await;
    let first = submit(&a, &session, "before the freeze").await;
    events_until(&a, &session, ends(&first)).await;
    let (owner, token_before) = route(&a, &session).await;
    signal(cluster.executor(&owner), "-STOP");

    let frozen = Instant::now();
    let data = json!({ "sessionId": session, "input": "sent to a frozen host" });
    let answered = loop {
        let (status, body) =
            command_with_id(&a, "stranded-submit", "input.submit", data.clone()).await;
        if status == 200 {
            break body;
        }
        assert!(
            body["error"]["retryable"] == true,
            "a stranded command answers retryably until it is decided: {status} {body}"
        );
        assert!(
            frozen.elapsed() < Duration::from_secs(120),
            "no definite answer two minutes after the freeze: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let decided = frozen.elapsed();
    eprintln!("LEASE-15: the stranded input.submit was decided {decided:?} after the freeze");
    // Well under the 60 s call timeout the command used to wait out (and the 10-minute
    // abandonment it then stayed sealed for): pings (5 s), the lease TTL and one call.
    assert!(
        decided < Duration::from_secs(45),
        "decided after {decided:?}"
    );
    let request = answered["data"]["requestId"].as_str().unwrap().to_owned();
    let (new_owner, token_after) = route(&a, &session).await;
    assert_ne!(new_owner, owner);
    assert!(token_after > token_before);
    events_until(&a, &session, ends(&request)).await;
    // Exactly once: one user message for it, and a retry replays.
    let read = command(&a, "session.read", json!({ "sessionId": session })).await;
    let sent = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user" && m["content"] == "sent to a frozen host")
        .count();
    assert_eq!(sent, 1, "{read}");
    let (status, replay) = command_with_id(&a, "stranded-submit", "input.submit", data).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["data"]["requestId"], request.as_str());
    signal(cluster.executor(&owner), "-CONT");
}
