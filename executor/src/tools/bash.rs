//! `Bash`: runs a command line with `bash -c` in the working directory, inside the sandbox when
//! one is configured. Not bounded by the roots (docs/agent.md §4): only by the sandbox and the
//! rules. A call may choose its working directory (`cwd`, resolved beneath the roots like a file
//! tool's path) and add variables (`env`; names that change how programs load or how bash starts
//! are refused).
//!
//! The child gets a clean environment (`PATH`, `HOME`, `LANG`, `TERM` and the call's `env`
//! only): the executor's own environment may hold provider API keys, which a command must not be
//! able to print. Output is
//! reported as `tool_progress` while the command runs (at most a few per second, and a heartbeat
//! every `progress_interval` of silence). The child is killed on timeout and when the call is
//! cancelled (the future is dropped: `kill_on_drop`).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use super::fs::FsCapability;
use super::output::{failed, failure, success, truncate};
use super::process_groups;
use super::shells::{ShellLimits, SpawnError, signal_name};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;
use crate::sandbox::{Sandbox, shell_command};
use crate::tools::text;

const MIN_PROGRESS_GAP: Duration = Duration::from_millis(250);

/// Variables a call may not set: they make programs load code (`LD_*`, `DYLD_*`), make bash run
/// code before the command (`BASH_ENV`, `ENV`, exported functions), or change how it parses.
const REFUSED_ENV: [&str; 10] = [
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "IFS",
    "GLOBIGNORE",
    "CDPATH",
    "PYTHONSTARTUP",
];
const REFUSED_ENV_PREFIXES: [&str; 3] = ["LD_", "DYLD_", "BASH_FUNC_"];

/// A call's `env` is refused unless every name is a plain variable name that is not refused and
/// no value holds a NUL byte.
fn check_env(env: &Value) -> Result<(), String> {
    let Some(map) = env.as_object() else {
        return Ok(());
    };
    for (name, value) in map {
        let plain = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !plain {
            return Err(format!("env: {name:?} is not a variable name"));
        }
        let upper = name.to_ascii_uppercase();
        if REFUSED_ENV.contains(&upper.as_str())
            || REFUSED_ENV_PREFIXES.iter().any(|p| upper.starts_with(p))
        {
            return Err(format!("env: setting {name} is not allowed"));
        }
        if value.as_str().is_some_and(|v| v.contains('\0')) {
            return Err(format!("env: the value of {name} contains a NUL byte"));
        }
    }
    Ok(())
}

/// What permission rules judge: the command line with the call's `env` written before it as
/// assignments, exactly as bash would see `NAME='value' command`. A variable can make an
/// allowed program run another (`GIT_CONFIG_*`, `GIT_SSH_COMMAND`, `PAGER`, `PATH`), so a line
/// with assignments is never allowed by a pattern rule (TOOL-24), while deny rules still see
/// its commands.
fn rule_subject(command: &str, env: &Value) -> String {
    let assignments: String = env
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, value)| {
            let value = value.as_str().unwrap_or_default().replace('\'', r"'\''");
            format!("{name}='{value}' ")
        })
        .collect();
    format!("{assignments}{command}")
}

#[derive(Debug)]
pub struct BashTool {
    pub cwd: PathBuf,
    /// The roots a call's `cwd` must lie beneath (`None`: a call cannot choose one).
    pub fs: Option<FsCapability>,
    pub sandbox: Option<Sandbox>,
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    pub progress_interval: Duration,
    pub max_output_bytes: usize,
    /// The caps and lifetime of background shells (`run_in_background`).
    pub background: Arc<ShellLimits>,
}

impl BashTool {
    /// The working directory of a call: its `cwd` beneath the roots, or the tool's own.
    fn working_directory(&self, input: &Value) -> Result<PathBuf, String> {
        let Some(requested) = input["cwd"].as_str() else {
            return Ok(self.cwd.clone());
        };
        let Some(fs) = &self.fs else {
            return Err("cwd needs a filesystem capability (tools.roots)".to_owned());
        };
        let resolved = fs.resolve("cwd", requested)?;
        if !resolved.is_dir() {
            return Err(format!("cwd {requested} is not a directory"));
        }
        Ok(resolved)
    }

    fn command(&self, cwd: &Path, line: &str, env: &Value) -> tokio::process::Command {
        let mut command = shell_command(self.sandbox.as_ref(), cwd, &self.cwd, line);
        command
            .env("TERM", "dumb")
            .envs(
                env.as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(name, value)| Some((name, value.as_str()?))),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

/// Kills a foreground command's process group when the call is dropped or times out (while its
/// leader is not reaped, so the group id is still its own).
struct KillGroupOnDrop(u32);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        super::shells::signal_group(self.0, rustix::process::Signal::KILL);
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
                    "timeout": { "type": "integer", "minimum": 1000, "maximum": 300000 },
                    "timeout_ms": { "type": "integer", "minimum": 1 },
                    "cwd": { "type": "string", "minLength": 1 },
                    "env": { "type": "object", "additionalProperties": { "type": "string" } },
                    "run_in_background": { "type": "boolean" },
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
        let command = text(input, "command");
        if command.contains('\0') {
            return Err("the command contains a NUL byte".to_owned());
        }
        check_env(&input["env"])?;
        let cwd = self.working_directory(input)?;
        Ok(ToolCheck {
            subject: Some(rule_subject(command, &input["env"])),
            affected_paths: vec![cwd.display().to_string()],
        })
    }

