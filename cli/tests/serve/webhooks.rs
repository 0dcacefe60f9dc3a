//! Webhooks from the real binary to a receiver built on the Standard Webhooks reference library
//! (`cli/tests/webhooks/receiver.py`), across `kill -9`s: one while deliveries wait between
//! their commit and their delivery (the receiver refuses them), one while a delivery is in
//! flight (the receiver holds it open). A delivery-log check then proves every committed
//! `request.completed` arrived at least once, verified, in its session's order, and that nothing
//! arrived that the store had not committed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::cluster::{create_session, submit};
use crate::support::webhooks::{Receiver, SECRET};
use crate::support::{Served, command, ends_request, events_until, serve_with_env, stream_type};

fn config(dir: &Path, receiver: &Receiver) -> PathBuf {
    let path = dir.join("config.toml");
    let toml = format!(
        r#"
[webhooks]
poll_interval_ms = 50
attempt_timeout_ms = 60000
retry_schedule_ms = [200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200]

[[webhooks.endpoints]]
id = "ops"
tenant = "dev"
url = "{}/hook"
events = ["request.completed", "session.closed"]
secret_env = "OPS_WEBHOOK_SECRET"
allow_private_addresses = true
"#,
        receiver.url
    );
    std::fs::write(&path, toml).unwrap();
    path
}

fn start(data: &Path, config: &Path) -> Served {
    let config = config.to_str().unwrap();
    serve_with_env(
        data,
        &["--listen", "127.0.0.1:0", "--config", config],
        &[("OPS_WEBHOOK_SECRET", SECRET)],
    )
}

fn kill_9(mut served: Served) {
    let mut child = served.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Runs one request to its end; returns its id.
async fn run_request(served: &Served, session: &str, input: &str) -> String {
    let request = submit(served, session, input).await;
    events_until(served, session, |e| ends_request(e, &request)).await;
    request
}

#[tokio::test]
async fn every_committed_request_completed_arrives_across_kill_9s_and_none_before_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let receiver = Receiver::start(dir.path());
    let config = config(dir.path(), &receiver);

    // Between commit and delivery: the receiver refuses everything, the process dies.
    receiver.set_mode("refuse").await;
    let served = start(&data, &config);
    let session = create_session(&served).await;
    let mut requests = Vec::new();
    for turn in 0..4 {
        requests.push(run_request(&served, &session, &format!("turn {turn}")).await);
    }
    receiver
        .wait_for("a refused attempt", |seen| {
            seen.iter().any(|line| line["mode"] == "refuse")
        })
        .await;
    kill_9(served);

    // During a delivery: the receiver holds the attempt open, the process dies.
    receiver.set_mode("hang").await;
    let served = start(&data, &config);
    receiver
        .wait_for("a held attempt", |seen| {
            seen.iter().any(|line| line["mode"] == "hang")
        })
        .await;
    requests.push(run_request(&served, &session, "turn 4").await);
    kill_9(served);

    // The receiver recovers; a third process delivers everything.
    receiver.set_mode("accept").await;
    let served = start(&data, &config);
    requests.push(run_request(&served, &session, "turn 5").await);
    command(&served, "session.close", json!({ "sessionId": session })).await;
    let committed: Vec<String> = events_until(&served, &session, |e| e["type"] == "session.closed")
        .await
        .iter()
        .filter(|e| stream_type(e) == Some("result"))
        .map(|e| e["requestId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        committed, requests,
        "the store committed each request's end once"
    );
    receiver
        .wait_for("the session's close", |seen| {
            seen.iter()
                .any(|line| line["mode"] == "accept" && line["type"] == "session.closed")
        })
        .await;

    // The delivery-log check.
    let received = receiver.received();
    assert!(
        received.iter().all(|line| line["verified"] == true),
        "every attempt verifies with the reference library: {received:?}"
    );
    let delivered: Vec<&Value> = received
        .iter()
        .filter(|line| line["mode"] == "accept" && line["type"] == "request.completed")
        .collect();
    let mut first_arrivals = Vec::new();
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    for line in &delivered {
        let request = line["data"]["requestId"].as_str().unwrap().to_owned();
        assert_eq!(line["data"]["sessionId"], session.as_str());
        assert_eq!(line["data"]["outcome"], "completed");
        assert!(line["data"]["durationMs"].is_u64(), "{line}");
        if !first_arrivals.contains(&request) {
            first_arrivals.push(request.clone());
        }
        let id = line["id"].as_str().unwrap().to_owned();
        assert_eq!(ids.entry(id).or_insert(request.clone()), &request);
    }
    assert_eq!(
        first_arrivals, committed,
        "every committed request.completed arrived, in the session's order, and nothing else"
    );
    // The attempts and the outbox are measured.
    let metrics_url = served.base.replace("/v1/agent", "/metrics");
    let exposition = agent_runtime_executor::provider::client_builder()
        .build()
        .unwrap()
        .get(metrics_url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"agent_runtime_webhook_attempt_duration_seconds_count{endpoint="ops",event_type="request.completed",outcome="delivered"}"#,
        r#"agent_runtime_webhooks_pending{endpoint="ops"}"#,
        r#"agent_runtime_webhook_endpoint_disabled{endpoint="ops"} 0"#,
    ] {
        assert!(exposition.contains(series), "{series} in:\n{exposition}");
    }

    // A refused or held attempt was delivered again under its own id.
    let retried: BTreeSet<&str> = received
        .iter()
        .filter(|line| line["mode"] != "accept" && line["type"] == "request.completed")
        .map(|line| line["id"].as_str().unwrap())
        .collect();
    assert!(!retried.is_empty());
    for id in retried {
        assert!(
            ids.contains_key(id),
            "{id} was attempted and never delivered"
        );
    }
}
