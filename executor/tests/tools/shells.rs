//! Background shells: `Bash` with `run_in_background`, `TaskOutput` and `KillShell`
//! (docs/agent.md §6.4), plain and inside the bubblewrap sandbox (scripts/test.sh installs `bwrap`;
//! these fail, not skip, without it).

use std::sync::Arc;
use std::time::Duration;

use crate::support::error_text;
use agent_runtime_executor::sandbox::SandboxConfig;
use agent_runtime_executor::tools::{
    SessionShells, ToolContext, ToolOutcome, ToolRegistry, ToolsConfig,
};
use serde_json::{Value, json};

async fn tools(config: ToolsConfig) -> ToolRegistry {
    ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(vec!["Bash".into(), "TaskOutput".into(), "KillShell".into()]),
        ..config
    }
    .build(Vec::new())
    .await
    .expect("tools build")
}

fn in_dir(dir: &tempfile::TempDir) -> ToolsConfig {
    ToolsConfig {
        cwd: Some(dir.path().to_path_buf()),
        ..ToolsConfig::default()
    }
}

/// Runs `name` in the session whose shells are `shells`.
async fn call(
    tools: &ToolRegistry,
    shells: &Arc<SessionShells>,
    name: &str,
    input: Value,
) -> ToolOutcome {
    let tool = tools
        .get(name)
        .unwrap_or_else(|| panic!("{name} registered"));
    tool.check(&input).expect("the tool's checks pass");
    let context = ToolContext {
        shells: Arc::clone(shells),
        ..ToolContext::detached()
    };
    tool.run(input, context).await
}

