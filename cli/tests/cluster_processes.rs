//! The cluster as real processes: PostgreSQL, two executors and two gateways as child processes
//! of this test, talking HTTP, SSE and gRPC on loopback.

mod support;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::cluster::Cluster;
use support::{Served, events_until, stream_type, wait_for_exit};

async fn command(served: &Served, kind: &str, data: Value) -> Value {
    support::command(served, kind, data).await
}

async fn owner(cluster: &Cluster, session: &str) -> String {
    let served = cluster.served(0);
    let read = command(&served, "session.read", json!({ "sessionId": session })).await;
    read["recovery"]["workerId"]
        .as_str()
        .expect("a route with an owner")
        .to_owned()
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn contiguous(events: &[Value]) -> bool {
    events
        .iter()
        .enumerate()
        .all(|(index, event)| event["sequence"].as_u64() == Some(index as u64 + 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_created_on_one_gateway_streams_exactly_once_on_the_other() {
    let cluster = Cluster::start().await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = command(&a, "session.create", json!({})).await["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    command(
        &a,
        "input.submit",
        json!({ "sessionId": session, "input": "demo:deltas=50" }),
    )
    .await;
    let events = events_until(&b, &session, |e| stream_type(e) == Some("result")).await;
    assert!(contiguous(&events), "every event once, in order");
    assert_eq!(
        events
            .iter()
            .filter(|e| stream_type(e) == Some("content"))
            .count(),
        50
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_owner_mid_request_moves_the_session_and_ends_the_request() {
    let mut cluster = Cluster::start().await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = command(&a, "session.create", json!({})).await["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let submitted = command(
        &a,
        "input.submit",
        json!({ "sessionId": session, "input": "demo:slow" }),
    )
    .await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    events_until(&b, &session, |e| stream_type(e) == Some("content")).await;
    let owner = owner(&cluster, &session).await;

    // Both gateways follow the session across the kill.
    let ends_interrupted =
        |e: &Value| stream_type(e) == Some("result") && e["requestId"] == request_id.as_str();
    let follow_a = tokio::spawn({
        let a = cluster.served(0);
        let session = session.clone();
        let request_id = request_id.clone();
        async move {
            events_until(&a, &session, move |e| {
                stream_type(e) == Some("result") && e["requestId"] == request_id.as_str()
            })
            .await
        }
    });
    cluster.executor(&owner).kill().unwrap();
    let on_b = events_until(&b, &session, ends_interrupted).await;
    let on_a = follow_a.await.unwrap();

    assert!(
        contiguous(&on_a) && contiguous(&on_b),
        "no event lost or duplicated"
    );
    assert_eq!(on_a, on_b);
    let lost = on_b
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .expect("a terminal error");
    assert_eq!(lost["data"]["code"], "EXECUTOR_LOST");
    let new_owner = cluster_owner_after(&cluster, &session, &owner).await;
    assert_ne!(new_owner, owner);

    let next = command(
        &b,
        "input.submit",
        json!({ "sessionId": session, "input": "after the kill" }),
    )
    .await;
    let next_id = next["requestId"].as_str().unwrap().to_owned();
    let events = events_until(&a, &session, |e| {
        stream_type(e) == Some("result") && e["requestId"] == next_id.as_str()
    })
    .await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_on_the_owner_ends_its_request_and_hands_the_session_to_another_executor() {
    let mut cluster = Cluster::start().await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = command(&a, "session.create", json!({})).await["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let submitted = command(
        &a,
        "input.submit",
        json!({ "sessionId": session, "input": "demo:slow" }),
    )
    .await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    events_until(&b, &session, |e| stream_type(e) == Some("content")).await;
    let drained = owner(&cluster, &session).await;

    // A graceful drain: the process exits cleanly after ending the request itself (not after a
    // lease expiry) and handing the session off.
    signal(cluster.executor(&drained), "-TERM");
    let exit = wait_for_exit(cluster.executor(&drained));
    assert!(exit.success(), "a drained executor exits with 0");
    let interrupted = events_until(&a, &session, |e| {
        stream_type(e) == Some("result") && e["requestId"] == request_id.as_str()
    })
    .await;
    assert!(contiguous(&interrupted));
    let ended = interrupted
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .expect("a terminal error");
    assert_eq!(ended["data"]["code"], "EXECUTOR_SHUTDOWN");
    assert_eq!(interrupted.last().unwrap()["data"]["subtype"], "error");

    // The session goes on on the other executor.
    let next = command(
        &b,
        "input.submit",
        json!({ "sessionId": session, "input": "after the drain" }),
    )
    .await;
    let next_id = next["requestId"].as_str().unwrap().to_owned();
    let all = events_until(&a, &session, |e| {
        stream_type(e) == Some("result") && e["requestId"] == next_id.as_str()
    })
    .await;
    assert!(contiguous(&all), "no event lost or duplicated");
    assert_eq!(all.last().unwrap()["data"]["subtype"], "success");
    assert_ne!(
        cluster_owner_after(&cluster, &session, &drained).await,
        drained
    );
}

async fn cluster_owner_after(cluster: &Cluster, session: &str, old: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let current = owner(cluster, session).await;
        if current != old || Instant::now() > deadline {
            return current;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_owner_that_wakes_up_is_fenced_off() {
    let mut cluster = Cluster::start().await;
    let a = cluster.served(0);
    let session = command(&a, "session.create", json!({})).await["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let submitted = command(
        &a,
        "input.submit",
        json!({ "sessionId": session, "input": "demo:slow" }),
    )
    .await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    events_until(&a, &session, |e| stream_type(e) == Some("content")).await;
    let owner = owner(&cluster, &session).await;

    signal(cluster.executor(&owner), "-STOP");
    let events = events_until(&a, &session, |e| {
        stream_type(e) == Some("result") && e["requestId"] == request_id.as_str()
    })
    .await;
    let lost_at = events.last().unwrap()["sequence"].as_u64().unwrap();
    signal(cluster.executor(&owner), "-CONT");
    // Give the woken executor time to try its writes; every one must be refused.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = command(
        &a,
        "input.submit",
        json!({ "sessionId": session, "input": "still here" }),
    )
    .await;
    let after_id = after["requestId"].as_str().unwrap().to_owned();
    let all = events_until(&a, &session, |e| {
        stream_type(e) == Some("result") && e["requestId"] == after_id.as_str()
    })
    .await;
    assert!(contiguous(&all));
    let stale: Vec<_> = all
        .iter()
        .filter(|e| {
            e["sequence"].as_u64().unwrap() > lost_at && e["requestId"] == request_id.as_str()
        })
        .collect();
    assert!(
        stale.is_empty(),
        "the fenced-off executor wrote after losing the session: {stale:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_of_a_restarted_gateway_reconnect_elsewhere_and_lose_nothing() {
    let mut cluster = Cluster::start().await;
    let a = cluster.served(0);
    let session = command(&a, "session.create", json!({})).await["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    command(
        &a,
        "input.submit",
        json!({ "sessionId": session, "input": "demo:slow" }),
    )
    .await;
    let seen = events_until(&a, &session, |e| e["sequence"].as_u64() >= Some(5)).await;
    signal(&cluster.gateways[0], "-TERM");
    wait_for_exit(&mut cluster.gateways[0]);
    let b = cluster.served(1);
    let last = seen.last().unwrap()["sequence"].as_u64().unwrap();
    let rest =
        support::events_after(&b, &session, last, |e| stream_type(e) == Some("result")).await;
    assert_eq!(rest.first().unwrap()["sequence"].as_u64(), Some(last + 1));
    let mut all = seen.clone();
    all.extend(rest);
    assert!(contiguous(&all));
}

#[test]
fn compose_yaml_is_valid_compose() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let output = Command::new("docker-compose")
        .args(["-f", "compose.yaml", "config", "-q"])
        .current_dir(root)
        .env(
            "AGENT_RUNTIME_CLUSTER_SECRET",
            "a-secret-for-the-config-check",
        )
        .output()
        .expect("docker-compose is installed by scripts/test.sh");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
