//! The real `agent-runtime serve` binary: what it prints, how it stops, and what survives a
//! SIGKILL in the middle of a request.

mod support;

use std::process::Command;

use serde_json::{Value, json};
use support::*;

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

#[tokio::test]
async fn a_request_running_when_the_process_is_killed_ends_with_a_terminal_event_after_resume() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(dir.path());
    let session = command(&served, "session.create", json!({})).await["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let submitted = command(
        &served,
        "input.submit",
        json!({ "sessionId": session, "input": "demo:slow" }),
    )
    .await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
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
    let lost = events
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .expect("the interrupted request reports why it ended");
    assert_eq!(lost["data"]["code"], "EXECUTOR_LOST");
    assert_eq!(lost["requestId"], request_id.as_str());
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

/// ATK-05 (issue 20, item 5): after a kill -9, the request that was running used to stay open
/// until some command loaded its session (`session.read` and `permission.resolve` do not), so a
/// follower saw only heartbeats. `serve` owns its store, so at start-up it loads every session a
/// crash left open: with no command sent, a follower sees `EXECUTOR_LOST` and the `result`, and a
/// queued input that was acknowledged before the kill runs.
#[tokio::test]
async fn atk_05_serve_closes_the_requests_a_crash_left_open_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve(dir.path());
    let session = command(&served, "session.create", json!({})).await["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let submitted = command(
        &served,
        "input.submit",
        json!({ "sessionId": session, "input": "demo:slow" }),
    )
    .await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
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
    let lost = events
        .iter()
        .find(|e| stream_type(e) == Some("error") && e["requestId"] == request_id.as_str())
        .expect("the interrupted request reports why it ended");
    assert_eq!(lost["data"]["code"], "EXECUTOR_LOST");
    assert!(
        events.iter().any(|e| ends_request(e, &request_id)),
        "the interrupted request has its result"
    );
    assert!(contiguous(&events));
    stop(restarted);
}