async fn start(tools: &ToolRegistry, shells: &Arc<SessionShells>, command: &str) -> String {
    let started = call(
        tools,
        shells,
        "Bash",
        json!({ "command": command, "run_in_background": true }),
    )
    .await;
    assert!(!started.is_error, "{}", started.output);
    assert_eq!(started.output["background"], true);
    assert_eq!(started.output["command"], command);
    assert!(started.output["pid"].as_u64().is_some());
    let id = started.output["shell_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("bash_"), "{id}");
    assert_eq!(started.output["bash_id"], id.as_str());
    id
}

fn process_exists(pid: u64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn task_output_waits_for_a_shell_and_returns_only_output_new_since_the_last_read() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(in_dir(&dir)).await;
    let shells = SessionShells::new("tenant-a");
    let id = start(
        &tools,
        &shells,
        "echo first; sleep 0.3; echo second >&2; exit 7",
    )
    .await;

    let read = call(&tools, &shells, "TaskOutput", json!({ "task_id": id })).await;
    assert!(!read.is_error, "{}", read.output);
    let report = &read.output;
    assert_eq!(report["type"], "shell");
    assert_eq!(report["task_id"], id.as_str());
    assert_eq!(report["status"], "exited");
    assert_eq!(report["exit_code"], 7);
    assert_eq!(report["stdout"], "first\n");
    assert_eq!(report["stderr"], "second\n");
    assert!(report["started_at"].as_str().unwrap().ends_with('Z'));
    assert!(report["finished_at"].as_str().is_some());

    let again = call(&tools, &shells, "TaskOutput", json!({ "task_id": id })).await;
    assert_eq!(
        again.output["stdout"], "",
        "a read empties what it returned"
    );
    assert_eq!(again.output["status"], "exited");

    // Without `block` a read returns at once, with what there is so far.
    let slow = start(&tools, &shells, "echo ready; sleep 30").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let now = call(
        &tools,
        &shells,
        "TaskOutput",
        json!({ "task_id": slow, "block": false }),
    )
    .await;
    assert_eq!(now.output["status"], "running");
    assert_eq!(now.output["stdout"], "ready\n");
    // A blocking read with a short timeout returns running too.
    let timed = call(
        &tools,
        &shells,
        "TaskOutput",
        json!({ "task_id": slow, "timeout": 100 }),
    )
    .await;
    assert_eq!(timed.output["status"], "running");
    shells.kill_all().await;
}

#[tokio::test]
async fn kill_shell_ends_the_whole_process_group_and_reports_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(in_dir(&dir)).await;
    let shells = SessionShells::new("tenant-a");
    // The command's own child writes its pid: a kill must reach it too.
    let id = start(&tools, &shells, "sleep 60 & echo $! > child.pid; wait").await;
    let pid_file = dir.path().join("child.pid");
    for _ in 0..100 {
        if std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n')) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let child: u64 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(process_exists(child));

    let killed = call(&tools, &shells, "KillShell", json!({ "shell_id": id })).await;
    assert!(!killed.is_error, "{}", killed.output);
    assert_eq!(killed.output["shell_id"], id.as_str());
    assert_eq!(killed.output["status"], "killed");
    assert_eq!(killed.output["already_exited"], false);
    assert_eq!(killed.output["signal"], "SIGTERM");
    for _ in 0..100 {
        if !process_exists(child) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !process_exists(child),
        "the command's own child is gone too"
    );

    let again = call(&tools, &shells, "KillShell", json!({ "shell_id": id })).await;
    assert!(!again.is_error);
    assert_eq!(again.output["already_exited"], true);
    assert_eq!(again.output["status"], "killed");

    let unknown = call(
        &tools,
        &shells,
        "KillShell",
        json!({ "shell_id": "bash_x" }),
    )
    .await;
    assert!(unknown.is_error);
    assert_eq!(unknown.output["error"], "Shell not found: bash_x");
    let unknown = call(
        &tools,
        &shells,
        "TaskOutput",
        json!({ "task_id": "bash_x" }),
    )
    .await;
    assert_eq!(unknown.output["error"], "No task found with ID: bash_x");
}

#[tokio::test]
async fn another_sessions_shell_answers_like_an_unknown_one() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(in_dir(&dir)).await;
    let mine = SessionShells::new("tenant-a");
    let theirs = SessionShells::new("tenant-a");
    let id = start(&tools, &theirs, "sleep 30").await;
    let read = call(&tools, &mine, "TaskOutput", json!({ "task_id": id })).await;
    assert_eq!(read.output["error"], format!("No task found with ID: {id}"));
    let kill = call(&tools, &mine, "KillShell", json!({ "shell_id": id })).await;
    assert_eq!(kill.output["error"], format!("Shell not found: {id}"));
    assert_eq!(
        theirs.get(&id).unwrap().status(),
        agent_runtime_executor::tools::shells::ShellStatus::Running
    );
    theirs.kill_all().await;
}

#[tokio::test]
async fn caps_per_session_and_per_tenant_refuse_with_a_quota_error_and_free_up_when_shells_end() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(ToolsConfig {
        max_background_shells: 2,
        max_background_shells_per_tenant: 3,
        ..in_dir(&dir)
    })
    .await;
    let one = SessionShells::new("tenant-a");
    let two = SessionShells::new("tenant-a");
    let other_tenant = SessionShells::new("tenant-b");
    let first = start(&tools, &one, "sleep 30").await;
    start(&tools, &one, "sleep 30").await;
    let background = json!({ "command": "sleep 30", "run_in_background": true });
    let refused = call(&tools, &one, "Bash", background.clone()).await;
    assert!(refused.is_error);
    assert_eq!(refused.output["code"], "TOOL_QUOTA_EXCEEDED");
    assert!(
        error_text(&refused).contains("this session already runs 2 background shells"),
        "{}",
        refused.output
    );

    start(&tools, &two, "sleep 30").await;
    let refused = call(&tools, &two, "Bash", background.clone()).await;
    assert_eq!(refused.output["code"], "TOOL_QUOTA_EXCEEDED");
    assert!(
        error_text(&refused).contains("this tenant already runs 3 background shells"),
        "{}",
        refused.output
    );
    // Another tenant has its own count.
    start(&tools, &other_tenant, "sleep 30").await;

    // An ended shell gives its slots back.
    call(&tools, &one, "KillShell", json!({ "shell_id": first })).await;
    start(&tools, &two, "sleep 30").await;
    for shells in [&one, &two, &other_tenant] {
        shells.kill_all().await;
    }
}

