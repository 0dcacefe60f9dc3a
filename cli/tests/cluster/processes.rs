//! The cluster as real processes: PostgreSQL, two executors and two gateways as child processes
//! of this test, talking HTTP, SSE and gRPC on loopback.

use std::process::Command;
use std::time::Duration;

use crate::support::cluster::{
    Cluster, FENCED_WRITES, SECRET, create_session, route, route_after, signal, submit,
};
use crate::support::{
    EventStream, Served, assert_lost, contiguous, ends_request, events_after, events_until,
    stream_type, wait_for_exit,
};
use serde_json::{Value, json};

async fn command(served: &Served, kind: &str, data: Value) -> Value {
    crate::support::command(served, kind, data).await
}

async fn owner(cluster: &Cluster, session: &str) -> String {
    route(&cluster.served(0), session).await.0
}

fn sequence(event: &Value) -> u64 {
    event["sequence"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_created_on_one_gateway_streams_exactly_once_on_the_other() {
    let cluster = Cluster::start().await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = create_session(&a).await;
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
    let session = create_session(&a).await;
    let request_id = submit(&a, &session, "demo:slow").await;
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
    assert_lost(&on_b, &request_id);
    let (new_owner, _) = route_after(&a, &session, &owner).await;
    assert_ne!(new_owner, owner);

    let next_id = submit(&b, &session, "after the kill").await;
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
    let session = create_session(&a).await;
    let request_id = submit(&a, &session, "demo:slow").await;
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
    let next_id = submit(&b, &session, "after the drain").await;
    let all = events_until(&a, &session, |e| {
        stream_type(e) == Some("result") && e["requestId"] == next_id.as_str()
    })
    .await;
    assert!(contiguous(&all), "no event lost or duplicated");
    assert_eq!(all.last().unwrap()["data"]["subtype"], "success");
    assert_ne!(route_after(&a, &session, &drained).await.0, drained);
}

/// Reads `stream` until the server closes it (or `until` matches), within `limit`.
async fn follow(
    mut stream: EventStream,
    limit: Duration,
    until: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    while let Some(event) = tokio::time::timeout_at(deadline, stream.next())
        .await
        .expect("the stream ends before the deadline")
    {
        let done = until(&event);
        events.push(event);
        if done {
            break;
        }
    }
    events
}

/// LEASE-02: the owner is SIGSTOPped past its lease; the session moves to the other
/// executor (another owner, a higher fencing token) and its request ends there. SIGCONTed, the old
/// owner tries to go on: the store refuses its writes as stale (its
/// `agent_runtime_store_fenced_writes_total` counts them) and it drops the session. A client
/// connected through all of it, on one connection, sees exactly the store's log, with nothing of
/// the old request after its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_owner_that_wakes_up_is_fenced_off() {
    let mut cluster = Cluster::start().await;
    let a = cluster.served(0);
    let session = create_session(&a).await;
    let request_id = submit(&a, &session, "demo:slow").await;
    // Ends at the result of the request sent after the zombie woke up.
    let watcher = tokio::spawn({
        let stream = EventStream::open(&a, &session, 0).await;
        let request_id = request_id.clone();
        follow(stream, Duration::from_secs(90), move |e| {
            stream_type(e) == Some("result") && e["requestId"] != request_id.as_str()
        })
    });
    events_until(&a, &session, |e| stream_type(e) == Some("content")).await;
    let (owner, token_before) = route(&a, &session).await;

    signal(cluster.executor(&owner), "-STOP");
    let ended = events_until(&a, &session, |e| ends_request(e, &request_id)).await;
    let lost_at = sequence(ended.last().unwrap());
    let (new_owner, token_after) = route_after(&a, &session, &owner).await;
    assert!(
        token_after > token_before,
        "the new owner's fencing token {token_after} is above {token_before}"
    );
    assert_lost(&ended, &request_id);

    signal(cluster.executor(&owner), "-CONT");
    // Awake, the old owner still runs the request and holds the lease in memory: its next delta,
    // its lease renewal and the session's shutdown are all writes under the old fence.
    cluster.wait_until_fenced_off(&owner).await;
    assert_eq!(
        cluster.executor_metric(&new_owner, FENCED_WRITES).await,
        0.0,
        "the new owner's writes all hold"
    );

    let after = submit(&a, &session, "still here").await;
    let seen = watcher.await.unwrap();
    assert!(ends_request(seen.last().unwrap(), &after), "{seen:?}");
    assert_eq!(seen.last().unwrap()["data"]["subtype"], "success");
    assert!(contiguous(&seen), "no event lost or duplicated");
    let stale: Vec<_> = seen
        .iter()
        .filter(|e| sequence(e) > lost_at && e["requestId"] == request_id.as_str())
        .collect();
    assert!(
        stale.is_empty(),
        "the fenced-off executor's writes reached a client: {stale:?}"
    );
    assert_eq!(
        seen,
        cluster.stored_events(&session).await,
        "the client saw exactly the store's log"
    );
    let (holder, _) = route(&a, &session).await;
    assert_ne!(
        holder, owner,
        "the woken executor did not take the session back"
    );
    assert!(
        cluster.executor(&owner).try_wait().unwrap().is_none(),
        "the woken executor keeps running (it lost one session, not its process)"
    );
}

const CLIENTS: usize = 4;

/// A gateway restarted while clients stream. Four clients follow a long request live on
/// gateway A; A is stopped (SIGTERM) mid-request and started again on the same address; two
/// clients resume on the restarted A and two on B, each with `Last-Event-ID`. Each ends with
/// every event exactly once, in order, as the store holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_of_a_restarted_gateway_resume_on_either_gateway_and_lose_nothing() {
    let mut cluster = Cluster::start().await;
    let a = cluster.served(0);
    let session = create_session(&a).await;
    // Connected before the request starts: every client follows it live.
    let mut clients = Vec::new();
    let mut progress = Vec::new();
    for _ in 0..CLIENTS {
        let mut stream = EventStream::open(&a, &session, 0).await;
        let (seen, seen_rx) = tokio::sync::watch::channel(0);
        progress.push(seen_rx);
        clients.push(tokio::spawn(async move {
            let mut events = Vec::new();
            while let Some(event) = stream.next().await {
                seen.send_replace(sequence(&event));
                events.push(event);
            }
            events
        }));
    }
    // About 10 s of deltas (200, one every 50 ms): A stops and restarts well within them.
    let request = submit(&a, &session, "demo:deltas=200 demo:interval=50").await;
    for seen in &mut progress {
        tokio::time::timeout(Duration::from_secs(20), seen.wait_for(|&n| n >= 10))
            .await
            .expect("every client streams live")
            .expect("the stream is open");
    }

    assert!(cluster.stop_gateway(0).success(), "A exits cleanly");
    let mut before = Vec::new();
    for client in clients {
        let events = tokio::time::timeout(Duration::from_secs(20), client)
            .await
            .expect("A closed every stream")
            .unwrap();
        assert!(contiguous(&events));
        assert!(
            !events.iter().any(|e| ends_request(e, &request)),
            "A stopped mid-request"
        );
        before.push(events);
    }
    cluster.restart_gateway(0);

    // Clients 0 and 2 resume on the restarted A, 1 and 3 on B, where each left off.
    let mut resumed = Vec::new();
    for (n, events) in before.iter().enumerate() {
        let served = cluster.served(n % 2);
        let last = sequence(events.last().unwrap());
        let (session, request) = (session.clone(), request.clone());
        resumed.push(tokio::spawn(async move {
            events_after(&served, &session, last, |e| ends_request(e, &request)).await
        }));
    }
    let mut clients_saw = Vec::new();
    for (mut events, rest) in before.into_iter().zip(resumed) {
        events.extend(rest.await.unwrap());
        clients_saw.push(events);
    }
    let stored = cluster.stored_events(&session).await;
    assert!(ends_request(stored.last().unwrap(), &request));
    assert!(contiguous(&stored));
    for (n, events) in clients_saw.iter().enumerate() {
        assert!(contiguous(events), "client {n}: every event once, in order");
        assert_eq!(events, &stored, "client {n} has exactly the store's log");
    }
}

