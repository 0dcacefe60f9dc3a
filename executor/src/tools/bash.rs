//! `Bash`: runs a command line with `bash -c` in the working directory, inside the sandbox when
//! one is configured. Not bounded by the roots (agent.md): only by the sandbox and the rules.
//!
//! The child gets a clean environment (`PATH`, `HOME`, `LANG`, `TERM` only): the executor's own
//! environment may hold provider API keys, which a command must not be able to print. Output is
//! reported as `tool_progress` while the command runs (at most a few per second, and a heartbeat
//! every `progress_interval` of silence). The child is killed on timeout and when the call is
//! cancelled (the future is dropped: `kill_on_drop`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use super::output::{failure, success, truncate};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;
use crate::sandbox::Sandbox;

const MIN_PROGRESS_GAP: Duration = Duration::from_millis(250);

#[derive(Debug)]
pub struct BashTool {
    pub cwd: PathBuf,
    pub sandbox: Option<Sandbox>,
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    pub progress_interval: Duration,
    pub max_output_bytes: usize,
}

impl BashTool {
    fn command(&self, line: &str) -> tokio::process::Command {
        let mut command = match &self.sandbox {
            Some(sandbox) => sandbox.command(&self.cwd, line),
            None => {
                let mut command = tokio::process::Command::new("bash");
                command.arg("-c").arg(line).current_dir(&self.cwd);
                command
            }
        };
        command
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", &self.cwd)
            .env("LANG", "C.UTF-8")
            .env("TERM", "dumb")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }
}

#[async_trait]
impl Tool for BashTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "Bash".to_owned(),
            description: "Runs a shell command (bash -c) in the working directory and returns its exit code, stdout and stderr.".to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "command": { "type": "string", "minLength": 1 },
                    "timeout_ms": { "type": "integer", "minimum": 1 },
                    "description": { "type": "string" },
                },
                "required": ["command"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Execute
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        if !self.cwd.is_dir() {
            return Err(format!(
                "the working directory {} does not exist",
                self.cwd.display()
            ));
        }
        let command = input["command"].as_str().unwrap_or_default();
        if command.contains('\0') {
            return Err("the command contains a NUL byte".to_owned());
        }
        Ok(ToolCheck {
            subject: Some(command.to_owned()),
            affected_paths: vec![self.cwd.display().to_string()],
        })
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Run: {}", input["command"].as_str().unwrap_or_default())
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let line = input["command"].as_str().unwrap_or_default();
        let timeout = input["timeout_ms"]
            .as_u64()
            .map(Duration::from_millis)
            .unwrap_or(self.default_timeout)
            .min(self.max_timeout);
        let mut child = match self.command(line).spawn() {
            Ok(child) => child,
            Err(error) => return failure(format!("cannot start the command: {error}")),
        };
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return failure("cannot capture the command's output");
        };
        let started = Instant::now();
        let mut out = Collector::new(stdout, "stdout");
        let mut err = Collector::new(stderr, "stderr");
        let mut last_progress = started;
        let deadline = started + timeout;
        let mut timed_out = false;
        while !(out.done && err.done) {
            let heartbeat = last_progress + self.progress_interval;
            let chunk = tokio::select! {
                chunk = out.next(), if !out.done => chunk,
                chunk = err.next(), if !err.done => chunk,
                () = tokio::time::sleep_until(deadline) => { timed_out = true; break; }
                () = tokio::time::sleep_until(heartbeat) => {
                    let elapsed = started.elapsed().as_secs();
                    context.report(format!("running for {elapsed} s"), None);
                    last_progress = Instant::now();
                    continue;
                }
            };
            if let Some((stream, text)) = chunk
                && last_progress.elapsed() >= MIN_PROGRESS_GAP
            {
                context.report(
                    format!("{stream} output"),
                    Some(json!({ "stream": stream, "text": text })),
                );
                last_progress = Instant::now();
            }
        }
        let status = if timed_out {
            let _ = child.kill().await;
            None
        } else {
            child.wait().await.ok()
        };
        let (stdout, _) = truncate(&out.text(), self.max_output_bytes);
        let (stderr, _) = truncate(&err.text(), self.max_output_bytes);
        let exit_code = status.and_then(|s| s.code());
        let output = json!({ "exitCode": exit_code, "stdout": stdout, "stderr": stderr, "timedOut": timed_out });
        match (timed_out, exit_code) {
            (false, Some(0)) => success(output, "Exit code 0"),
            (true, _) => ToolOutcome {
                output,
                is_error: true,
                summary: format!("Timed out after {} ms", timeout.as_millis()),
            },
            (false, code) => ToolOutcome {
                output,
                is_error: true,
                summary: match code {
                    Some(code) => format!("Exit code {code}"),
                    None => "Killed by a signal".to_owned(),
                },
            },
        }
    }
}

/// Reads one output stream to the end, keeping everything (truncated at the end).
struct Collector<R> {
    reader: R,
    name: &'static str,
    bytes: Vec<u8>,
    done: bool,
}

impl<R: AsyncRead + Unpin> Collector<R> {
    fn new(reader: R, name: &'static str) -> Self {
        Self {
            reader,
            name,
            bytes: Vec::new(),
            done: false,
        }
    }

    /// The next chunk as text, `None` at the end.
    async fn next(&mut self) -> Option<(&'static str, String)> {
        let mut buffer = [0u8; 8192];
        match self.reader.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                self.done = true;
                None
            }
            Ok(read) => {
                // Keeps memory bounded for chatty commands; the kept head is what is shown.
                if self.bytes.len() < 8 * 1024 * 1024 {
                    self.bytes.extend_from_slice(&buffer[..read]);
                }
                Some((
                    self.name,
                    String::from_utf8_lossy(&buffer[..read]).into_owned(),
                ))
            }
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}