#[tokio::test]
async fn output_past_the_limit_keeps_the_newest_bytes_and_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(ToolsConfig {
        max_output_bytes: 1000,
        ..in_dir(&dir)
    })
    .await;
    let shells = SessionShells::new("tenant-a");
    let id = start(&tools, &shells, "seq 1 2000").await;
    let read = call(&tools, &shells, "TaskOutput", json!({ "task_id": id })).await;
    let stdout = read.output["stdout"].as_str().unwrap();
    assert_eq!(stdout.len(), 1000);
    assert!(
        stdout.ends_with("1999\n2000\n"),
        "the newest output is kept"
    );
    let total: usize = (1..=2000).map(|n: u32| n.to_string().len() + 1).sum();
    assert_eq!(read.output["dropped_bytes"]["stdout"], total - 1000);
    assert_eq!(read.output["dropped_bytes"]["stderr"], 0);
}

#[tokio::test]
async fn a_shell_past_its_lifetime_is_killed_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(ToolsConfig {
        background_shell_lifetime: Duration::from_millis(300),
        ..in_dir(&dir)
    })
    .await;
    let shells = SessionShells::new("tenant-a");
    let id = start(&tools, &shells, "sleep 30").await;
    let read = call(&tools, &shells, "TaskOutput", json!({ "task_id": id })).await;
    assert_eq!(read.output["status"], "killed");
    assert!(
        read.output["stderr"]
            .as_str()
            .unwrap()
            .contains("still running after the background shell lifetime"),
        "{}",
        read.output
    );
}

#[tokio::test]
async fn stopping_or_dropping_a_session_kills_its_shells() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(in_dir(&dir)).await;
    let shells = SessionShells::new("tenant-a");
    let id = start(&tools, &shells, "sleep 30").await;
    let pid = shells.get(&id).unwrap().pid.unwrap() as u64;
    shells.kill_all().await;
    assert!(!process_exists(pid));

    let dropped = SessionShells::new("tenant-a");
    let id = start(&tools, &dropped, "sleep 30").await;
    let shell = dropped.get(&id).unwrap();
    let pid = shell.pid.unwrap() as u64;
    drop(dropped);
    shell.wait(Duration::from_secs(10)).await;
    assert!(
        !process_exists(pid),
        "a dropped session leaves no shell behind"
    );
}

/// A shell the transcript started but this process does not hold ran on an executor that
/// stopped: it is reported lost, never started again.
#[tokio::test]
async fn a_shell_known_only_from_the_transcript_is_reported_lost() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(in_dir(&dir)).await;
    let before_restart = SessionShells::new("tenant-a");
    let bash = tools.get("Bash").unwrap();
    let started = bash
        .run(
            json!({ "command": "sleep 30", "run_in_background": true }),
            ToolContext {
                shells: Arc::clone(&before_restart),
                ..ToolContext::detached()
            },
        )
        .await;
    before_restart.kill_all().await;
    let id = started.output["shell_id"].as_str().unwrap();
    let after_restart = ToolContext::after(&[&started]);
    let read = tools
        .get("TaskOutput")
        .unwrap()
        .run(json!({ "task_id": id }), after_restart.clone())
        .await;
    assert!(!read.is_error);
    assert_eq!(read.output["status"], "lost");
    assert_eq!(read.output["command"], "sleep 30");
    let kill = tools
        .get("KillShell")
        .unwrap()
        .run(json!({ "shell_id": id }), after_restart)
        .await;
    assert_eq!(kill.output["status"], "lost");
    // No start-up sweep of this process covered it: whether it runs is not known here.
    assert_eq!(kill.output["already_exited"], Value::Null);
}

