//! TOOL-27 (docs/reliability.md): without the sandbox, the Bash commands of an executor that is
//! killed (`kill -9`) do not run on. The test re-runs its own binary as the executor (the
//! `tool_27_child_executor` test, which does nothing unless the parent sets `TOOL27_DIR`),
//! kills it, and looks at what is left.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Harness, ScriptedModel, tool_turn};
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::permissions::PermissionMode;
use agent_runtime_executor::tools::ToolsConfig;
use serde_json::json;

const CHILD_TEST: &str = "tools::orphans::tool_27_child_executor";

fn tools_config(dir: &Path) -> ToolsConfig {
    ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(vec!["Bash".into(), "TaskOutput".into(), "KillShell".into()]),
        cwd: Some(dir.to_path_buf()),
        process_record: Some(dir.join("process-groups")),
        ..ToolsConfig::default()
    }
}

/// The processes whose environment holds `TOOL27_MARK=<mark>` and that still run, but for the
/// executor itself (`except`).
fn marked(mark: &str, except: u32) -> Vec<u32> {
    let needle = format!("TOOL27_MARK={mark}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
        })
        .filter(|pid| *pid != except && running(*pid))
        .collect()
}

/// Whether `pid` runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// The group ids the record file holds.
fn recorded_groups(record: &Path) -> Vec<u32> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2)?.parse().ok())
        .collect()
}

fn wait_until(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The executor the parent test kills: a session runs a background Bash command and then a
/// foreground one, each a shell with a child of its own; it says READY when all of them run.
#[tokio::test]
async fn tool_27_child_executor() {
    let (Ok(dir), Ok(mark)) = (std::env::var("TOOL27_DIR"), std::env::var("TOOL27_MARK")) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let tools = tools_config(&dir).build(Vec::new()).await.unwrap();
    let env = json!({ "TOOL27_MARK": mark });
    let script = ScriptedModel::new([
        tool_turn(
            "",
            &[(
                "Bash",
                json!({ "command": "sleep 1001 & sleep 1002; wait", "run_in_background": true, "env": env }),
            )],
        ),
        tool_turn(
            "",
            &[(
                "Bash",
                json!({ "command": "sleep 1003 & sleep 1004; wait", "env": env }),
            )],
        ),
    ]);
    let mut config = ExecutorConfig::default();
    config.permissions.mode = PermissionMode::Yolo;
    let harness = Harness::new(script, tools, config);
    let session = harness.create().await;
    harness.submit(&session, "go").await;
    let record = dir.join("process-groups");
    let start = Instant::now();
    // Two shells and their four sleeps.
    while marked(&mark, std::process::id()).len() < 6 || recorded_groups(&record).len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the commands start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("READY");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

/// `kill -9` of the executor: both shells (the group leaders) die at once; what they started
/// is killed when an executor starts again on the same record. A recorded group whose leader's
/// pid now names another process (another start time) is left alone.
#[test]
fn tool_27_bash_commands_die_with_an_unsandboxed_executor() {
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("{}-{}", std::process::id(), agent_runtime::ids::nanoid());
    let mut child = Reaped(
        Command::new(std::env::current_exe().unwrap())
            .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env("TOOL27_DIR", dir.path())
            .env("TOOL27_MARK", &mark)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let ready = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("READY"));
    assert!(ready, "the child executor started its commands");
    let record = dir.path().join("process-groups");
    let leaders = recorded_groups(&record);
    assert_eq!(leaders.len(), 2, "{leaders:?}");
    let started = marked(&mark, child.0.id());
    assert_eq!(started.len(), 6, "{started:?}");

    // Not ours: a process whose group is recorded with another leader start time.
    let stranger = Reaped(
        Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", stranger.0.id())).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let (session, start) = (fields[3], fields[19].parse::<u64>().unwrap());

    Command::new("kill")
        .args(["-KILL", &child.0.id().to_string()])
        .status()
        .unwrap();
    child.0.wait().unwrap();
    wait_until(
        "both shells die with their executor",
        Duration::from_secs(30),
        || leaders.iter().all(|pid| !running(*pid)),
    );

    let mut text = std::fs::read_to_string(&record).unwrap();
    text.push_str(&format!(
        "{} {session} {} {} -\n",
        boot.trim(),
        stranger.0.id(),
        start + 1
    ));
    std::fs::write(&record, text).unwrap();
    // An executor starts again on the same record.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(tools_config(dir.path()).build(Vec::new()))
        .unwrap();
    wait_until(
        "what the shells started is killed at the next start",
        Duration::from_secs(30),
        || marked(&mark, child.0.id()).is_empty(),
    );
    assert!(
        running(stranger.0.id()),
        "a process that is not verifiably ours is never killed"
    );
    let left = recorded_groups(&record);
    assert!(
        leaders
            .iter()
            .chain([&stranger.0.id()])
            .all(|pid| !left.contains(pid)),
        "the swept groups left the record: {left:?}"
    );
}

/// A child process killed and reaped when the test ends, passed or failed.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
