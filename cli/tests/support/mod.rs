//! Runs the real `agent-runtime` binary and talks to it over HTTP.

#![allow(dead_code)]

pub mod cluster;
pub mod fake_provider;
pub mod otlp;
pub mod webhooks;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub struct Served {
    pub child: Option<Child>,
    pub base: String,
    pub token: String,
    /// The console URL `serve` printed, if it printed one.
    pub console: Option<String>,
}

/// A server the test started is stopped when the test ends, however it ends: a panicking test
/// leaves no `serve` behind.
impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Served {
    /// A server this test did not start (e.g. a cluster gateway).
    pub fn remote(base: &str, token: &str) -> Served {
        Served {
            child: None,
            base: base.to_owned(),
            token: token.to_owned(),
            console: None,
        }
    }
}

/// Starts the binary on a free port and reads the URL and token it prints.
pub fn serve(data_dir: &Path) -> Served {
    serve_with(data_dir, &["--listen", "127.0.0.1:0"])
}

/// [`serve`] with more arguments (they must include `--listen`).
pub fn serve_with(data_dir: &Path, args: &[&str]) -> Served {
    serve_with_env(data_dir, args, &[])
}

/// [`serve_with`], with more environment variables for the process.
pub fn serve_with_env(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .arg("serve")
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env("AGENT_RUNTIME_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let (mut url, mut token, mut console) = (None, None, None);
    while url.is_none() || token.is_none() {
        let line = lines
            .next()
            .expect("the server prints its address and token")
            .unwrap();
        if let Some(rest) = line.strip_prefix("agent-runtime is serving on ") {
            url = Some(rest.trim().to_owned());
        }
        if let Some(rest) = line.trim_start().strip_prefix("token:") {
            token = Some(rest.trim().to_owned());
        }
        if let Some(rest) = line.trim_start().strip_prefix("console:") {
            console = rest.split_whitespace().next().map(str::to_owned);
        }
    }
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Served {
        child: Some(child),
        base: format!("{}/v1/agent", url.unwrap()),
        token: token.unwrap(),
        console,
    }
}

/// Sends a command with the given id and extra headers; returns the HTTP status and the body.
pub async fn post_command(
    served: &Served,
    command_id: &str,
    kind: &str,
    data: Value,
    headers: &[(&str, String)],
) -> (u16, Value) {
    let body = json!({ "protocolVersion": 1, "commandId": command_id, "type": kind, "data": data });
    let mut request = agent_runtime_executor::provider::client_builder()
        .build()
        .unwrap()
        .post(format!("{}/commands", served.base))
        .header("authorization", format!("Bearer {}", served.token));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Sends a command that must succeed; returns its `data`.
pub async fn command(served: &Served, kind: &str, data: Value) -> Value {
    let id = agent_runtime::ids::nanoid();
    let (_, value) = post_command(served, &id, kind, data, &[]).await;
    assert_eq!(value["ok"], true, "{kind}: {value}");
    value["data"].clone()
}

/// Reads the session's events until `until` matches, or fails after a deadline.
pub async fn events_until(
    served: &Served,
    session: &str,
    until: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    events_after(served, session, 0, until).await
}

/// Like [`events_until`], resuming after `after` (sent as `Last-Event-ID`).
pub async fn events_after(
    served: &Served,
    session: &str,
    after: u64,
    until: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let mut stream = EventStream::open(served, session, after).await;
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("events before the deadline");
        let Some(event) = next else {
            return events;
        };
        let done = until(&event);
        events.push(event);
        if done {
            return events;
        }
    }
}

/// One SSE connection to a session's events, read one event at a time.
pub struct EventStream {
    response: reqwest::Response,
    buffer: String,
}

impl EventStream {
    /// Connects, resuming after `after` (sent as `Last-Event-ID`).
    pub async fn open(served: &Served, session: &str, after: u64) -> EventStream {
        let response = agent_runtime_executor::provider::client_builder()
            .build()
            .unwrap()
            .get(format!("{}/sessions/{session}/events", served.base))
            .header("last-event-id", after.to_string())
            .header("authorization", format!("Bearer {}", served.token))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        EventStream {
            response,
            buffer: String::new(),
        }
    }

    /// The next event; `None` once the stream ended (the server closed it, or the connection
    /// broke).
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                // Frames without data (heartbeat comments) are skipped.
                if let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return Some(serde_json::from_str(data).unwrap());
                }
            }
            match self.response.chunk().await {
                Ok(Some(bytes)) => self.buffer.push_str(std::str::from_utf8(&bytes).unwrap()),
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

/// Whether the events are sequences 1, 2, 3, … in order: none lost, none twice.
pub fn contiguous(events: &[Value]) -> bool {
    events
        .iter()
        .enumerate()
        .all(|(index, event)| event["sequence"].as_u64() == Some(index as u64 + 1))
}

/// Whether `event` is the `result` that ends request `request_id`.
/// Asserts that request `request_id` ended because its executor was lost: among `events`, its
/// `error` says `EXECUTOR_LOST`. Returns that event.
pub fn assert_lost<'a>(events: &'a [Value], request_id: &str) -> &'a Value {
    let lost = events
        .iter()
        .find(|e| stream_type(e) == Some("error") && e["requestId"] == request_id)
        .expect("the interrupted request reports why it ended");
    assert_eq!(lost["data"]["code"], "EXECUTOR_LOST", "{lost}");
    lost
}

pub fn ends_request(event: &Value, request_id: &str) -> bool {
    stream_type(event) == Some("result") && event["requestId"] == request_id
}

pub fn stream_type(event: &Value) -> Option<&str> {
    event["data"]["type"]
        .as_str()
        .filter(|_| event["type"] == "session.stream")
}

pub fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn stop(mut served: Served) {
    let Some(mut child) = served.child.take() else {
        return;
    };
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    wait_for_exit(&mut child);
}

/// Runs the README's block after `marker` with bash (`-euo pipefail`), `BASE` and `TOKEN` set;
/// it must succeed. Returns what it printed.
pub fn run_readme_block(marker: &str, base: &str, token: &str) -> String {
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &marked_block(marker)])
        .env("BASE", base)
        .env("TOKEN", token)
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the block failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The first ```sh block of the README after `marker`.
pub fn marked_block(marker: &str) -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let after_marker = &readme[readme.find(marker).expect("the README has the marker")..];
    let start = after_marker
        .find("```sh\n")
        .expect("a sh block follows the marker")
        + "```sh\n".len();
    let body = &after_marker[start..];
    body[..body.find("```").expect("the block ends")].to_owned()
}

/// Runs the README's curl walkthrough as written against `base` with `token`, checks what it
/// shows, and returns the session it created.
pub fn run_readme_walkthrough(base: &str, token: &str) -> String {
    let stdout = run_readme_block("<!-- readme-example", base, token);
    for shown in [
        "\"status\":\"started\"",
        "\"loaded\":true",
        "\"status\":\"closed\"",
        "event: session.closed",
        "[demo] You said: hello",
    ] {
        assert!(stdout.contains(shown), "{shown} in {stdout}");
    }
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("session: "))
        .expect("the block prints its session")
        .to_owned()
}
