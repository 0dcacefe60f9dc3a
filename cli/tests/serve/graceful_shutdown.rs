//! SIGTERM during streaming, over real processes (the acceptance test): a client follows
//! a session while a long request runs, `serve` gets SIGTERM, the stream ends cleanly, the server
//! is started again on the same data directory and port, and the client — our Rust client, which
//! resumes from its last sequence — ends up with exactly the events 1..N, none twice and none
//! missing, while every command acknowledged before the signal is still there.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use agent_runtime::protocol::command::ClientInfo;
use agent_runtime_client::{AgentClient, ClientOptions, EventsOptions, RetryNotice, SessionEvent};
use futures_util::StreamExt;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);

/// Sends a command with a chosen id; returns the whole answer (status 200 expected).
async fn command_with_id(served: &Served, command_id: &str, kind: &str, data: Value) -> Value {
    let (status, answer) = crate::support::post_command(served, command_id, kind, data, &[]).await;
    assert_eq!(status, 200, "{kind}");
    answer
}

fn start(dir: &std::path::Path, listen: &str, config: &std::path::Path) -> Served {
    serve_with(
        dir,
        &["--listen", listen, "--config", config.to_str().unwrap()],
    )
}

/// Reads a raw SSE response to its end; returns the text and whether it ended cleanly.
async fn read_raw_stream(mut response: reqwest::Response) -> (String, Result<(), String>) {
    let mut text = String::new();
    loop {
        match tokio::time::timeout(DEADLINE, response.chunk()).await {
            Err(_) => return (text, Err("no end before the deadline".to_owned())),
            Ok(Ok(Some(bytes))) => text.push_str(std::str::from_utf8(&bytes).unwrap()),
            Ok(Ok(None)) => return (text, Ok(())),
            Ok(Err(error)) => return (text, Err(error.to_string())),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_during_streaming_ends_the_stream_cleanly_and_the_restarted_server_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        "[executor]\ndemo_slow_delta_interval_ms = 100\n\n[gateway]\nheartbeat_interval_ms = 500\nshutdown_readiness_delay_ms = 200\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    // Port 0 first; the restart takes the port the first server chose, so the client's URL holds.
    let mut first = start(&data, "127.0.0.1:0", &config);
    let listen = first.base["http://".len()..]
        .trim_end_matches("/v1/agent")
        .to_owned();

    // Acknowledged before the signal: they must all survive it.
    let created = command_with_id(&first, "ack-create", "session.create", json!({})).await;
    let session = created["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let submit_data = json!({ "sessionId": session, "input": "demo:slow" });
    let submitted =
        command_with_id(&first, "ack-submit", "input.submit", submit_data.clone()).await;
    let long_request = submitted["data"]["requestId"].as_str().unwrap().to_owned();

    // The Rust client follows the session across the restart.
    let reconnects = Arc::new(Mutex::new(Vec::new()));
    let mut options = ClientOptions::new(
        first.base.clone(),
        ClientInfo {
            name: "shutdown-test".into(),
            version: "1".into(),
            title: None,
        },
    )
    .bearer_token(first.token.clone());
    options.max_event_reconnect_attempts = 20;
    options.retry_base_delay = Duration::from_millis(100);
    let seen_reconnects = Arc::clone(&reconnects);
    options.on_retry = Some(Arc::new(move |notice: &RetryNotice<'_>| {
        if let RetryNotice::EventReconnect { after, .. } = notice {
            seen_reconnects.lock().unwrap().push(*after);
        }
    }));
    let client = AgentClient::new(options).unwrap();
    let followed: Arc<Mutex<Vec<SessionEvent>>> = Arc::default();
    let (second_request_tx, mut second_request_rx) = tokio::sync::watch::channel(None::<String>);
    let follower = {
        let followed = Arc::clone(&followed);
        let mut events = client.events(&session, EventsOptions::default());
        tokio::spawn(async move {
            let mut wanted: Option<String> = None;
            loop {
                let done = wanted.as_ref().is_some_and(|id| {
                    followed.lock().unwrap().iter().any(|event| {
                        event.envelope.request_id.as_deref() == Some(id) && event.is_request_end()
                    })
                });
                if done {
                    return;
                }
                tokio::select! {
                    changed = second_request_rx.changed(), if wanted.is_none() => {
                        changed.unwrap();
                        wanted = second_request_rx.borrow().clone();
                    }
                    event = events.next() => {
                        let event = event
                            .expect("the client stream lasts until the second request ends")
                            .expect("the client stream never fails");
                        followed.lock().unwrap().push(event);
                    }
                }
            }
        })
    };
    // A raw observer of the first server's stream, to see how that connection ends.
    let raw = agent_runtime_executor::provider::client_builder()
        .build()
        .unwrap()
        .get(format!("{}/sessions/{session}/events", first.base))
        .header("authorization", format!("Bearer {}", first.token))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 200);
    let raw_reader = tokio::spawn(read_raw_stream(raw));

    // Mid-request: some deltas have arrived.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while followed.lock().unwrap().len() < 6 {
        assert!(tokio::time::Instant::now() < deadline, "no events arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = Command::new("kill")
        .args(["-TERM", &first.child.as_ref().unwrap().id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = wait_for_exit(first.child.as_mut().unwrap());
    assert!(exit.success(), "a graceful shutdown exits with 0");

    let (raw_text, raw_end) = raw_reader.await.unwrap();
    assert_eq!(
        raw_end,
        Ok(()),
        "the stream ended cleanly, not with an error"
    );
    assert!(
        raw_text.ends_with("\n\n"),
        "the stream ended between frames, never mid-frame: {raw_text:?}"
    );

    // The same data directory and port: the client's reconnects land here.
    let second = start(&data, &listen, &config);
    assert_eq!(second.token, first.token, "the development token survives");
    let more = command_with_id(
        &second,
        "after-restart",
        "input.submit",
        json!({ "sessionId": session, "input": "after the restart" }),
    )
    .await;
    let second_request = more["data"]["requestId"].as_str().unwrap().to_owned();
    second_request_tx.send_replace(Some(second_request.clone()));
    tokio::time::timeout(Duration::from_secs(60), follower)
        .await
        .expect("the client follows the session to the second request's end")
        .unwrap();

    let followed = followed.lock().unwrap().clone();
    assert!(
        !reconnects.lock().unwrap().is_empty(),
        "the client reconnected"
    );
    let sequences: Vec<u64> = followed.iter().map(SessionEvent::sequence).collect();
    let expected: Vec<u64> = (1..=followed.len() as u64).collect();
    assert_eq!(sequences, expected, "exactly 1..N: no gap, no duplicate");

    // The interrupted request ended with terminal events, stored before the first server
    // stopped; the second request ran to success.
    let request_events = |request: &str| -> Vec<Value> {
        followed
            .iter()
            .filter(|e| e.envelope.request_id.as_deref() == Some(request))
            .map(|e| serde_json::to_value(&e.envelope).unwrap())
            .collect()
    };
    let long = request_events(&long_request);
    let error = long
        .iter()
        .find(|e| stream_type(e) == Some("error"))
        .expect("the interrupted request says why it ended");
    assert_eq!(error["data"]["code"], "EXECUTOR_SHUTDOWN");
    assert_eq!(long.last().unwrap()["data"]["subtype"], "error");
    assert_eq!(
        request_events(&second_request).last().unwrap()["data"]["subtype"],
        "success"
    );

    // What the restarted server holds is exactly what the client saw.
    let last = *sequences.last().unwrap();
    let stored = events_until(&second, &session, |e| e["sequence"].as_u64() == Some(last)).await;
    let stored_ids: Vec<&str> = stored
        .iter()
        .map(|e| e["eventId"].as_str().unwrap())
        .collect();
    let followed_ids: Vec<&str> = followed
        .iter()
        .map(|e| e.envelope.event_id.as_str())
        .collect();
    assert_eq!(stored_ids, followed_ids);

    // Every acknowledged command is still there: its retry replays the stored answer.
    let replayed = command_with_id(&second, "ack-create", "session.create", json!({})).await;
    assert_eq!(replayed, created);
    let replayed = command_with_id(&second, "ack-submit", "input.submit", submit_data).await;
    assert_eq!(replayed, submitted);
    let read = command_with_id(
        &second,
        "read-after",
        "session.read",
        json!({ "sessionId": session }),
    )
    .await;
    let inputs: Vec<&str> = read["data"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(inputs, ["demo:slow", "after the restart"]);
    stop(second);
}
