//! Built-in tools end to end, driven without a model by the demo model's `demo:tool NAME {json}`
//! trigger, over HTTP and SSE, through the whole permission pipeline (the default mode asks
//! before a write), the filesystem roots and the tool's own checks. On the memory store and (in
//! the PostgreSQL rerun) on PostgreSQL.

use crate::support::tool_calls::*;
use crate::support::*;
use agent_runtime_executor::tools::ToolsConfig;
use serde_json::{Value, json};

fn notebook() -> Value {
    json!({"cells": [
        {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Notes"]},
        {"cell_type": "code", "id": "calc", "metadata": {}, "source": ["x = 1"],
         "execution_count": 1, "outputs": []}
    ], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notebook_edit_runs_end_to_end_after_approval_and_read_runs_unasked() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let path = root_path.join("analysis.ipynb");
    std::fs::write(&path, notebook().to_string()).unwrap();
    let server = server_with_tools(&root_path).await;
    let session = server.create_session(TOKEN_A).await;

    let read = call_tool(&server, &session, "Read", json!({ "file_path": path })).await;
    assert!(!read.asked(), "a read-only tool runs unasked");
    // The tool says what it does (`tool_message`), before its result.
    let said = read.stream("tool_message");
    assert_eq!(
        said[0]["data"]["content"]["summary"],
        format!("Reading {}", path.display())
    );
    assert!(said[0]["sequence"].as_u64() < read.stream("tool_result")[0]["sequence"].as_u64());
    assert!(
        read.answer.starts_with("[demo] Read returned: "),
        "{}",
        read.answer
    );
    assert!(read.answer.contains("calc"), "{}", read.answer);

    let replaced = call_tool(
        &server,
        &session,
        "NotebookEdit",
        json!({ "notebook_path": path, "cell_id": "calc", "new_source": "x = 2\nprint(x)" }),
    )
    .await;
    assert!(replaced.asked(), "a write asks in the default mode");
    let tool_use = replaced.stream("tool_use");
    assert_eq!(tool_use[0]["data"]["name"], "NotebookEdit");
    let result = replaced.stream("tool_result");
    assert_eq!(result[0]["data"]["isError"], false, "{:?}", result[0]);
    assert_eq!(
        replaced.answer,
        format!(
            "[demo] NotebookEdit returned: \"Successfully replaced cell in {}\"",
            path.display()
        )
    );
    let inserted = call_tool(
        &server,
        &session,
        "NotebookEdit",
        json!({ "notebook_path": path, "cell_id": "intro", "new_source": "More.",
                "edit_mode": "insert", "cell_type": "markdown" }),
    )
    .await;
    assert!(
        inserted.answer.contains("Successfully inserted cell"),
        "{}",
        inserted.answer
    );
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(stored["cells"][1]["source"], json!(["More."]));
    assert_eq!(stored["cells"][2]["source"], json!(["x = 2\n", "print(x)"]));
    assert_eq!(stored["cells"][2]["execution_count"], 1);

    // Refused by the tool's own checks, before any prompt: outside the roots, a missing cell.
    let outside = call_tool(
        &server,
        &session,
        "NotebookEdit",
        json!({ "notebook_path": "/etc/passwd", "cell_id": "a", "new_source": "x" }),
    )
    .await;
    assert!(!outside.asked());
    assert!(
        outside.answer.starts_with("[demo] NotebookEdit failed: "),
        "{}",
        outside.answer
    );
    let missing = call_tool(
        &server,
        &session,
        "NotebookEdit",
        json!({ "notebook_path": path, "cell_id": "nope", "new_source": "x", "edit_mode": "delete" }),
    )
    .await;
    assert!(
        missing
            .answer
            .contains(r#"Cell with ID \"nope\" not found"#),
        "{}",
        missing.answer
    );
    let result = missing.stream("tool_result");
    assert_eq!(result[0]["data"]["isError"], true);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_tool_reaches_only_registered_tools_and_checks_their_input() {
    let root = tempfile::tempdir().unwrap();
    let server = server_with_tools(&root.path().canonicalize().unwrap()).await;
    let session = server.create_session(TOKEN_A).await;
    let unknown = call_tool(&server, &session, "NoSuchTool", json!({})).await;
    assert!(
        unknown.answer.starts_with("[demo] NoSuchTool failed: "),
        "{}",
        unknown.answer
    );
    let invalid = call_tool(&server, &session, "NotebookEdit", json!({ "cell_id": 7 })).await;
    assert!(!invalid.asked());
    assert!(
        invalid.answer.starts_with("[demo] NotebookEdit failed: "),
        "{}",
        invalid.answer
    );
    server.stop().await;
}

/// The structured task list is session state kept in the transcript: it outlives a restart of
/// the server (JSONL, or PostgreSQL in the rerun), and another session never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_list_survives_a_restart_and_belongs_to_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = durable_config(dir.path()).await;
    config.tools = ToolsConfig {
        builtin_tools: true,
        ..ToolsConfig::default()
    };
    let server = TestServer::start(config.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    let create = |subject: &'static str| json!({ "subject": subject, "description": "d" });
    let first = call_tool(&server, &session, "TaskCreate", create("Design")).await;
    assert!(
        !first.asked(),
        "the task tools change only the conversation"
    );
    let first_id = returned(&first, "TaskCreate")["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = call_tool(&server, &session, "TaskCreate", create("Build")).await;
    let second_id = returned(&second, "TaskCreate")["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let updated = call_tool(
        &server,
        &session,
        "TaskUpdate",
        json!({ "taskId": second_id, "status": "in_progress", "addBlockedBy": [first_id] }),
    )
    .await;
    assert_eq!(returned(&updated, "TaskUpdate")["status"], "in_progress");
    server.stop().await;

    let server = TestServer::start(config).await;
    let listed = call_tool(&server, &session, "TaskList", json!({})).await;
    assert_eq!(
        returned(&listed, "TaskList"),
        json!([
            { "id": first_id, "subject": "Design", "status": "pending", "blockedBy": [] },
            { "id": second_id, "subject": "Build", "status": "in_progress", "blockedBy": [first_id] },
        ])
    );
    let design = call_tool(&server, &session, "TaskGet", json!({ "taskId": first_id })).await;
    assert_eq!(returned(&design, "TaskGet")["blocks"], json!([second_id]));

    let other = server.create_session(TOKEN_A).await;
    let elsewhere = call_tool(&server, &other, "TaskGet", json!({ "taskId": first_id })).await;
    assert_eq!(
        elsewhere.answer,
        format!("[demo] TaskGet failed: {{\"error\":\"Task #{first_id} not found\"}}")
    );
    server.stop().await;
}

/// `AskUserQuestion` reaches the user as `permission.requested` (`kind: "question"`, the
/// questions as its input) and the answer travels in `permission.resolve`'s `reason`, as JSON
/// or free text; declining gives the model the cancelled text. It asks even in `yolo` mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_user_question_round_trips_through_permission_requested_and_resolve() {
    let mut config = memory_config();
    config.tools = ToolsConfig {
        builtin_tools: true,
        ..ToolsConfig::default()
    };
    config.executor.permissions.mode = agent_runtime_executor::permissions::PermissionMode::Yolo;
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    // The same questions as the console and chat tests (one fixture for all three).
    let questions: Value =
        serde_json::from_str(include_str!("../../fixtures/tools/ask_user_question.json")).unwrap();

    let answered = call_tool_answering(
        &server,
        &session,
        "AskUserQuestion",
        questions.clone(),
        |request| {
            assert_eq!(request["toolName"], "AskUserQuestion");
            assert_eq!(request["kind"], "question");
            assert_eq!(request["title"], "Question from the agent");
            assert_eq!(request["message"], "Which store?");
            assert_eq!(request["input"]["questions"][1]["header"], "Extras");
            json!({ "approved": true,
                "reason": r#"{"answers":{"Store":"PostgreSQL","Extras":["Metrics","Audit"]}}"# })
        },
    )
    .await;
    assert!(answered.asked());
    assert_eq!(
        answered.answer,
        "[demo] AskUserQuestion returned: \"User answers:\\nStore: PostgreSQL\\nExtras: Metrics, Audit\""
    );

    let free_text = call_tool_answering(
        &server,
        &session,
        "AskUserQuestion",
        questions.clone(),
        |_| json!({ "approved": true, "reason": "JSONL for now" }),
    )
    .await;
    assert!(
        free_text.answer.contains("Store: JSONL for now"),
        "{}",
        free_text.answer
    );

    let declined = call_tool_answering(
        &server,
        &session,
        "AskUserQuestion",
        questions,
        |_| json!({ "approved": false }),
    )
    .await;
    assert!(
        declined
            .answer
            .contains("User cancelled the question prompt"),
        "{}",
        declined.answer
    );
    assert_eq!(declined.stream("tool_result")[0]["data"]["isError"], false);
    server.stop().await;
}

/// Plan mode: an approved `EnterPlanMode` switches the session to `plan` (a write is refused
/// without asking), a rejected `ExitPlanMode` ends its request with the user's feedback in the
/// conversation and stays in plan mode, an approved one restores the configured mode (a write
/// asks again). Both prompts are `permission.requested` with `kind: "plan"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_is_entered_and_left_through_approvals_and_blocks_writes_meanwhile() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let server = server_with_tools(&root_path).await;
    let session = server.create_session(TOKEN_A).await;
    let target = root_path.join("plan.md");
    let write = json!({ "file_path": target, "content": "done" });

    let entered = call_tool_answering(&server, &session, "EnterPlanMode", json!({}), |request| {
        assert_eq!(request["kind"], "plan");
        assert_eq!(request["toolName"], "EnterPlanMode");
        json!({ "approved": true })
    })
    .await;
    assert!(
        entered.answer.contains("You are now in PLAN MODE"),
        "{}",
        entered.answer
    );
    // The mode change is published as a context patch, before the call's result.
    assert_eq!(
        entered.stream("tool_context_patch")[0]["data"]["patch"],
        json!({ "scope": "session", "context": { "metadata": {
            "permissionMode": "plan", "previousPermissionMode": "default" } } })
    );
    let blocked = call_tool(&server, &session, "Write", write.clone()).await;
    assert!(!blocked.asked(), "plan mode refuses a write without asking");
    assert!(
        blocked.answer.contains("not available in plan mode"),
        "{}",
        blocked.answer
    );

    let plan = json!({ "plan": "1. Write plan.md" });
    let rejected =
        call_tool_answering(&server, &session, "ExitPlanMode", plan.clone(), |request| {
            assert_eq!(request["kind"], "plan");
            assert_eq!(request["input"]["plan"], "1. Write plan.md");
            json!({ "approved": false, "reason": "Add a test first." })
        })
        .await;
    assert_eq!(
        rejected.answer, "[demo] Calling ExitPlanMode.",
        "the request ends at the rejection"
    );
    let result = rejected.stream("tool_result");
    assert!(
        result[0]["data"]["output"]
            .as_str()
            .unwrap()
            .ends_with("Add a test first."),
        "{:?}",
        result[0]
    );
    let still = call_tool(&server, &session, "Write", write.clone()).await;
    assert!(
        still.answer.contains("not available in plan mode"),
        "{}",
        still.answer
    );

    let approved = call_tool(&server, &session, "ExitPlanMode", plan).await;
    assert!(
        approved.answer.contains("Plan approved by user"),
        "{}",
        approved.answer
    );
    assert_eq!(
        approved.stream("tool_context_patch")[0]["data"]["patch"]["context"]["metadata"],
        json!({ "permissionMode": "default", "previousPermissionMode": "plan" })
    );
    assert!(
        rejected.stream("tool_context_patch").is_empty(),
        "a rejected plan changes no mode"
    );
    let written = call_tool(&server, &session, "Write", write).await;
    assert!(written.asked(), "the default mode asks again");
    assert!(
        written.answer.starts_with("[demo] Write returned: "),
        "{}",
        written.answer
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "done");
    server.stop().await;
}

/// The read-before-write guard keeps its state in the transcript: a file this session wrote may
/// be edited after a restart, while another session must read it first, and a change made
/// outside the session since is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_session_read_or_wrote_is_remembered_across_a_restart_and_only_by_it() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = durable_config(dir.path()).await;
    config.tools = ToolsConfig {
        builtin_tools: true,
        roots: vec![root_path.clone()],
        ..ToolsConfig::default()
    };
    let file = root_path.join("notes.md");
    let server = TestServer::start(config.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    let wrote = call_tool(
        &server,
        &session,
        "Write",
        json!({ "file_path": file, "content": "draft" }),
    )
    .await;
    assert!(
        wrote.answer.starts_with("[demo] Write returned: "),
        "{}",
        wrote.answer
    );
    server.stop().await;

    let server = TestServer::start(config).await;
    let edit =
        |old: &str, new: &str| json!({ "file_path": file, "old_string": old, "new_string": new });
    let edited = call_tool(&server, &session, "Edit", edit("draft", "final")).await;
    assert!(
        edited.answer.starts_with("[demo] Edit returned: "),
        "{}",
        edited.answer
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "final");

    let other = server.create_session(TOKEN_A).await;
    let unread = call_tool(&server, &other, "Edit", edit("final", "x")).await;
    assert!(
        unread
            .answer
            .contains("You must use the Read tool before editing this existing file."),
        "{}",
        unread.answer
    );
    std::fs::write(&file, "changed outside").unwrap();
    let stale = call_tool(&server, &session, "Edit", edit("changed", "x")).await;
    assert!(
        stale.answer.contains("The file changed since it was read"),
        "{}",
        stale.answer
    );
    let read = call_tool(&server, &session, "Read", json!({ "file_path": file })).await;
    assert!(read.answer.contains("changed outside"), "{}", read.answer);
    let after_read = call_tool(&server, &session, "Edit", edit("changed", "edited")).await;
    assert!(
        after_read.answer.starts_with("[demo] Edit returned: "),
        "{}",
        after_read.answer
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "edited outside");
    server.stop().await;
}

/// A configured skill loads through `Skill`: its instructions come back, a `tool_runtime_patch`
/// (`source: "skill"`, its tool policy) is published before the `tool_result`, and while it lasts
/// a tool outside its policy is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_skill_loads_publishes_its_patch_and_narrows_the_tools() {
    use agent_runtime::protocol::stream::PatchScope;
    use agent_runtime_executor::tools::SkillDefinition;
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::write(root_path.join("notes.md"), "todo").unwrap();
    let mut config = memory_config();
    config.tools = ToolsConfig {
        builtin_tools: true,
        roots: vec![root_path.clone()],
        skills: vec![SkillDefinition {
            name: "read-only-review".into(),
            description: "Reviews without changing anything.".into(),
            instructions: "Review {{args}}; read, never write.".into(),
            allowed_tools: Some(vec!["Read".into()]),
            disallowed_tools: Vec::new(),
            scope: PatchScope::Session,
            system_prompt_append: Some("Answer in English.".into()),
            model: None,
        }],
        ..ToolsConfig::default()
    };
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    let loaded = call_tool(
        &server,
        &session,
        "Skill",
        json!({ "skill": "read-only-review", "args": "notes.md" }),
    )
    .await;
    assert!(
        loaded.answer.contains("# Skill: read-only-review"),
        "{}",
        loaded.answer
    );
    assert!(
        loaded
            .answer
            .contains("Review notes.md; read, never write."),
        "{}",
        loaded.answer
    );
    let kinds: Vec<&str> = loaded.events.iter().filter_map(stream_type).collect();
    let patch_at = kinds
        .iter()
        .position(|k| *k == "tool_runtime_patch")
        .expect("a patch");
    let result_at = kinds.iter().position(|k| *k == "tool_result").unwrap();
    assert!(patch_at < result_at, "{kinds:?}");
    let patch = &loaded.stream("tool_runtime_patch")[0]["data"]["patch"];
    assert_eq!(patch["source"], "skill");
    assert_eq!(patch["skill"]["name"], "read-only-review");
    assert_eq!(patch["toolPolicy"], json!({ "allow": ["Read"] }));
    assert_eq!(patch["systemPromptAppend"], "Answer in English.");
    // The skill's system prompt addition joins the conversation after the step's results.
    let added = &loaded.stream("tool_new_messages")[0]["data"];
    assert_eq!(
        added["messages"],
        json!([{ "role": "system", "content": "Answer in English.",
                 "provenance": { "source": "tool_injection" } }])
    );
    let new_at = kinds
        .iter()
        .position(|k| *k == "tool_new_messages")
        .unwrap();
    assert!(new_at < result_at, "{kinds:?}");
    let read = server.read(TOKEN_A, &session).await;
    let messages = read["messages"].as_array().unwrap();
    let tool_at = messages.iter().position(|m| m["role"] == "tool").unwrap();
    assert_eq!(messages[tool_at + 1]["role"], "system", "{messages:?}");
    assert_eq!(
        messages[tool_at + 1]["provenance"]["source"],
        "tool_injection"
    );

    let write = json!({ "file_path": root_path.join("new.md"), "content": "x" });
    let refused = call_tool(&server, &session, "Write", write).await;
    assert!(!refused.asked());
    assert!(
        refused
            .answer
            .contains("Write is not available while the skill read-only-review is active"),
        "{}",
        refused.answer
    );
    let read = call_tool(
        &server,
        &session,
        "Read",
        json!({ "file_path": root_path.join("notes.md") }),
    )
    .await;
    assert!(read.answer.contains("todo"), "{}", read.answer);
    server.stop().await;
}

/// An approval "for the session" is a permission update the client sees
/// (`tool_permission_updates`: an allow rule for the tool), and the next call runs unasked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_approval_is_published_as_a_permission_update() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let server = server_with_tools(&root_path).await;
    let session = server.create_session(TOKEN_A).await;
    let write = |name: &str| json!({ "file_path": root_path.join(name), "content": "x" });
    let first = call_tool_answering(
        &server,
        &session,
        "Write",
        write("a.md"),
        |_| json!({ "approved": true, "scope": "session" }),
    )
    .await;
    assert!(first.asked());
    let updates = first.stream("tool_permission_updates");
    assert_eq!(updates.len(), 1, "{:?}", first.events);
    assert_eq!(
        updates[0]["data"]["updates"],
        json!([{ "type": "addRules", "rules": [{ "toolName": "Write" }], "behavior": "allow" }])
    );
    let second = call_tool(&server, &session, "Write", write("b.md")).await;
    assert!(!second.asked(), "the session allows Write now");
    assert!(
        second.answer.starts_with("[demo] Write returned: "),
        "{}",
        second.answer
    );
    server.stop().await;
}

/// Deferred tools are hidden until `DiscoverTools` finds them: a call before that is refused;
/// discovery publishes the reference's `toolDiscovery` patch, and what a session discovered
/// outlives a restart (JSONL, or PostgreSQL in the rerun) and stays its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_tools_are_offered_only_after_discover_tools_finds_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::write(root_path.join("notes.md"), "needle").unwrap();
    let mut config = durable_config(dir.path()).await;
    config.tools = ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(vec!["Read".into(), "Grep".into(), "NotebookEdit".into()]),
        deferred_tools: vec!["Grep".into(), "NotebookEdit".into()],
        roots: vec![root_path.clone()],
        ..ToolsConfig::default()
    };
    let server = TestServer::start(config.clone()).await;
    let session = server.create_session(TOKEN_A).await;
    let grep = json!({ "pattern": "needle", "path": root_path });
    let hidden = call_tool(&server, &session, "Grep", grep.clone()).await;
    assert!(
        hidden
            .answer
            .contains("Grep is not available until DiscoverTools finds it"),
        "{}",
        hidden.answer
    );

    let nothing = call_tool(
        &server,
        &session,
        "DiscoverTools",
        json!({ "query": "zebra" }),
    )
    .await;
    assert_eq!(
        returned(&nothing, "DiscoverTools"),
        "No hidden tools matched \"zebra\"."
    );
    let found = call_tool(
        &server,
        &session,
        "DiscoverTools",
        json!({ "query": "search file contents", "max_results": 1 }),
    )
    .await;
    assert!(!found.asked(), "discovery changes only the session");
    let text = returned(&found, "DiscoverTools");
    assert!(
        text.as_str()
            .unwrap()
            .starts_with("Activated deferred tools:\n- Grep: Searches file contents"),
        "{text}"
    );
    let patch = &found.stream("tool_runtime_patch")[0]["data"]["patch"];
    assert_eq!(
        *patch,
        json!({ "scope": "session", "source": "tool", "toolDiscovery": { "discover": ["Grep"] } })
    );
    server.stop().await;

    let server = TestServer::start(config).await;
    let searched = call_tool(&server, &session, "Grep", grep.clone()).await;
    assert!(
        searched.answer.starts_with("[demo] Grep returned:"),
        "{}",
        searched.answer
    );
    let still_hidden = call_tool(
        &server,
        &session,
        "NotebookEdit",
        json!({ "notebook_path": root_path.join("n.ipynb"), "new_source": "x" }),
    )
    .await;
    assert!(
        still_hidden
            .answer
            .contains("not available until DiscoverTools")
    );
    let other = server.create_session(TOKEN_A).await;
    let elsewhere = call_tool(&server, &other, "Grep", grep).await;
    assert!(
        elsewhere
            .answer
            .contains("not available until DiscoverTools"),
        "another session discovered nothing"
    );
    server.stop().await;
}

/// A loopback server answering `/page` with text and `/search` with SearXNG's JSON.
async fn web_server() -> String {
    let app = axum::Router::new()
        .route(
            "/page",
            axum::routing::get(|| async { "hello from the web" }).post(|| async { "posted" }),
        )
        .route(
            "/search",
            axum::routing::get(|| async {
                axum::Json(json!({ "query": "rust", "results": [
                    { "title": "The Rust book", "url": "https://doc.rust-lang.org/book/",
                      "content": "Learn Rust" } ] }))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// `Glob`, `TodoWrite`, `WebFetch` and `WebSearch` through `demo:tool`: the session-state and
/// read-only tools run unasked, the network tools ask in the default mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glob_todo_write_web_fetch_and_web_search_run_end_to_end() {
    use agent_runtime_executor::tools::{SearchProvider, WebFetchConfig, WebSearchConfig};
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::write(root_path.join("main.rs"), "fn main() {}").unwrap();
    let web = web_server().await;
    let mut config = memory_config();
    config.tools = ToolsConfig {
        builtin_tools: true,
        roots: vec![root_path.clone()],
        // The loopback test server stands in for the web.
        web_fetch: WebFetchConfig {
            allow_private_addresses: true,
            allow_write_methods: true,
            ..WebFetchConfig::default()
        },
        web_search: Some(WebSearchConfig {
            provider: SearchProvider::Searxng,
            url: Some(web.clone()),
            api_key_env: None,
            api_key_file: None,
        }),
        ..ToolsConfig::default()
    };
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;

    let globbed = call_tool(&server, &session, "Glob", json!({ "pattern": "*.rs" })).await;
    assert!(!globbed.asked());
    let matched = returned(&globbed, "Glob");
    assert_eq!(matched["count"], 1, "{}", globbed.answer);
    assert_eq!(matched["files"], "main.rs");

    let todos = json!({ "todos": [
        { "content": "Write tests", "status": "in_progress", "activeForm": "Writing tests" },
        { "content": "Ship", "status": "pending", "activeForm": "Shipping" } ] });
    let listed = call_tool(&server, &session, "TodoWrite", todos).await;
    assert!(!listed.asked());
    let stats = &returned(&listed, "TodoWrite")["stats"];
    assert_eq!(
        *stats,
        json!({ "total": 2, "completed": 0, "inProgress": 1, "pending": 1 })
    );

    let page = json!({ "url": format!("{web}/page") });
    let fetched = call_tool_answering(
        &server,
        &session,
        "WebFetch",
        page.clone(),
        |_| json!({ "approved": true, "scope": "session" }),
    )
    .await;
    assert!(fetched.asked(), "a network tool asks in the default mode");
    let body = returned(&fetched, "WebFetch");
    assert_eq!(body["status"], 200);
    assert_eq!(body["body"], "hello from the web");
    let again = call_tool(&server, &session, "WebFetch", page).await;
    assert!(!again.asked(), "approved for the session");
    // A write is a stronger kind of call: the approval of the reads does not cover it.
    let post = json!({ "url": format!("{web}/page"), "method": "POST", "body": "x" });
    let posted = call_tool(&server, &session, "WebFetch", post.clone()).await;
    assert!(
        posted.asked(),
        "a WebFetch write asks even after a session approval"
    );
    assert_eq!(returned(&posted, "WebFetch")["body"], "posted");
    let posted_again = call_tool(&server, &session, "WebFetch", post).await;
    assert!(posted_again.asked(), "and asks every time");

    let searched = call_tool(&server, &session, "WebSearch", json!({ "query": "rust" })).await;
    assert!(searched.asked());
    let found = returned(&searched, "WebSearch");
    assert_eq!(found["provider"], "searxng");
    assert_eq!(
        found["results"][0]["url"],
        "https://doc.rust-lang.org/book/"
    );
    server.stop().await;
}