/// TOOL-27: a shell whose `bash` exited while a process it started runs on in its group (output
/// sent elsewhere, so the pipes close) is reported running by `TaskOutput`, and `KillShell`
/// stops that process and does not answer `already_exited: true`.
#[tokio::test]
async fn tool_27_a_shell_whose_group_still_runs_is_never_reported_exited() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(in_dir(&dir)).await;
    let shells = SessionShells::new("tenant-a");
    let command = "sleep 300 >/dev/null 2>&1 & echo $! > child.pid; echo started";
    let id = start(&tools, &shells, command).await;
    shells.get(&id).unwrap().wait(Duration::from_secs(30)).await;
    let child: u64 = std::fs::read_to_string(dir.path().join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(running(child));

    let read = call(
        &tools,
        &shells,
        "TaskOutput",
        json!({ "task_id": id, "block": false }),
    )
    .await;
    assert_eq!(read.output["status"], "running", "{}", read.output);
    assert_eq!(read.output["stdout"], "started\n");
    assert!(
        read.output["message"]
            .as_str()
            .is_some_and(|m| m.contains("still running")),
        "{}",
        read.output
    );

    let killed = call(&tools, &shells, "KillShell", json!({ "shell_id": id })).await;
    assert!(!killed.is_error, "{}", killed.output);
    assert_eq!(killed.output["already_exited"], false, "{}", killed.output);
    assert_eq!(killed.output["status"], "killed");
    let mut alive = running(child);
    for _ in 0..250 {
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        alive = running(child);
    }
    assert!(!alive, "the shell's child {child} outlived KillShell");
    let again = call(&tools, &shells, "KillShell", json!({ "shell_id": id })).await;
    assert_eq!(again.output["already_exited"], true);
    let read = call(&tools, &shells, "TaskOutput", json!({ "task_id": id })).await;
    assert_eq!(read.output["status"], "killed");
}

#[tokio::test]
async fn a_sandboxed_background_shell_runs_in_the_sandbox_and_is_killed_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(ToolsConfig {
        sandbox: SandboxConfig {
            enabled: true,
            ..SandboxConfig::default()
        },
        ..in_dir(&dir)
    })
    .await;
    let shells = SessionShells::new("tenant-a");
    let id = start(
        &tools,
        &shells,
        "cat /root/.bashrc 2>&1 || echo no-home; echo written > out.txt; sleep 30",
    )
    .await;
    let read = call(
        &tools,
        &shells,
        "TaskOutput",
        json!({ "task_id": id, "timeout": 1000 }),
    )
    .await;
    assert_eq!(read.output["status"], "running");
    assert!(
        read.output["stdout"]
            .as_str()
            .unwrap()
            .contains("No such file"),
        "the host's home is not visible: {}",
        read.output
    );
    assert!(dir.path().join("out.txt").exists(), "the cwd is writable");
    let killed = call(&tools, &shells, "KillShell", json!({ "shell_id": id })).await;
    assert_eq!(killed.output["status"], "killed");
    let pid = shells.get(&id).unwrap().pid.unwrap() as u64;
    assert!(!process_exists(pid));
}

#[tokio::test]
async fn kill_shell_and_task_output_match_rules_by_id_and_need_bash() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(in_dir(&dir)).await;
    let kill = tools.get("KillShell").unwrap();
    assert_eq!(
        kill.effect(),
        agent_runtime_executor::tools::ToolEffect::Execute
    );
    assert_eq!(
        kill.check(&json!({ "shell_id": "bash_1" }))
            .unwrap()
            .subject
            .as_deref(),
        Some("bash_1")
    );
    let output = tools.get("TaskOutput").unwrap();
    assert_eq!(
        output.effect(),
        agent_runtime_executor::tools::ToolEffect::ReadOnly
    );
    // Without Bash there is nothing to read or stop: neither is registered.
    let without_bash = ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(vec!["TaskOutput".into(), "KillShell".into()]),
        ..in_dir(&dir)
    }
    .build(Vec::new())
    .await
    .unwrap();
    assert!(without_bash.get("KillShell").is_none());
    assert!(without_bash.get("TaskOutput").is_none());
}

