//! `agent-runtime chat` driven like a person would: on a pseudo-terminal, against the real
//! `agent-runtime serve` binary.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;
use rustix::fs::OFlags;
use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
use serde_json::{Value, json};

/// `agent-runtime chat` running on a pseudo-terminal: what it printed so far, and its keyboard.
struct Terminal {
    child: Child,
    keyboard: File,
    screen: Arc<Mutex<Vec<u8>>>,
    /// Where the next expectation starts looking.
    cursor: usize,
}

impl Terminal {
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Terminal {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .expect("a pseudo-terminal");
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(OFlags::NOCTTY.bits() as i32)
            .open(name.to_str().unwrap())
            .unwrap();

        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-runtime"));
        command
            .arg("chat")
            .args(args)
            .env_remove("AGENT_RUNTIME_TOKEN")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().expect("chat starts");
        // Only the child holds the terminal side now, so reads end when it exits.
        drop(command);

        let master = File::from(master);
        let keyboard = master.try_clone().unwrap();
        let screen = Arc::new(Mutex::new(Vec::new()));
        let filling = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut master = master;
            let mut buffer = [0u8; 4096];
            // EIO once the child has exited and closed the terminal.
            while let Ok(read) = master.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                filling.lock().unwrap().extend_from_slice(&buffer[..read]);
            }
        });
        Terminal {
            child,
            keyboard,
            screen,
            cursor: 0,
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits (20 s at most) until `text` appears after the previous expectation; returns the
    /// screen from there to the end of `text`.
    fn expect(&mut self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if let Some(found) = screen[self.cursor..].find(text) {
                let end = self.cursor + found + text.len();
                let seen = screen[self.cursor..end].to_owned();
                self.cursor = end;
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "{text:?} did not appear; the terminal shows:\n{}",
                &screen[self.cursor..]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn type_line(&mut self, line: &str) {
        self.keyboard.write_all(line.as_bytes()).unwrap();
        self.keyboard.write_all(b"\n").unwrap();
        self.keyboard.flush().unwrap();
    }

    fn interrupt(&self) {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn still_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn exit_status(&mut self) -> std::process::ExitStatus {
        wait_for_exit(&mut self.child)
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The session id `chat` prints on its first line.
fn session_id(first_line: &str) -> String {
    first_line
        .trim()
        .strip_prefix("session ")
        .expect("the first line names the session")
        .trim()
        .to_owned()
}

#[tokio::test]
async fn chat_streams_answers_asks_for_approval_aborts_on_ctrl_c_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path());
    let server_url = served.base.trim_end_matches("/v1/agent").to_owned();

    // First run: the token from the environment, the API path added to a bare server URL.
    let mut chat = Terminal::spawn(
        &["--url", &server_url],
        &[("AGENT_RUNTIME_TOKEN", served.token.as_str())],
    );
    let session = session_id(&chat.expect("\n"));
    chat.expect("> ");

    chat.type_line("hello from the terminal");
    chat.expect("[demo] You said: hello from the terminal");
    chat.expect("[done]");
    chat.expect("> ");

    chat.type_line("this needs approval");
    chat.expect("[tool] demo_approval");
    chat.expect("Allow demo_approval? [y]es / [n]o / [a]lways for this session");
    chat.type_line("y");
    chat.expect("The demo tool was approved");
    chat.expect("[done]");

    // Ctrl-C while a request runs aborts the request, not the program.
    chat.type_line("demo:slow");
    chat.expect("slow-1 ");
    chat.interrupt();
    chat.expect("[aborting the request]");
    chat.expect("[request failed]");
    assert!(chat.still_running(), "Ctrl-C did not end chat");
    chat.expect("> ");

    chat.type_line("/quit");
    chat.expect(&format!(
        "Resume this session with: agent-runtime chat --session {session}"
    ));
    assert!(chat.exit_status().success());
    assert!(
        !chat.screen().contains(&served.token),
        "the token is never shown"
    );

    // /quit left the session open: a second run resumes it and only shows what is new.
    let mut resumed = Terminal::spawn(
        &[
            "--url",
            &served.base,
            "--token",
            &served.token,
            "--session",
            &session,
        ],
        &[],
    );
    resumed.expect(&format!("resumed session {session}"));
    resumed.expect("> ");
    resumed.type_line("hello again");
    resumed.expect("[demo] You said: hello again");
    resumed.expect("[done]");
    let screen = resumed.screen();
    assert!(
        !screen.contains("You said: hello from the terminal"),
        "{screen}"
    );

    resumed.type_line("/close");
    resumed.expect("[session closed]");
    assert!(resumed.exit_status().success());
    let read = command(&served, "session.read", json!({ "sessionId": session })).await;
    assert_eq!(read["session"]["status"], "closed");
    stop(served);
}

/// A question from the agent (`AskUserQuestion`) shows its numbered options; option numbers
/// per question answer it, and the agent gets the chosen labels. A plan (`ExitPlanMode`) is
/// shown whole and approved with `y` or rejected with typed feedback.
#[tokio::test]
async fn chat_answers_questions_and_plans_from_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("chat.toml");
    std::fs::write(
        &config,
        "[tools]\nbuiltin_tools = true\nallowed_tools = [\"AskUserQuestion\", \"ExitPlanMode\"]\n",
    )
    .unwrap();
    let served = serve_with(
        &dir.path().join("data"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let mut chat = Terminal::spawn(&["--url", &served.base, "--token", &served.token], &[]);
    chat.expect("> ");
    // The same questions as the console and chat tests (one fixture for all three).
    let questions: Value = serde_json::from_str(include_str!(
        "../../tests/fixtures/tools/ask_user_question.json"
    ))
    .unwrap();
    chat.type_line(&format!("demo:tool AskUserQuestion {questions}"));
    chat.expect("[question] Question from the agent");
    chat.expect("[question] Store: Which store?");
    chat.expect("  1) PostgreSQL - shared");
    chat.expect("[question] Extras: Which extras? (one or more)");
    chat.expect("  2) Audit");
    chat.expect("or /skip: ");
    chat.type_line("2; 1,2");
    chat.expect("Store: JSONL");
    chat.expect("Extras: Metrics, Audit");
    chat.expect("[done]");

    chat.type_line(&format!("demo:tool AskUserQuestion {questions}"));
    chat.expect("or /skip: ");
    chat.type_line("/skip");
    chat.expect("User cancelled the question prompt");
    chat.expect("[done]");

    // A plan is shown line by line; typed feedback rejects it and ends the request.
    let plan = json!({ "plan": "1. Add the table\n2. Test it" });
    chat.type_line(&format!("demo:tool ExitPlanMode {plan}"));
    chat.expect("[plan] Approve the plan: The agent presents its plan for your approval.");
    chat.expect("  2. Test it");
    chat.expect("type feedback to reject it: ");
    chat.type_line("Test it first.");
    chat.expect("[done]");
    chat.type_line(&format!("demo:tool ExitPlanMode {plan}"));
    chat.expect("type feedback to reject it: ");
    chat.type_line("y");
    chat.expect("Plan approved by user");
    chat.expect("[done]");
    chat.type_line("/quit");
    assert!(chat.exit_status().success());
    stop(served);
}

#[tokio::test]
async fn chat_without_a_token_explains_where_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .args(["chat", "--url", "http://127.0.0.1:9"])
        .env_remove("AGENT_RUNTIME_TOKEN")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no token"), "{stderr}");
    assert!(stderr.contains("AGENT_RUNTIME_TOKEN"), "{stderr}");
}
