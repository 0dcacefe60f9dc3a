//! TOOL-27's process record belongs to one process. Two `serve` binaries on PostgreSQL sharing a
//! data directory (the test suite's temporary directory, or an operator's) must never sweep each
//! other's live Bash commands at start: the record is kept only with the JSONL store, whose lock
//! makes the directory one process's. Failed before: the second server's start killed the first
//! one's running command (seen as an intermittent CI failure of
//! `aborting_the_parent_ends_the_child_and_its_processes` in the PostgreSQL pass).

use std::time::Duration;

use serde_json::json;

use crate::support::{command, serve_with_env};

fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .map(|line| {
                String::from_utf8_lossy(&line)
                    .replace('\0', " ")
                    .contains(marker)
            })
            .unwrap_or(false)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_a_shared_data_directory_leaves_the_firsts_commands_running() {
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("serve.toml");
    std::fs::write(&config, "[tools]\nbuiltin_tools = true\nmode = \"yolo\"\n").unwrap();
    let start = |url: String| {
        let args = [
            "--listen",
            "127.0.0.1:0",
            "--store",
            "postgres",
            "--config",
            config.to_str().unwrap(),
        ];
        serve_with_env(data.path(), &args, &[("AGENT_RUNTIME_DATABASE_URL", &url)])
    };
    let fresh = || agent_runtime_store::testing::postgres::fresh_database_url();
    let mut first = start(fresh().await.expect("a test database"));
    let created = command(&first, "session.create", json!({})).await;
    let session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    let marker = format!("sleep 7{}", std::process::id() % 1000);
    let call = json!({ "command": format!("{marker}; echo done"), "run_in_background": true });
    let input = format!("demo:tool Bash {call}");
    command(
        &first,
        "input.submit",
        json!({ "sessionId": session, "input": input }),
    )
    .await;
    let mut started = false;
    for _ in 0..100 {
        if running(&marker) {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(started, "the first server's command runs");

    let mut second = start(fresh().await.expect("a test database"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        running(&marker),
        "the second server's start killed the first one's command"
    );
    for served in [&mut second, &mut first] {
        let child = served.child.as_mut().unwrap();
        crate::support::cluster::signal(child, "-TERM");
        child.wait().unwrap();
    }
}