/// A descendant that leaves the process group (`setsid`) and keeps the output pipes open does
/// not keep the shell "running": it ends when its own process does, and its slot is free again.
#[tokio::test]
async fn a_descendant_holding_the_pipes_does_not_keep_the_shell_running() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(ToolsConfig {
        max_background_shells: 1,
        ..in_dir(&dir)
    })
    .await;
    let shells = SessionShells::new("tenant-a");
    let id = start(&tools, &shells, "echo started; setsid sleep 3 & exit 0").await;
    let read = call(
        &tools,
        &shells,
        "TaskOutput",
        json!({ "task_id": id, "timeout": 2500 }),
    )
    .await;
    assert_eq!(read.output["status"], "exited", "{}", read.output);
    assert_eq!(read.output["stdout"], "started\n");
    // The session's one slot is free again.
    start(&tools, &shells, "true").await;
}

#[tokio::test]
async fn only_the_newest_ended_shells_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(in_dir(&dir)).await;
    let shells = SessionShells::new("tenant-a");
    let mut ids = Vec::new();
    for _ in 0..20 {
        let id = start(&tools, &shells, "true").await;
        shells.get(&id).unwrap().wait(Duration::from_secs(5)).await;
        ids.push(id);
    }
    let oldest = call(&tools, &shells, "TaskOutput", json!({ "task_id": ids[0] })).await;
    assert!(oldest.is_error, "the oldest ended shell was let go");
    let newest = call(&tools, &shells, "TaskOutput", json!({ "task_id": ids[19] })).await;
    assert_eq!(newest.output["status"], "exited");
}

/// Whether `pid` runs (a zombie waiting for its reaper does not).
fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

#[tokio::test]
async fn a_dropped_foreground_call_kills_the_commands_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools(in_dir(&dir)).await;
    let shells = SessionShells::new("tenant-a");
    let pid_file = dir.path().join("child.pid");
    // A grandchild of the call's bash: killing bash alone leaves it running.
    let command = "sh -c 'echo $$ > child.pid; exec sleep 300'; echo never";
    let call = call(&tools, &shells, "Bash", json!({ "command": command }));
    let pid = tokio::select! {
        outcome = call => panic!("the command ended: {outcome:?}"),
        pid = async {
            loop {
                if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<u64>().ok()) {
                    break pid;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        } => pid,
    };
    // The select dropped the call (as an abort or a lost lease does).
    let mut alive = running(pid);
    for _ in 0..100 {
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        alive = running(pid);
    }
    assert!(
        !alive,
        "the command's child {pid} outlived its dropped call"
    );
}

/// Set in the copy of this test binary that runs in a pid namespace of its own.
const IN_OWN_PID_NAMESPACE: &str = "AGENT_RUNTIME_TEST_IN_OWN_PID_NAMESPACE";

/// A process whose session leader is outside its pid namespace (a container's first process,
/// a CI runner's commands) is in session 0; shells must start and end there too.
#[tokio::test]
async fn shells_run_in_a_process_whose_session_leader_is_out_of_sight() {
    if std::env::var_os(IN_OWN_PID_NAMESPACE).is_some() {
        let session = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<&str> = session
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        assert_eq!(fields[3], "0", "the session leader is out of sight");
        let dir = tempfile::tempdir().unwrap();
        let tools = tools(in_dir(&dir)).await;
        let shells = SessionShells::new("tenant-a");
        let id = start(&tools, &shells, "echo started; sleep 30").await;
        let kill = call(&tools, &shells, "KillShell", json!({ "shell_id": id })).await;
        assert!(!kill.is_error, "{}", kill.output);
        return;
    }
    let test = "tools::shells::shells_run_in_a_process_whose_session_leader_is_out_of_sight";
    let status = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(IN_OWN_PID_NAMESPACE, "1")
        .status()
        .expect("unshare (util-linux) runs");
    assert!(status.success(), "the test failed in its own pid namespace");
}