    fn approval_title(&self, input: &Value) -> String {
        // The approver sees the variables too: they can change what the command runs.
        format!(
            "Run: {}",
            rule_subject(text(input, "command"), &input["env"])
        )
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let line = text(&input, "command");
        let timeout = input["timeout"]
            .as_u64()
            .or(input["timeout_ms"].as_u64())
            .map(Duration::from_millis)
            .unwrap_or(self.default_timeout)
            .min(self.max_timeout);
        // Checked again here: a tool is safe even when called without the pipeline.
        if let Err(error) = check_env(&input["env"]) {
            return failure(error);
        }
        let cwd = match self.working_directory(&input) {
            Ok(cwd) => cwd,
            Err(error) => return failure(error),
        };
        let command = self.command(&cwd, line, &input["env"]);
        if input["run_in_background"] == true {
            return self.start_background(command, line, &context);
        }
        // Its own process group, killed whole when the call ends or is dropped (an abort, a
        // lost lease): killing `bash` alone would leave its children running. It dies with the
        // executor too (`process_groups`).
        let (mut child, recorded) = match process_groups::spawn(command, None) {
            Ok(spawned) => spawned,
            Err(error) => return failure(format!("cannot start the command: {error}")),
        };
        let group = KillGroupOnDrop(recorded.pgid);
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return failure("cannot capture the command's output");
        };
        let started = Instant::now();
        let mut out = Collector::new(stdout, "stdout");
        let mut err = Collector::new(stderr, "stderr");
        let timed_out = !self
            .collect(&mut out, &mut err, started, started + timeout, &context)
            .await;
        let status = if timed_out {
            drop(group);
            let _ = child.kill().await;
            None
        } else {
            let status = child.wait().await.ok();
            // Reaped: its group id may be reused now, so it is never signalled again.
            std::mem::forget(group);
            status
        };
        recorded.release();
        let ran = Ran {
            stdout: out.text(),
            stderr: err.text(),
            status,
            timed_out,
            elapsed: started.elapsed(),
        };
        self.answer(ran, timeout)
    }
}

/// How a foreground command ended.
struct Ran {
    stdout: String,
    stderr: String,
    /// `None` when it timed out and was killed, or could not be waited for.
    status: Option<std::process::ExitStatus>,
    timed_out: bool,
    elapsed: Duration,
}

impl BashTool {
    /// Reads both outputs to their end, reporting progress; `false` when `deadline` came first.
    async fn collect<O, E>(
        &self,
        out: &mut Collector<O>,
        err: &mut Collector<E>,
        started: Instant,
        deadline: Instant,
        context: &ToolContext,
    ) -> bool
    where
        O: AsyncRead + Unpin,
        E: AsyncRead + Unpin,
    {
        let mut last_progress = started;
        while !(out.done && err.done) {
            let heartbeat = last_progress + self.progress_interval;
            let chunk = tokio::select! {
                chunk = out.next(), if !out.done => chunk,
                chunk = err.next(), if !err.done => chunk,
                () = tokio::time::sleep_until(deadline) => return false,
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
        true
    }

    /// The tool's answer for a foreground command.
    fn answer(&self, ran: Ran, timeout: Duration) -> ToolOutcome {
        let (stdout, stdout_cut) = truncate(&ran.stdout, self.max_output_bytes);
        let (stderr, stderr_cut) = truncate(&ran.stderr, self.max_output_bytes);
        let exit_code = ran.status.and_then(|s| s.code());
        let signal = match ran.timed_out {
            true => Some("SIGKILL".to_owned()),
            false => ran.status.and_then(|s| s.signal()).map(signal_name),
        };
        let mut output = json!({
            "stdout": stdout,
            "stderr": stderr,
            "execution_time": ran.elapsed.as_millis() as u64,
            "exit_code": exit_code,
            "signal": signal,
        });
        if stdout_cut || stderr_cut {
            output["truncation_info"] = json!({
                "stdout_truncated": stdout_cut,
                "stderr_truncated": stderr_cut,
                "limit_bytes": self.max_output_bytes,
            });
        }
        match (ran.timed_out, exit_code) {
            (false, Some(0)) => success(output, "Exit code 0"),
            (true, _) => {
                let message = format!("Command execution timed out ({} ms)", timeout.as_millis());
                output["error"] = Value::from(message.clone());
                failed(output, message)
            }
            (false, code) => failed(
                output,
                match code {
                    Some(code) => format!("Exit code {code}"),
                    None => "Killed by a signal".to_owned(),
                },
            ),
        }
    }
}

impl BashTool {
    /// Starts the command as a background shell of the session and returns at once.
    fn start_background(
        &self,
        command: tokio::process::Command,
        line: &str,
        context: &ToolContext,
    ) -> ToolOutcome {
        let shell = match context.shells.spawn(&self.background, command, line) {
            Ok(shell) => shell,
            Err(SpawnError::Quota(error)) => return quota_exceeded(error),
            Err(SpawnError::Start(error)) => return failure(error),
        };
        let message = format!(
            "Command running in the background with ID: {id}. Read its output with \
             TaskOutput(task_id: \"{id}\"); stop it with KillShell(shell_id: \"{id}\").",
            id = shell.id
        );
        success(
            json!({
                "command": line,
                "background": true,
                "pid": shell.pid,
                "bash_id": shell.id,
                "shell_id": shell.id,
                "message": message,
            }),
            format!("Started in the background: {}", shell.id),
        )
    }
}

/// A tool result for a call over a session's or tenant's cap: an error the model reads, with
/// the code operators look for (docs/agent.md §6.15), never an executor failure.
fn quota_exceeded(message: String) -> ToolOutcome {
    let mut outcome = failure(message);
    outcome.output["code"] = Value::from("TOOL_QUOTA_EXCEEDED");
    outcome
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
