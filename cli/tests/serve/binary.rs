//! The real `agent-runtime serve` binary: what it prints, how it stops, and what survives a
//! SIGKILL in the middle of a request.

use std::process::Command;

use crate::support::cluster::{create_session, submit};
use crate::support::*;
use serde_json::{Value, json};

#[tokio::test]
async fn serve_prints_its_url_and_token_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(dir.path());
    let health: Value = agent_runtime_executor::provider::client_builder()
        .build()
        .unwrap()
        .get(format!("{}/healthz", served.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health, json!({ "status": "ok" }));
    let init = command(
        &served,
        "initialize",
        json!({ "client": { "name": "test", "version": "1" } }),
    )
    .await;
    assert_eq!(init["protocolVersion"], 1);
    assert!(dir.path().join("dev-token").exists());

    let status = Command::new("kill")
        .args(["-TERM", &served.child.as_ref().unwrap().id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = wait_for_exit(served.child.as_mut().unwrap());
    assert!(exit.success(), "a clean shutdown exits with 0");
    // The lock is released: the same directory opens again, with the same token.
    let again = serve(dir.path());
    assert_eq!(again.token, served.token);
    stop(again);
}

/// Creates a session and starts a `demo:slow` request in it; returns both ids.
async fn start_slow_request(served: &Served) -> (String, String) {
    let session = create_session(served).await;
    let request_id = submit(served, &session, "demo:slow").await;
    (session, request_id)
}

#[tokio::test]
async fn a_request_running_when_the_process_is_killed_ends_with_a_terminal_event_after_resume() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(dir.path());
    let (session, request_id) = start_slow_request(&served).await;
    let seen = events_until(&served, &session, |e| stream_type(e) == Some("content")).await;
    served.child.as_mut().unwrap().kill().unwrap();
    served.child.as_mut().unwrap().wait().unwrap();

    let restarted = serve(dir.path());
    command(
        &restarted,
        "session.resume",
        json!({ "sessionId": session }),
    )
    .await;
    let events = events_until(&restarted, &session, |e| {
        stream_type(e) == Some("result") && e["requestId"] == request_id.as_str()
    })
    .await;
    // Nothing acknowledged was lost: what was seen before the kill is still there, unchanged.
    assert_eq!(&events[..seen.len()], &seen[..]);
    assert_lost(&events, &request_id);
    assert_eq!(events.last().unwrap()["data"]["subtype"], "error");

    // The transcript survived, and the recovery cursor points at the terminal event.
    let read = command(&restarted, "session.read", json!({ "sessionId": session })).await;
    let messages = read["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"], "demo:slow");
    assert_eq!(
        read["recovery"]["lastEventSequence"],
        events.last().unwrap()["sequence"]
    );
    stop(restarted);
}

/// ATK-05: after a kill -9, the request that was running stays open until something loads its
/// session (`session.read` and `permission.resolve` do not), and until then a follower sees only
/// heartbeats. `serve` owns its store, so at start-up it loads every session a crash left open:
/// with no command sent, a follower sees `EXECUTOR_LOST` and the `result`, and a queued input that
/// was acknowledged before the kill runs.
#[tokio::test]
async fn atk_05_serve_closes_the_requests_a_crash_left_open_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(dir.path());
    let (session, request_id) = start_slow_request(&served).await;
    let queued = command(
        &served,
        "input.submit",
        json!({ "sessionId": session, "input": "queued before the kill", "priority": "later" }),
    )
    .await;
    assert_eq!(queued["status"], "queued", "{queued}");
    events_until(&served, &session, |e| stream_type(e) == Some("content")).await;
    served.child.as_mut().unwrap().kill().unwrap();
    served.child.as_mut().unwrap().wait().unwrap();

    let restarted = serve(dir.path());
    let events = events_until(&restarted, &session, |e| {
        stream_type(e) == Some("result")
            && e["requestId"] != request_id.as_str()
            && e["data"]["subtype"] == "success"
    })
    .await;
    assert_lost(&events, &request_id);
    assert!(
        events.iter().any(|e| ends_request(e, &request_id)),
        "the interrupted request has its result"
    );
    assert!(contiguous(&events));
    stop(restarted);
}

