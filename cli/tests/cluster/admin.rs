//! The operator drains an executor of a running cluster with `agent-runtime admin executors drain`:
//! the executor notices at its next heartbeat, ends its running requests with their terminal
//! events, hands its sessions off and exits; every request accepted before, during and after the
//! drain ends, and the sessions go on on the other executor.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::cluster::{
    Cluster, OPERATOR_TOKEN, create_session, route, route_after, submit,
};
use crate::support::{Served, ends_request, events_until, stream_type, wait_for_exit};

fn admin(gateway: &Served, args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .args(["admin", "--url", gateway.base.trim_end_matches("/v1/agent")])
        .args(["--token", OPERATOR_TOKEN])
        .args(args)
        .output()
        .expect("the binary runs");
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
