//! Subagents end to end: `Task` in the foreground and background through HTTP and
//! SSE, the demo model playing both the parent's and the child's model (the child's prompt is
//! itself a `demo:` instruction).

use std::path::Path;
use std::time::Duration;

use crate::support::tool_calls::{Call, call_tool, call_tool_answering, returned};
use crate::support::*;
use agent_runtime_executor::permissions::PermissionMode;
use agent_runtime_executor::tools::ToolsConfig;
use serde_json::{Value, json};

fn tools(root: &Path) -> ToolsConfig {
    ToolsConfig {
        builtin_tools: true,
        roots: vec![root.to_path_buf()],
        ..ToolsConfig::default()
    }
}

async fn server_in(root: &Path) -> TestServer {
    let mut config = memory_config();
    config.tools = tools(root);
    TestServer::start(config).await
}

/// `Task` input running `agent` on `prompt`.
fn task(agent: &str, prompt: String) -> Value {
    json!({ "subagent_type": agent, "description": "a test task", "prompt": prompt })
}

fn demo_tool(name: &str, input: Value) -> String {
    format!("demo:tool {name} {input}")
}

fn root() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    (dir, path)
}

#[tokio::test]
async fn a_foreground_child_runs_its_own_loop_and_its_answer_is_the_result() {
    let (_dir, root) = root();
    std::fs::write(root.join("notes.txt"), "hello from the notes\n").unwrap();
    let server = server_in(&root).await;
    let session = server.create_session(TOKEN_A).await;
    let read = demo_tool("Read", json!({ "file_path": root.join("notes.txt") }));
    let call = call_tool(&server, &session, "Task", task("Explore", read)).await;
    let answer = returned(&call, "Task");
    let answer = answer.as_str().unwrap();
    assert!(answer.starts_with("[demo] Read returned: "), "{answer}");
    assert!(answer.contains("hello from the notes"), "{answer}");
    assert!(
        !call.asked(),
        "Read in a child asks nothing, as in its parent"
    );
    // What reaches the parent stream: the Task call's message and progress (one report per
    // child call, naming the tool, never its input), then its result with the child's stats.
    let said = call.stream("tool_message");
    assert!(
        said.iter().any(|m| m["data"]["content"]["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("Starting Explore subagent")),
        "{said:?}"
    );
    let progress = call.stream("tool_progress");
    assert!(
        progress
            .iter()
            .any(|p| p["data"]["progress"]["data"]["event"] == "tool"
                && p["data"]["progress"]["data"]["name"] == "Read"),
        "{progress:?}"
    );
    assert!(
        !progress.iter().any(|p| p.to_string().contains("notes.txt")),
        "a child's tool input never reaches the parent stream"
    );
    let result = call.stream("tool_result");
    let summary = result[0]["data"]["display"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("Explore finished: 1 tool calls"),
        "{summary}"
    );
    // Explore is read-only: it has no Write.
    let write = demo_tool(
        "Write",
        json!({ "file_path": root.join("x.txt"), "content": "x" }),
    );
    let refused = call_tool(&server, &session, "Task", task("Explore", write)).await;
    let refused = returned(&refused, "Task");
    assert!(
        refused.as_str().unwrap().contains("Unknown tool: Write"),
        "{refused}"
    );
    server.stop().await;
}

fn permission_requests(call: &Call) -> Vec<&Value> {
    call.events
        .iter()
        .filter(|e| e["type"] == "permission.requested")
        .collect()
}

#[tokio::test]
async fn a_childs_ask_is_a_permission_request_on_the_parent_session() {
    let (_dir, root) = root();
    let server = server_in(&root).await;
    let session = server.create_session(TOKEN_A).await;
    let target = root.join("written.txt");
    let write = demo_tool(
        "Write",
        json!({ "file_path": target, "content": "by the child" }),
    );

    let approved = call_tool(
        &server,
        &session,
        "Task",
        task("general-purpose", write.clone()),
    )
    .await;
    let asked = permission_requests(&approved);
    assert_eq!(asked.len(), 1, "one prompt, for the child's Write");
    assert_eq!(asked[0]["data"]["toolName"], "Write");
    let title = asked[0]["data"]["title"].as_str().unwrap();
    assert!(title.starts_with("[general-purpose] "), "{title}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "by the child");

    std::fs::remove_file(&target).unwrap();
    let denied = call_tool_answering(
        &server,
        &session,
        "Task",
        task("general-purpose", write),
        |_| json!({ "approved": false, "reason": "not now" }),
    )
    .await;
    assert_eq!(permission_requests(&denied).len(), 1);
    assert!(!target.exists(), "a denied child call never runs");
    let answer = returned(&denied, "Task");
    assert!(answer.as_str().unwrap().contains("not now"), "{answer}");
    server.stop().await;
}

#[tokio::test]
async fn a_child_cannot_start_children() {
    let (_dir, root) = root();
    let server = server_in(&root).await;
    let session = server.create_session(TOKEN_A).await;
    let inner = task("Explore", "demo:echo something long enough".to_owned());
    let nested = demo_tool("Task", inner);
    let call = call_tool(&server, &session, "Task", task("general-purpose", nested)).await;
    let answer = returned(&call, "Task");
    assert!(
        answer.as_str().unwrap().contains("Unknown tool: Task"),
        "{answer}"
    );
    server.stop().await;
}

#[tokio::test]
async fn children_share_the_requests_turn_budget() {
    let (_dir, root) = root();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    let server = server_in(&root).await;
    let session = server.create_session(TOKEN_A).await;
    let read = demo_tool("Read", json!({ "file_path": root.join("a.txt") }));
    let text = demo_tool("Task", task("Explore", read));
    // Parent turn 1 calls Task; the child's first turn is turn 2 and its second would be 3.
    server
        .ok(
            TOKEN_A,
            "input.submit",
            json!({ "sessionId": session, "input": text, "maxTurns": 2 }),
        )
        .await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let result = events
        .iter()
        .find(|e| stream_type(e) == Some("tool_result"))
        .expect("the Task call has a result");
    assert_eq!(result["data"]["isError"], true, "{result}");
    assert!(result.to_string().contains("limit of 2 turns"), "{result}");
    server.stop().await;
}

/// Starts `demo:slow` in a background child; its agent id.
async fn start_slow_child(server: &TestServer, session: &str) -> String {
    let mut input = task("general-purpose", "demo:slow and steady".to_owned());
    input["run_in_background"] = json!(true);
    let started = call_tool(server, session, "Task", input).await;
    let started = returned(&started, "Task");
    assert_eq!(started["status"], "running", "{started}");
    started["agent_id"].as_str().unwrap().to_owned()
}

async fn task_output(
    server: &TestServer,
    token: &str,
    session: &str,
    id: &str,
    block: bool,
) -> Value {
    let input = json!({ "task_id": id, "block": block, "timeout": 60000 });
    let call =
        crate::support::tool_calls::call_tool_as(server, token, session, "TaskOutput", input).await;
    returned(&call, "TaskOutput")
}

#[tokio::test]
async fn a_background_child_is_read_with_task_output_and_stopped_with_task_stop() {
    let (_dir, root) = root();
    let mut config = memory_config();
    config.tools = tools(&root);
    config.executor.demo_slow_delta_interval = Duration::from_millis(5);
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    let quick = start_slow_child(&server, &session).await;
    let done = task_output(&server, TOKEN_A, &session, &quick, true).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["type"], "agent");
    assert_eq!(done["subagent_type"], "general-purpose");
    assert!(!done["result"].as_str().unwrap().is_empty(), "{done}");
    server.stop().await;

    // Slow enough to stop while it runs.
    let mut config = memory_config();
    config.tools = tools(&root);
    config.executor.demo_slow_delta_interval = Duration::from_secs(2);
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    let slow = start_slow_child(&server, &session).await;
    let running = task_output(&server, TOKEN_A, &session, &slow, false).await;
    assert_eq!(running["status"], "running", "{running}");
    // Another tenant never sees it.
    let other = server.create_session(TOKEN_B).await;
    let foreign = crate::support::tool_calls::call_tool_as(
        &server,
        TOKEN_B,
        &other,
        "TaskOutput",
        json!({ "task_id": slow, "block": false }),
    )
    .await;
    assert!(
        foreign.answer.contains("No task found"),
        "{}",
        foreign.answer
    );
    let stop = call_tool(&server, &session, "TaskStop", json!({ "taskId": slow })).await;
    assert_eq!(returned(&stop, "TaskStop")["status"], "cancelled");
    let stopped = task_output(&server, TOKEN_A, &session, &slow, true).await;
    assert_eq!(stopped["status"], "cancelled", "{stopped}");
    server.stop().await;
}

/// Whether a process whose command line contains `marker` runs on this host.
fn process_running(marker: &str) -> bool {
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

#[tokio::test]
async fn aborting_the_parent_ends_the_child_and_its_processes() {
    let (_dir, root) = root();
    let mut config = memory_config();
    config.tools = tools(&root);
    config.executor.permissions.mode = PermissionMode::Yolo;
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    let marker = format!("sleep 9{}", std::process::id() % 1000);
    let bash = demo_tool(
        "Bash",
        json!({ "command": format!("{marker}; echo never") }),
    );
    let text = demo_tool("Task", task("general-purpose", bash));
    server.submit(TOKEN_A, &session, &text).await;
    let mut started = false;
    for _ in 0..100 {
        if process_running(&marker) {
            started = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(started, "the child's command runs");
    server
        .ok(TOKEN_A, "request.abort", json!({ "sessionId": session }))
        .await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert!(
        events
            .last()
            .unwrap()
            .to_string()
            .contains("Request aborted"),
        "{:?}",
        events.last()
    );
    let mut gone = false;
    for _ in 0..100 {
        if !process_running(&marker) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "no process of the child is left");
    server.stop().await;
}

#[tokio::test]
async fn a_background_child_of_a_stopped_executor_is_reported_lost() {
    let (_dir, root) = root();
    let data = tempfile::tempdir().unwrap();
    let mut config = durable_config(data.path()).await;
    config.tools = tools(&root);
    config.executor.demo_slow_delta_interval = Duration::from_secs(2);
    let server = TestServer::start(config.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    let id = start_slow_child(&server, &session).await;
    server.stop().await;

    let server = TestServer::start(config).await;
    let lost = task_output(&server, TOKEN_A, &session, &id, true).await;
    assert_eq!(lost["status"], "failed", "{lost}");
    assert!(
        lost["result"].as_str().unwrap().starts_with("lost"),
        "{lost}"
    );
    let stop = call_tool(&server, &session, "TaskStop", json!({ "taskId": id })).await;
    assert_eq!(returned(&stop, "TaskStop")["status"], "failed");
    server.stop().await;
}

#[tokio::test]
async fn a_background_childs_ask_is_answered_on_the_parent_after_its_request_ended() {
    let (_dir, root) = root();
    let server = server_in(&root).await;
    let session = server.create_session(TOKEN_A).await;
    let target = root.join("later.txt");
    let write = demo_tool(
        "Write",
        json!({ "file_path": target, "content": "in the background" }),
    );
    let mut input = task("general-purpose", write);
    input["run_in_background"] = json!(true);
    // Submitted by hand: the child may ask before or after its parent's request ends, and the
    // test helpers would answer its prompt themselves.
    server
        .submit(TOKEN_A, &session, &demo_tool("Task", input))
        .await;
    let asked = server
        .collect_events(TOKEN_A, &session, 0, |e| {
            e["type"] == "permission.requested"
        })
        .await;
    let request = asked.last().unwrap().clone();
    assert!(
        request["data"]["title"]
            .as_str()
            .unwrap()
            .starts_with("[general-purpose] "),
        "{request}"
    );
    let ended = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let id = ended
        .iter()
        .find(|e| stream_type(e) == Some("tool_result"))
        .and_then(|e| e["data"]["output"]["agent_id"].as_str())
        .expect("Task answers with the child's id")
        .to_owned();
    server
        .ok(
            TOKEN_A,
            "permission.resolve",
            json!({
                "sessionId": session,
                "permissionRequestId": request["data"]["permissionRequestId"],
                "approved": true, "scope": "once",
            }),
        )
        .await;
    // Read it after both the prompt and the first request's end.
    let seen = ended.last().unwrap()["sequence"]
        .as_u64()
        .unwrap()
        .max(request["sequence"].as_u64().unwrap());
    let read = json!({ "task_id": id, "block": true, "timeout": 20000 });
    server
        .submit(TOKEN_A, &session, &demo_tool("TaskOutput", read))
        .await;
    let events = server
        .collect_events(TOKEN_A, &session, seen, is_result)
        .await;
    let done = events
        .iter()
        .find(|e| stream_type(e) == Some("tool_result"))
        .expect("TaskOutput answers");
    assert_eq!(done["data"]["output"]["status"], "completed", "{done}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "in the background"
    );
    server.stop().await;
}