/// Sends one command body; `None` when the process went away before it answered.
async fn send(
    client: &reqwest::Client,
    served_base: &str,
    token: &str,
    body: &Value,
) -> Option<(u16, Value)> {
    let response = client
        .post(format!("{served_base}/commands"))
        .header("authorization", format!("Bearer {token}"))
        .json(body)
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().await.ok()?))
}

/// ATK-03 on the real binary: a kill -9 during concurrent submits leaves commands in flight, and
/// none of them may wait out the abandonment window as `409 COMMAND_IN_PROGRESS` and end
/// `COMMAND_ABANDONED` with its input never run. After the restart every command is retried with
/// its id: each answers at once (its stored result, or it runs now), and every input is in the
/// session exactly once, except one whose request the kill interrupted (that request ends with
/// `EXECUTOR_LOST`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atk_03_after_a_kill_every_command_in_flight_answers_or_runs_when_retried() {
    use std::sync::{Arc, Mutex};

    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(dir.path());
    let sessions: Vec<String> = {
        let mut sessions = Vec::new();
        for _ in 0..2 {
            let created = command(&served, "session.create", json!({})).await;
            sessions.push(created["session"]["sessionId"].as_str().unwrap().to_owned());
        }
        sessions
    };
    let client = agent_runtime_executor::provider::client_builder()
        .build()
        .unwrap();
    // Every body sent, and whether it was answered before the kill.
    let sent: Arc<Mutex<Vec<(Value, bool)>>> = Arc::default();
    let mut submitters = Vec::new();
    for submitter in 0..6 {
        let (client, base, token) = (client.clone(), served.base.clone(), served.token.clone());
        let session = sessions[submitter % sessions.len()].clone();
        let sent = Arc::clone(&sent);
        submitters.push(tokio::spawn(async move {
            for n in 0.. {
                let priority = ["now", "next", "later"][n % 3];
                let body = json!({
                    "protocolVersion": 1,
                    "commandId": format!("submit-{submitter}-{n}"),
                    "type": "input.submit",
                    "data": { "sessionId": session, "input": format!("input {submitter}-{n}"), "priority": priority },
                });
                let index = {
                    let mut sent = sent.lock().unwrap();
                    sent.push((body.clone(), false));
                    sent.len() - 1
                };
                match send(&client, &base, &token, &body).await {
                    Some(_) => sent.lock().unwrap()[index].1 = true,
                    None => return,
                }
            }
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    served.child.as_mut().unwrap().kill().unwrap();
    served.child.as_mut().unwrap().wait().unwrap();
    for submitter in submitters {
        submitter.await.unwrap();
    }

    let restarted = serve(dir.path());
    let sent = sent.lock().unwrap().clone();
    let in_flight = sent.iter().filter(|(_, answered)| !answered).count();
    assert!(in_flight > 0, "the kill caught commands in flight");
    let mut answers = std::collections::HashMap::new();
    for (body, _) in &sent {
        let (status, answer) = send(&client, &restarted.base, &restarted.token, body)
            .await
            .expect("the restarted server answers");
        assert_eq!(status, 200, "{body}: {answer}");
        assert_eq!(answer["ok"], true, "{answer}");
        answers.insert(body["data"]["input"].as_str().unwrap().to_owned(), answer);
    }
    for session in &sessions {
        // A read shows the transcript of a loaded session only.
        command(
            &restarted,
            "session.resume",
            json!({ "sessionId": session }),
        )
        .await;
        let read = command(&restarted, "session.read", json!({ "sessionId": session })).await;
        let texts: Vec<&str> = read["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .chain(read["pendingInputs"].as_array().unwrap())
            .filter_map(|m| m["content"].as_str())
            .collect();
        for (body, _) in sent
            .iter()
            .filter(|(b, _)| b["data"]["sessionId"] == session.as_str())
        {
            let text = body["data"]["input"].as_str().unwrap();
            let times = texts.iter().filter(|&&t| t == text).count();
            let answer = &answers[text];
            if times == 0 && answer["data"]["status"] == "started" {
                // A request the kill interrupted before it applied its input ends with
                // EXECUTOR_LOST; the input is not run again behind the client's back.
                let request_id = answer["data"]["requestId"].as_str().unwrap();
                let events =
                    events_until(&restarted, session, |e| ends_request(e, request_id)).await;
                let lost = events.iter().any(|e| {
                    stream_type(e) == Some("error")
                        && e["requestId"] == request_id
                        && e["data"]["code"] == "EXECUTOR_LOST"
                });
                assert!(
                    lost,
                    "{text} started, never ran, and its request was not lost"
                );
                continue;
            }
            assert_eq!(
                times, 1,
                "{text} is in the session {times} times; answered {answer}"
            );
        }
    }
    stop(restarted);
}

/// Resident memory of a process, from `/proc`.
fn resident_bytes(child: &std::process::Child) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// ATK-02, memory per journal byte, on the real binary: records shaped to cost the most once parsed
/// — session metadata of 380,000 zeros or 60,000 one-character keys, and inputs of 20,000
/// one-character text parts, which the transcript and the durable journal keep — and a restart. The
/// restarted process holds everything its JSONL store retains and takes at most 4× the journal's
/// bytes more than a server on an empty store (a parsed transcript message of this shape costs
/// about 27 bytes per byte of JSON). Both processes return freed memory to the system at once
/// (`MIMALLOC_PURGE_DELAY=0`), so what is measured is what is held, not what start-up's replay
/// freed and the allocator keeps for reuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atk_02_a_restarted_store_costs_about_its_journal_in_memory() {
    let empty_dir = tempfile::tempdir().unwrap();
    let listen = ["--listen", "127.0.0.1:0"];
    let purge_at_once = [("MIMALLOC_PURGE_DELAY", "0")];
    let empty = serve_with_env(empty_dir.path(), &listen, &purge_at_once);
    command(&empty, "session.list", json!({})).await;
    let empty_resident = resident_bytes(empty.child.as_ref().unwrap());
    stop(empty);

    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path());
    for index in 0..6 {
        let metadata = if index % 2 == 0 {
            json!({ "zeros": vec![0; 380_000] })
        } else {
            let keys: serde_json::Map<String, Value> = (0..60_000)
                .map(|key| (format!("{key:x}"), json!(0)))
                .collect();
            Value::Object(keys)
        };
        command(&served, "session.create", json!({ "metadata": metadata })).await;
    }
    let created = command(&served, "session.create", json!({})).await;
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    let parts = vec![json!({ "type": "text", "text": "x" }); 20_000];
    for _ in 0..10 {
        let submitted = command(
            &served,
            "input.submit",
            json!({ "sessionId": session, "input": parts }),
        )
        .await;
        let request = submitted["requestId"].as_str().unwrap().to_owned();
        events_until(&served, &session, |event| ends_request(event, &request)).await;
    }
    stop(served);

    let restarted = serve_with_env(dir.path(), &listen, &purge_at_once);
    command(&restarted, "session.list", json!({})).await;
    let resident = resident_bytes(restarted.child.as_ref().unwrap());
    let journal = std::fs::metadata(dir.path().join("server-store.jsonl"))
        .unwrap()
        .len();
    let growth = resident.saturating_sub(empty_resident);
    eprintln!("atk-02: journal {journal} bytes, resident +{growth} bytes over an empty store");
    assert!(
        journal > 16 << 20,
        "the journal holds the records: {journal}"
    );
    assert!(
        growth < 4 * journal,
        "resident memory grew by {growth} bytes for {journal} bytes of journal"
    );
    stop(restarted);
}
