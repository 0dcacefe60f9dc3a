//! Our reference-shaped clients (Rust, JavaScript, Python) across a move of their deployment:
//! each runs a turn on `serve` with its JSONL store and keeps its cursor and a command id; the
//! deployment stops, is exported and imported into PostgreSQL, and `serve` starts there with the
//! same token; each client then retries its command (the stored answer comes back: the same
//! input and request ids) and follows its session from the kept cursor through a new turn, with
//! no gap and no repeat. The JavaScript and Python halves are scripts beside this file.

use std::path::Path;
use std::process::Command;

use agent_runtime::protocol::command::ClientInfo;
use agent_runtime_client::{
    After, AgentClient, ClientOptions, CommandOptions, EventCursor, EventsOptions, SessionEvent,
    SubmitOptions,
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::succeeded;
use crate::support::cluster::signal;
use crate::support::{Served, serve, serve_with, wait_for_exit};

fn rust_client(served: &Served) -> AgentClient {
    let info = ClientInfo {
        name: "move-test-rust".into(),
        version: "1".into(),
        title: None,
    };
    let options = ClientOptions::new(served.base.clone(), info).bearer_token(served.token.clone());
    AgentClient::new(options).unwrap()
}

/// Events of `session` after `after` up to the `result` of `request`.
async fn until_result(
    client: &AgentClient,
    session: &str,
    after: After,
    request: &str,
) -> Vec<SessionEvent> {
    let options = EventsOptions {
        after,
        ..EventsOptions::default()
    };
    let mut events = client.events(session, options);
    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        let event = event.expect("an event");
        let done = event.is_request_end() && event.envelope.request_id.as_deref() == Some(request);
        seen.push(event);
        if done {
            return seen;
        }
    }
    panic!("the stream ended before the result");
}

async fn rust_before(served: &Served) -> Value {
    let client = rust_client(served);
    let session = client
        .create_session(None, CommandOptions::default())
        .await
        .unwrap();
    let session_id = session.session_id().to_owned();
    let command_id = format!("rust-before-{}", agent_runtime::ids::nanoid());
    let options = CommandOptions {
        command_id: Some(command_id.clone()),
        ..CommandOptions::default()
    };
    let submitted = client
        .submit_input(
            &session_id,
            "demo:deltas=3 before the move",
            SubmitOptions::default(),
            options,
        )
        .await
        .unwrap();
    let request = submitted.request_id().unwrap().to_owned();
    let seen = until_result(&client, &session_id, After::Start, &request).await;
    let cursor = seen.last().unwrap().cursor();
    json!({
        "sessionId": session_id,
        "cursor": { "sessionId": cursor.session_id, "sequence": cursor.sequence, "eventId": cursor.event_id },
        "commandId": command_id,
        "submitted": { "inputId": submitted.input_id, "requestId": request },
    })
}

async fn rust_after(served: &Served, kept: &Value) -> Value {
    let client = rust_client(served);
    let session_id = kept["sessionId"].as_str().unwrap();
    let options = CommandOptions {
        command_id: Some(kept["commandId"].as_str().unwrap().to_owned()),
        ..CommandOptions::default()
    };
    let replayed = client
        .submit_input(
            session_id,
            "demo:deltas=3 before the move",
            SubmitOptions::default(),
            options,
        )
        .await
        .unwrap();
    let next = client
        .submit_input(
            session_id,
            "demo:deltas=2 after the move",
            SubmitOptions::default(),
            CommandOptions::default(),
        )
        .await
        .unwrap();
    let cursor = EventCursor {
        session_id: session_id.to_owned(),
        sequence: kept["cursor"]["sequence"].as_u64().unwrap(),
        event_id: kept["cursor"]["eventId"].as_str().unwrap().to_owned(),
    };
    let seen = until_result(
        &client,
        session_id,
        After::Cursor(cursor),
        next.request_id().unwrap(),
    )
    .await;
    json!({
        "replayed": { "inputId": replayed.input_id, "requestId": replayed.request_id() },
        "sequences": seen.iter().map(SessionEvent::sequence).collect::<Vec<_>>(),
    })
}

/// Runs one of the scripts beside this file: `before` prints what it keeps, `after` what it saw.
fn script(program: &str, file: &str, served: &Served, phase: &str, kept: Option<&Value>) -> Value {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bundle");
    let mut command = Command::new(program);
    command
        .arg(dir.join(file))
        .args([phase, &served.base, &served.token])
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python/src"),
        );
    if let Some(kept) = kept {
        command.arg(kept.to_string());
    }
    let output = command.output().expect("the client script runs");
    assert!(
        output.status.success(),
        "{file} {phase}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().expect("a line")).expect("JSON")
}

/// What every client must find after the move.
fn resumed(client: &str, kept: &Value, after: &Value) {
    assert_eq!(
        after["replayed"]["inputId"], kept["submitted"]["inputId"],
        "{client}: the retried command replays its stored answer"
    );
    assert_eq!(
        after["replayed"]["requestId"], kept["submitted"]["requestId"],
        "{client}"
    );
    let cursor = kept["cursor"]["sequence"].as_u64().unwrap();
    let sequences: Vec<u64> = after["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sequence| sequence.as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (cursor + 1..cursor + 1 + sequences.len() as u64).collect();
    assert_eq!(
        sequences, expected,
        "{client}: no gap and no repeat after its cursor"
    );
    assert!(
        sequences.len() > 2,
        "{client}: the new turn's events arrived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_javascript_and_python_clients_resume_across_a_move_to_postgresql() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let mut source = serve(&data);
    let rust = rust_before(&source).await;
    let js = script("node", "clients.js", &source, "before", None);
    let python = script("python3", "clients.py", &source, "before", None);
    let token = source.token.clone();
    let mut child = source.child.take().unwrap();
    signal(&child, "-TERM");
    assert!(wait_for_exit(&mut child).success());

    let url = agent_runtime_store::testing::postgres::fresh_database_url()
        .await
        .expect("a test database");
    let bundle = work.path().join("bundle");
    let (data_arg, bundle_arg) = (data.to_str().unwrap(), bundle.to_str().unwrap());
    succeeded(&[
        "export",
        "--quiet",
        "--data-dir",
        data_arg,
        "--out",
        bundle_arg,
    ]);
    let imported = succeeded(&[
        "import",
        "--quiet",
        "--bundle",
        bundle_arg,
        "--store",
        "postgres",
        "--database-url",
        &url,
    ]);
    assert!(imported.contains("verified"), "{imported}");

    let target = serve_with(
        &data,
        &[
            "--listen",
            "127.0.0.1:0",
            "--store",
            "postgres",
            "--database-url",
            &url,
        ],
    );
    assert_eq!(target.token, token, "the same development token");
    resumed("rust", &rust, &rust_after(&target, &rust).await);
    resumed(
        "javascript",
        &js,
        &script("node", "clients.js", &target, "after", Some(&js)),
    );
    resumed(
        "python",
        &python,
        &script("python3", "clients.py", &target, "after", Some(&python)),
    );
}
