//! Background shells end to end (docs/agent.md §6.4), driven by `demo:tool` over HTTP and SSE:
//! `Bash` with `run_in_background` asks like any command, `TaskOutput` reads unasked, `KillShell`
//! asks; closing the session kills what it still runs, and after a restart a shell the transcript
//! started is reported lost, never run again. On JSONL and (in the rerun) PostgreSQL.

use std::time::Duration;

use crate::support::tool_calls::*;
use crate::support::*;
use agent_runtime_executor::tools::ToolsConfig;
use serde_json::{Value, json};

fn process_exists(pid: u64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

async fn start_background(server: &TestServer, session: &str, command: &str) -> Value {
    let started = call_tool(
        server,
        session,
        "Bash",
        json!({ "command": command, "run_in_background": true }),
    )
    .await;
    assert!(
        started.asked(),
        "a background command asks like any command"
    );
    let output = returned(&started, "Bash");
    assert_eq!(output["background"], true);
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_shells_are_read_killed_closed_with_their_session_and_lost_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let mut config = durable_config(dir.path()).await;
    config.tools = ToolsConfig {
        builtin_tools: true,
        cwd: Some(workspace.path().to_path_buf()),
        ..ToolsConfig::default()
    };
    let server = TestServer::start(config.clone()).await;
    let session = server.create_session(TOKEN_A).await;

    let quick = start_background(&server, &session, "echo hi; sleep 0.2; echo done").await;
    let id = quick["shell_id"].as_str().unwrap();
    let read = call_tool(&server, &session, "TaskOutput", json!({ "task_id": id })).await;
    assert!(!read.asked(), "reading a session's own shell never prompts");
    let report = returned(&read, "TaskOutput");
    assert_eq!(report["status"], "exited");
    assert_eq!(report["exit_code"], 0);
    assert_eq!(report["stdout"], "hi\ndone\n");

    let slow = start_background(&server, &session, "sleep 60").await;
    let id = slow["shell_id"].as_str().unwrap();
    let killed = call_tool(&server, &session, "KillShell", json!({ "shell_id": id })).await;
    assert!(killed.asked(), "KillShell is an execute tool");
    assert_eq!(returned(&killed, "KillShell")["status"], "killed");
    let pid = slow["pid"].as_u64().unwrap();
    assert!(!process_exists(pid));

    // Another session cannot see it.
    let other = server.create_session(TOKEN_A).await;
    let foreign = call_tool(&server, &other, "TaskOutput", json!({ "task_id": id })).await;
    assert!(
        foreign.answer.contains("No task found with ID"),
        "{}",
        foreign.answer
    );

    // Closing the session kills what it still runs.
    let running = start_background(&server, &other, "sleep 60").await;
    let pid = running["pid"].as_u64().unwrap();
    assert!(process_exists(pid));
    server
        .ok(TOKEN_A, "session.close", json!({ "sessionId": other }))
        .await;
    for _ in 0..100 {
        if !process_exists(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !process_exists(pid),
        "a closed session leaves no shell behind"
    );

    // A restart stops the shell; the transcript still knows it, so it is reported lost.
    let running = start_background(&server, &session, "sleep 60").await;
    let pid = running["pid"].as_u64().unwrap();
    server.stop().await;
    assert!(!process_exists(pid), "shutdown kills background shells");
    let server = TestServer::start(config).await;
    let id = running["shell_id"].as_str().unwrap();
    let lost = call_tool(&server, &session, "TaskOutput", json!({ "task_id": id })).await;
    let report = returned(&lost, "TaskOutput");
    assert_eq!(report["status"], "lost");
    assert_eq!(report["command"], "sleep 60");
    server.stop().await;
}
