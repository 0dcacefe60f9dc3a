//! Secrets never reach logs, metrics, traces or errors.

mod catalogue;
mod public_answers;
mod telemetry;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The `agent-runtime serve` binary under test, its stdout and stderr captured.
pub(super) struct Server {
    child: Child,
    pub(super) url: String,
    logs: std::thread::JoinHandle<String>,
    stdout: std::thread::JoinHandle<String>,
}

impl Server {
    pub(super) fn start(config: &Path, cwd: &Path, envs: &[(&str, String)]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-runtime"));
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
                "--config",
            ])
            .arg(config)
            .current_dir(cwd)
            .env("AGENT_RUNTIME_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Only what the test sets: no proxy from the environment of the test runner.
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "AGENT_RUNTIME_CONFIG",
        ] {
            command.env_remove(name);
        }
        for (name, value) in envs {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("the binary starts");
        let mut stderr = child.stderr.take().unwrap();
        let logs = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut printed = String::new();
        let url = loop {
            let line = lines
                .next()
                .expect("the server prints its address")
                .unwrap();
            printed.push_str(&line);
            printed.push('\n');
            if let Some(rest) = line.strip_prefix("agent-runtime is serving on ") {
                break rest.trim().to_owned();
            }
        };
        let stdout = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                printed.push_str(&line);
                printed.push('\n');
            }
            printed
        });
        Server {
            child,
            url,
            logs,
            stdout,
        }
    }

    /// SIGTERM (a graceful stop flushes spans, logs and the audit queue); returns (logs, stdout).
    pub(super) fn stop(mut self) -> (String, String) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let stopped = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                stopped.elapsed() < Duration::from_secs(30),
                "the server stops"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        (self.logs.join().unwrap(), self.stdout.join().unwrap())
    }
}

/// An HTTP client of the server under test that keeps the body of every answer that was not a
/// success (they are scanned for secrets too).
pub(super) struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    /// Sent with every command (a `traceparent`, say).
    headers: Vec<(&'static str, String)>,
    /// Bodies of every answer that was not a success.
    pub(super) error_bodies: Vec<String>,
}

impl Client {
    pub(super) fn new(url: &str, token: &str) -> Client {
        Client {
            http: agent_runtime_executor::provider::client_builder()
                .build()
                .unwrap(),
            base: format!("{url}/v1/agent"),
            token: token.to_owned(),
            headers: Vec::new(),
            error_bodies: Vec::new(),
        }
    }

    /// Sends `header` with every command from now on.
    pub(super) fn with_header(mut self, name: &'static str, value: String) -> Client {
        self.headers.push((name, value));
        self
    }

    pub(super) async fn post(&mut self, token: &str, body: Value) -> (u16, Value) {
        let mut request = self
            .http
            .post(format!("{}/commands", self.base))
            .header("authorization", format!("Bearer {token}"));
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        let response = request.json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status != 200 || value["ok"] != true {
            self.error_bodies.push(text);
        }
        (status, value)
    }

    pub(super) async fn command(&mut self, kind: &str, data: Value) -> (u16, Value) {
        let body = json!({ "protocolVersion": 1, "commandId": agent_runtime::ids::nanoid(), "type": kind, "data": data });
        let token = self.token.clone();
        self.post(&token, body).await
    }

    pub(super) async fn ok(&mut self, kind: &str, data: Value) -> Value {
        let (status, body) = self.command(kind, data).await;
        assert_eq!(status, 200, "{kind}: {body}");
        assert_eq!(body["ok"], true, "{kind}: {body}");
        body["data"].clone()
    }

    /// The raw event stream of a session up to its `results`-th `result`.
    pub(super) async fn events(&mut self, session: &str, results: usize) -> String {
        let mut response = self
            .http
            .get(format!("{}/sessions/{session}/events", self.base))
            .header("authorization", format!("Bearer {}", self.token))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let mut text = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while text.matches("\"type\":\"result\"").count() < results {
            let chunk = tokio::time::timeout_at(deadline, response.chunk())
                .await
                .unwrap_or_else(|_| panic!("events before the deadline: {text}"))
                .unwrap()
                .expect("the stream stays open");
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        text
    }

    /// `GET url`, with `token` as a bearer when given: (status, body).
    pub(super) async fn get(&mut self, url: &str, token: Option<&str>) -> (u16, String) {
        let mut request = self.http.get(url);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        if status >= 400 {
            self.error_bodies.push(text.clone());
        }
        (status, text)
    }
}