/// Calls the executor's RPCs (`Execute` with three commands) at `address` with `authorization` set to `header` (none if
/// `None`); returns each RPC's status code.
async fn executor_rpcs(address: &str, header: Option<&str>) -> Vec<(&'static str, tonic::Code)> {
    use agent_runtime_grpc::session_executor_client::SessionExecutorClient;
    use agent_runtime_grpc::{
        CallContext, CommandRequest, LoadRequest, Principal, SubscribeRequest,
    };
    use tonic::Request;

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = SessionExecutorClient::new(channel);
    fn with_header<T>(message: T, header: Option<&str>) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(value) = header {
            let value = tonic::metadata::MetadataValue::try_from(value).unwrap();
            request.metadata_mut().insert("authorization", value);
        }
        request
    }
    let context = || {
        Some(CallContext {
            principal: Some(Principal {
                tenant_id: crate::support::cluster::TENANT.to_owned(),
                subject: "user-a".to_owned(),
                scopes: vec!["session:admin".to_owned()],
            }),
            command_id: agent_runtime::ids::nanoid(),
            execution_id: String::new(),
            chosen_session_id: String::new(),
        })
    };
    let command = |kind: &str, data: &str| {
        let message = CommandRequest {
            context: context(),
            command_type: kind.to_owned(),
            data_json: data.as_bytes().to_vec(),
        };
        with_header(message, header)
    };
    let code =
        |result: Result<(), tonic::Status>| result.err().map_or(tonic::Code::Ok, |s| s.code());
    let session = r#"{"sessionId":"no-such-session"}"#;
    let subscribe = SubscribeRequest {
        context: context(),
        session_id: "no-such-session".to_owned(),
        after: 0,
    };
    vec![
        (
            "Execute CreateSession",
            code(
                client
                    .execute(command("session.create", "{}"))
                    .await
                    .map(drop),
            ),
        ),
        (
            "Execute ReadSession",
            code(
                client
                    .execute(command("session.read", session))
                    .await
                    .map(drop),
            ),
        ),
        (
            "Execute SubmitInput",
            code(
                client
                    .execute(command(
                        "input.submit",
                        r#"{"sessionId":"no-such-session","input":"hello"}"#,
                    ))
                    .await
                    .map(drop),
            ),
        ),
        (
            "Subscribe",
            code(
                client
                    .subscribe(with_header(subscribe, header))
                    .await
                    .map(drop),
            ),
        ),
        (
            "Load",
            code(
                client
                    .load(with_header(LoadRequest {}, header))
                    .await
                    .map(drop),
            ),
        ),
    ]
}

