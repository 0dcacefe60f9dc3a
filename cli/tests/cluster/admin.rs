//! The operator drains an executor of a running cluster with `agent-runtime admin executors drain`:
//! the executor notices at its next heartbeat, ends its running requests with their terminal
//! events, hands its sessions off and exits; every request accepted before, during and after the
//! drain ends, and the sessions go on on the other executor.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::cluster::{
    Cluster, OPERATOR_TOKEN, TENANT, create_session, route, route_after, submit,
};
use crate::support::{Served, ends_request, events_until, stream_type, wait_for_exit};

fn admin_output(gateway: &Served, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .args(["admin", "--url", gateway.base.trim_end_matches("/v1/agent")])
        .args(["--token", OPERATOR_TOKEN])
        .args(args)
        .output()
        .expect("the binary runs")
}

fn admin(gateway: &Served, args: &[&str]) -> Value {
    let output = admin_output(gateway, args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "admin {args:?}: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_drains_an_executor_under_load_and_no_request_is_lost() {
    let mut cluster = Cluster::start().await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let listed = admin(&a, &["executors", "list"]);
    assert_eq!(listed["executors"].as_array().unwrap().len(), 2, "{listed}");

    // Load: every session runs a slow request; the drained executor owns at least one.
    let mut sessions = Vec::new();
    for _ in 0..4 {
        let session = create_session(&a).await;
        let request = submit(&a, &session, "demo:slow").await;
        sessions.push((session, request));
    }
    for (session, _) in &sessions {
        events_until(&b, session, |e| stream_type(e) == Some("content")).await;
    }
    let drained = route(&a, &sessions[0].0).await.0;

    // Requests go on in another session while the executor drains: each is accepted (and must
    // end) or refused as retryable (and is sent again).
    let busy = create_session(&a).await;
    let submitter = tokio::spawn({
        let b = cluster.served(1);
        let session = busy.clone();
        async move {
            let mut ended = 0;
            for turn in 0..6 {
                loop {
                    let (status, body) = crate::support::post_command(
                        &b,
                        &agent_runtime::ids::nanoid(),
                        "input.submit",
                        serde_json::json!({"sessionId": session, "input": format!("during {turn}")}),
                        &[],
                    )
                    .await;
                    if body["ok"] == true {
                        let request = body["data"]["requestId"].as_str().unwrap().to_owned();
                        events_until(&b, &session, |e| ends_request(e, &request)).await;
                        ended += 1;
                        break;
                    }
                    assert_eq!(body["error"]["retryable"], true, "{status}: {body}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            ended
        }
    });

    let drain = admin(&a, &["executors", "drain", "--worker", &drained]);
    assert_eq!(drain["status"], "draining", "{drain}");
    let exit = wait_for_exit(cluster.executor(&drained));
    assert!(
        exit.success(),
        "the drained executor exits cleanly by itself"
    );
    assert_eq!(
        submitter.await.unwrap(),
        6,
        "every request accepted during the drain ended"
    );

    // Every request that was running ended with its terminal event; the sessions go on on the
    // executor that is left.
    for (session, request) in &sessions {
        let events = events_until(&a, session, |e| ends_request(e, request)).await;
        assert_eq!(stream_type(events.last().unwrap()), Some("result"));
        let next = submit(&b, session, "after the drain").await;
        let after = events_until(&a, session, |e| ends_request(e, &next)).await;
        assert_eq!(
            after.last().unwrap()["data"]["subtype"],
            "success",
            "{after:?}"
        );
        assert_ne!(route_after(&a, session, &drained).await.0, drained);
    }
    let listed = admin(&a, &["executors", "list"]);
    let gone = listed["executors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workerId"] == drained.as_str())
        .unwrap();
    assert_ne!(gone["status"], "active", "{listed}");
}

/// The operator moves a session off its executor now with `agent-runtime admin sessions move`:
/// the running request ends with `EXECUTOR_SHUTDOWN` (its events stored before the handoff), the
/// input waiting behind it runs on the executor the session moved to, and a named target is
/// honoured. Both executors keep running.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_moves_a_session_off_its_executor_and_its_waiting_input_runs_there() {
    let mut cluster = Cluster::start().await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = create_session(&a).await;
    let running = submit(&a, &session, "demo:slow").await;
    events_until(&b, &session, |e| stream_type(e) == Some("content")).await;
    let waiting = crate::support::command(
        &a,
        "input.submit",
        serde_json::json!({"sessionId": session, "input": "after the move", "priority": "later"}),
    )
    .await;
    assert_eq!(waiting["status"], "queued", "{waiting}");
    let (from, token) = route(&a, &session).await;

    let moved = admin(&a, &move_args(&session, None));
    assert_eq!(moved["fromWorkerId"], from.as_str(), "{moved}");
    let to = moved["workerId"].as_str().unwrap().to_owned();
    assert_ne!(to, from, "{moved}");
    assert!(moved["fencingToken"].as_u64().unwrap() > token, "{moved}");
    assert_eq!(route(&a, &session).await.0, to);

    let ended = events_until(&a, &session, |e| ends_request(e, &running)).await;
    let error = ended
        .iter()
        .find(|e| stream_type(e) == Some("error") && e["requestId"] == running.as_str())
        .expect("the running request ends with an error");
    assert_eq!(error["data"]["code"], "EXECUTOR_SHUTDOWN", "{error}");
    // The waiting input runs, on the executor the session moved to, without another command.
    let all = events_until(&a, &session, |e| {
        stream_type(e) == Some("result") && e["requestId"] != running.as_str()
    })
    .await;
    assert_eq!(all.last().unwrap()["data"]["subtype"], "success", "{all:?}");
    assert_eq!(route(&a, &session).await.0, to);

    // Back to a named executor; then it serves commands there.
    let back = admin(&b, &move_args(&session, Some(&from)));
    assert_eq!(back["workerId"], from.as_str(), "{back}");
    let next = submit(&b, &session, "after moving back").await;
    let after = events_until(&a, &session, |e| ends_request(e, &next)).await;
    assert_eq!(after.last().unwrap()["data"]["subtype"], "success");
    assert_eq!(route(&a, &session).await.0, from);

    // Refusals, in the operator's words: no move onto the owner itself, none of a session no
    // executor runs.
    let refused = admin_refused(&a, &move_args(&session, Some(&from)));
    assert!(
        refused.contains("CONFLICT") && refused.contains("already runs on"),
        "{refused}"
    );
    let unknown = admin_refused(&a, &move_args("no-such-session", None));
    assert!(
        unknown.contains("No live executor runs session"),
        "{unknown}"
    );
    for worker in [&from, &to] {
        assert!(
            cluster.executor(worker).try_wait().unwrap().is_none(),
            "executor {worker} keeps running"
        );
    }
}

/// An admin call that must be refused: its error line.
fn admin_refused(gateway: &Served, args: &[&str]) -> String {
    let output = admin_output(gateway, args);
    assert!(!output.status.success(), "admin {args:?} succeeded");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The arguments moving `session` (to executor `to`, when given).
fn move_args<'a>(session: &'a str, to: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec!["sessions", "move", "--tenant", TENANT, "--session", session];
    args.extend(to.map(|to| ["--to", to]).into_iter().flatten());
    args
}
