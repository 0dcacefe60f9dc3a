//! The web console in a real headless Chromium, against the real `agent-runtime serve` binary.
//!
//! The browser is driven by `tests/browser/console.mjs` (playwright-core, installed by
//! `npm ci --prefix tests/browser`; `scripts/test.sh` does that and installs Debian's `chromium`).
//! Missing node, chromium or node_modules fail this test with what to run: it never skips.
//!
//! The script signs in, creates a session, chats, approves a tool request, reloads mid-stream and
//! checks the transcript, then asks this harness on its stdout to stop and restart the server
//! (same port, same data directory) to see the console reconnect and resume; it answers on the
//! script's stdin. The final page is kept as `target/console-screenshot.png` (and a phone-sized
//! `console-screenshot-phone.png`) for CI.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::*;

/// The whole script, server restart included, takes well under a minute; this only stops a hung
/// browser from hanging the suite.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(240);

/// `demo:slow` streams 40 deltas this far apart: ~6 s, time enough to reload in the middle.
/// Retention of 200 events lets the script push a session's start out of the log.
const SERVER_CONFIG: &str = "\
[server]
max_events_per_session = 200

[executor]
demo_slow_delta_interval_ms = 150
[tools]
builtin_tools = true
allowed_tools = [\"AskUserQuestion\", \"ExitPlanMode\", \"Task\", \"TodoWrite\"]
";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ is inside the workspace")
        .to_path_buf()
}

/// `CARGO_TARGET_DIR` (relative to the workspace) or the workspace's `target/`.
fn target_dir() -> PathBuf {
    let root = workspace_root();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// Fails with a remedy when something the browser test needs is missing.
fn require_tools(browser_dir: &Path, chromium: &Path) {
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|output| output.status.success()),
        "node is not installed: the console browser test needs Node.js 20+ (apt-get install nodejs npm)"
    );
    assert!(
        chromium.exists(),
        "{} does not exist: the console browser test needs Debian's chromium (apt-get install chromium)",
        chromium.display()
    );
    assert!(
        browser_dir.join("node_modules/playwright-core").exists(),
        "{}/node_modules is missing: run `npm ci --prefix tests/browser` (scripts/test.sh does)",
        browser_dir.display()
    );
}

/// What the script printed, line by line, as it comes.
enum Output {
    Line(String),
    End,
}

fn read_lines(stream: impl Read + Send + 'static, sender: mpsc::Sender<Output>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if sender.send(Output::Line(line)).is_err() {
                return;
            }
        }
        let _ = sender.send(Output::End);
    });
}

fn answer(stdin: &mut ChildStdin, text: &str) {
    writeln!(stdin, "{text}").expect("the script reads its stdin");
    stdin.flush().unwrap();
}

fn port_of(url: &str) -> u16 {
    let authority = url.trim_end_matches('/').rsplit('/').next().unwrap();
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_console_works_in_a_real_browser_through_a_reload_and_a_server_restart() {
    let browser_dir = workspace_root().join("tests/browser");
    let chromium = PathBuf::from(std::env::var("CHROMIUM").unwrap_or("/usr/bin/chromium".into()));
    require_tools(&browser_dir, &chromium);

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, SERVER_CONFIG).unwrap();
    let config = config.to_str().unwrap().to_owned();
    let data_dir = dir.path().join("data");
    let mut served = Some(serve_with(
        &data_dir,
        &["--listen", "127.0.0.1:0", "--config", &config],
    ));
    let first = served.as_ref().unwrap();
    let console_url = first.console.clone().expect("serve prints the console URL");
    assert_eq!(console_url, first.base.replace("/v1/agent", "/"));
    let token = first.token.clone();
    let listen = format!("127.0.0.1:{}", port_of(&console_url));

    let screenshot = target_dir().join("console-screenshot.png");
    std::fs::create_dir_all(screenshot.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&screenshot);
    let mut script = Command::new("node")
        .arg(browser_dir.join("console.mjs"))
        .current_dir(&browser_dir)
        .env("CONSOLE_URL", &console_url)
        .env("CONSOLE_TOKEN", &token)
        .env("CONSOLE_SCREENSHOT", &screenshot)
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node starts");
    let mut stdin = script.stdin.take().unwrap();
    let (sender, lines) = mpsc::channel();
    read_lines(script.stdout.take().unwrap(), sender);
    let (error_sender, error_lines) = mpsc::channel();
    read_lines(script.stderr.take().unwrap(), error_sender);

    let deadline = Instant::now() + SCRIPT_DEADLINE;
    let mut transcript = String::new();
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let line = match lines.recv_timeout(remaining) {
            Ok(Output::Line(line)) => line,
            Ok(Output::End) => break,
            Err(_) => {
                kill(&mut script);
                panic!("the browser script did not finish in {SCRIPT_DEADLINE:?}:\n{transcript}");
            }
        };
        println!("{line}");
        transcript.push_str(&line);
        transcript.push('\n');
        match line.trim() {
            "@@ stop-server" => {
                stop(served.take().expect("the server is running"));
                answer(&mut stdin, "stopped");
            }
            "@@ start-server" => {
                let again = serve_with(&data_dir, &["--listen", &listen, "--config", &config]);
                assert_eq!(
                    again.token, token,
                    "the development token survives a restart"
                );
                served = Some(again);
                answer(&mut stdin, "started");
            }
            _ => {}
        }
    }
    let status = script.wait().unwrap();
    let mut errors = Vec::new();
    while let Ok(Output::Line(line)) = error_lines.recv_timeout(Duration::from_secs(5)) {
        errors.push(line);
    }
    if let Some(server) = served.take() {
        stop(server);
    }
    assert!(
        status.success(),
        "the browser script failed ({status}):\n{transcript}\n{}",
        errors.join("\n")
    );
    assert!(
        transcript.contains("console browser test: all steps passed"),
        "{transcript}"
    );
    let size = std::fs::metadata(&screenshot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 0,
        "the screenshot {} was written",
        screenshot.display()
    );
}