/// An `agent-runtime executor` process's gRPC port, called without the cluster secret
/// or with a wrong one, answers UNAUTHENTICATED whatever the RPC. With the secret the same calls
/// get through, so the refusals come from authentication and not from a port that is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_process_answers_unauthenticated_without_the_cluster_secret() {
    let cluster = Cluster::start().await;
    let address = cluster.executors[0].address.clone();
    let wrong = format!("Bearer {}", "x".repeat(SECRET.len()));
    let no_scheme = SECRET.to_owned();
    let refused = [
        ("no secret", None),
        ("a wrong secret", Some(wrong.as_str())),
        ("the secret without its scheme", Some(no_scheme.as_str())),
    ];
    for (name, header) in refused {
        let codes = executor_rpcs(&address, header).await;
        for (rpc, code) in codes {
            assert_eq!(code, tonic::Code::Unauthenticated, "{rpc} with {name}");
        }
    }
    let secret = format!("Bearer {SECRET}");
    let admitted = executor_rpcs(&address, Some(&secret)).await;
    assert!(
        admitted
            .iter()
            .all(|(_, code)| *code != tonic::Code::Unauthenticated),
        "the secret passes: {admitted:?}"
    );
    assert!(
        admitted
            .iter()
            .any(|(rpc, code)| *rpc == "Load" && *code == tonic::Code::Ok),
        "{admitted:?}"
    );
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

/// A background subagent lives in its executor's memory. When that executor is killed, the
/// session's new owner reports the child `failed` (lost) and never runs it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_background_subagent_of_a_killed_executor_is_reported_lost() {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        "[executor]\ndemo_slow_delta_interval_ms = 1000\n\n[tools]\nbuiltin_tools = true\nallowed_tools = [\"Task\", \"TaskOutput\"]\n",
    )
    .unwrap();
    let mut cluster = Cluster::start_with(Some(config.path())).await;
    let (a, b) = (cluster.served(0), cluster.served(1));
    let session = create_session(&a).await;
    let task = json!({
        "subagent_type": "general-purpose", "description": "slow work",
        "prompt": "demo:slow and steady", "run_in_background": true,
    });
    let request = submit(&a, &session, &format!("demo:tool Task {task}")).await;
    let events = events_until(&b, &session, |e| ends_request(e, &request)).await;
    let started = events
        .iter()
        .find(|e| stream_type(e) == Some("tool_result"))
        .expect("Task answers at once");
    assert_eq!(started["data"]["output"]["status"], "running", "{started}");
    let agent = started["data"]["output"]["agent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let owner = owner(&cluster, &session).await;

    cluster.executor(&owner).kill().unwrap();
    let (new_owner, _) = route_after(&a, &session, &owner).await;
    assert_ne!(new_owner, owner);
    let read = json!({ "task_id": agent, "block": true, "timeout": 1000 });
    let request = submit(&b, &session, &format!("demo:tool TaskOutput {read}")).await;
    let events = events_until(&a, &session, |e| ends_request(e, &request)).await;
    let report = events
        .iter()
        .find(|e| stream_type(e) == Some("tool_result") && e["data"]["name"] == "TaskOutput")
        .expect("TaskOutput answers");
    assert_eq!(report["data"]["output"]["status"], "failed", "{report}");
    assert!(
        report["data"]["output"]["result"]
            .as_str()
            .unwrap()
            .starts_with("lost"),
        "{report}"
    );
}
