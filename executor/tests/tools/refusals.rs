//! TOOL-26 (docs/reliability.md): a refused path names the argument as the model gave it, never
//! the resolved host path, a symlink's target or the server's PID. Driven through a real
//! `InProcessExecutor` with a scripted model.

use crate::support::{Harness, ScriptedModel, stream_type, tool_turn};
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::permissions::PermissionMode;
use agent_runtime_executor::tools::ToolsConfig;
use serde_json::{Value, json};

#[tokio::test]
async fn tool_26_refusals_name_the_argument_not_host_paths_or_pids() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("escape")).unwrap();
    let target = outside.path().join("secret.txt");
    std::os::unix::fs::symlink(&target, root.path().join("link.txt")).unwrap();
    std::fs::hard_link(&target, root.path().join("hard.txt")).unwrap();
    let tools = ToolsConfig {
        builtin_tools: true,
        roots: vec![root.path().to_path_buf()],
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .unwrap();

    let outside_of =
        |field: &str, arg: &str| format!("Refused: {field} {arg} is outside the allowed roots");
    let calls: Vec<(&str, Value, String)> = vec![
        (
            "Read",
            json!({ "file_path": "../secret.txt" }),
            outside_of("file_path", "../secret.txt"),
        ),
        (
            "Read",
            json!({ "file_path": "escape/secret.txt" }),
            outside_of("file_path", "escape/secret.txt"),
        ),
        (
            "Read",
            json!({ "file_path": "link.txt" }),
            outside_of("file_path", "link.txt"),
        ),
        (
            "Read",
            json!({ "file_path": "/proc/self/environ" }),
            outside_of("file_path", "/proc/self/environ"),
        ),
        (
            "Write",
            json!({ "file_path": "escape/new.txt", "content": "x" }),
            outside_of("file_path", "escape/new.txt"),
        ),
        (
            "Edit",
            json!({ "file_path": "link.txt", "old_string": "top", "new_string": "x" }),
            outside_of("file_path", "link.txt"),
        ),
        (
            "NotebookEdit",
            json!({ "notebook_path": "escape/n.ipynb", "new_source": "x", "cell_id": "a" }),
            outside_of("notebook_path", "escape/n.ipynb"),
        ),
        (
            "Glob",
            json!({ "pattern": "*", "path": "escape" }),
            outside_of("path", "escape"),
        ),
        (
            "Grep",
            json!({ "pattern": "secret", "path": "/proc/self/cwd" }),
            outside_of("path", "/proc/self/cwd"),
        ),
        (
            "Bash",
            json!({ "command": "ls", "cwd": "escape" }),
            outside_of("cwd", "escape"),
        ),
        (
            "Read",
            json!({ "file_path": "hard.txt" }),
            "Refused: file_path hard.txt has 2 hard links; another name of it may lie outside \
             the allowed roots, so file tools do not use it"
                .to_owned(),
        ),
        (
            "Read",
            json!({ "file_path": "nothere/../../x" }),
            "Refused: file_path nothere/../../x: `..` after a directory that does not exist"
                .to_owned(),
        ),
    ];
    let turn: Vec<(&str, Value)> = calls
        .iter()
        .map(|(name, input, _)| (*name, input.clone()))
        .collect();
    let mut config = ExecutorConfig::default();
    config.permissions.mode = PermissionMode::Yolo;
    let harness = Harness::new(ScriptedModel::new([tool_turn("", &turn)]), tools, config);
    let session = harness.create().await;
    harness.submit(&session, "go").await;
    let events = harness.until_result(&session, 0).await;
    let errors: Vec<String> = events
        .iter()
        .filter(|e| stream_type(e) == "tool_result")
        .map(|e| {
            assert_eq!(e.data["isError"], true, "{:?}", e.data);
            e.data["output"]["error"].as_str().unwrap().to_owned()
        })
        .collect();
    let expected: Vec<&String> = calls.iter().map(|(_, _, error)| error).collect();
    assert_eq!(errors.iter().collect::<Vec<_>>(), expected);

    let pid = std::process::id().to_string();
    let hidden = [
        std::fs::canonicalize(root.path()).unwrap(),
        std::fs::canonicalize(outside.path()).unwrap(),
        outside.path().to_path_buf(),
    ];
    for error in &errors {
        for path in &hidden {
            let path = path.display().to_string();
            assert!(!error.contains(&path), "{error} shows {path}");
        }
        assert!(!error.contains(&format!("/proc/{pid}")), "{error}");
        assert!(
            !error.split(|c: char| !c.is_ascii_digit()).any(|n| n == pid),
            "{error} shows the server's pid"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "top secret\n",
        "nothing was written through a link"
    );
}
