//! Built-in file tools: registration rules, path safety for every path-taking tool, truncation,
//! and the pipeline around them (refusals are error results, never approval prompts).

mod support;

use std::path::Path;

use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::permissions::PermissionMode;
use agent_runtime_executor::provider::ModelTurn;
use agent_runtime_executor::tools::{ToolContext, ToolRegistry, ToolsConfig};
use serde_json::{Value, json};
use support::{Harness, ScriptedModel, summary, tool_turn};

struct Tree {
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
}

fn tree() -> Tree {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("src")).unwrap();
    std::fs::write(
        root.path().join("src/main.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    std::fs::write(root.path().join("notes.txt"), "alpha\nbeta\ngamma\n").unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("escape")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        root.path().join("link.txt"),
    )
    .unwrap();
    Tree { root, outside }
}

fn config(root: &Path) -> ToolsConfig {
    ToolsConfig {
        builtin_tools: true,
        roots: vec![root.to_path_buf()],
        ..ToolsConfig::default()
    }
}

#[tokio::test]
async fn nothing_is_registered_unless_builtin_tools_and_lists_narrow_the_set() {
    let tree = tree();
    let off = ToolsConfig {
        builtin_tools: false,
        ..config(tree.root.path())
    };
    assert!(off.build(Vec::new()).await.unwrap().names().is_empty());

    let all = config(tree.root.path()).build(Vec::new()).await.unwrap();
    assert_eq!(
        all.names(),
        [
            "Bash",
            "Edit",
            "Glob",
            "Grep",
            "Read",
            "TodoWrite",
            "WebFetch",
            "Write"
        ]
    );

    let narrowed = ToolsConfig {
        allowed_tools: Some(vec!["Read".into(), "Grep".into(), "Bash".into()]),
        disallowed_tools: vec!["Bash".into()],
        ..config(tree.root.path())
    };
    assert_eq!(
        narrowed.build(Vec::new()).await.unwrap().names(),
        ["Grep", "Read"]
    );

    let no_fs = ToolsConfig {
        roots: Vec::new(),
        ..config(tree.root.path())
    };
    assert_eq!(
        no_fs.build(Vec::new()).await.unwrap().names(),
        ["Bash", "TodoWrite", "WebFetch"]
    );

    let typo = ToolsConfig {
        allowed_tools: Some(vec!["Reed".into()]),
        ..config(tree.root.path())
    };
    assert!(typo.build(Vec::new()).await.is_err());
}

#[tokio::test]
async fn every_path_tool_refuses_paths_outside_the_roots() {
    let tree = tree();
    let tools = config(tree.root.path()).build(Vec::new()).await.unwrap();
    let outside_file = tree.outside.path().join("secret.txt").display().to_string();
    let bad_paths = [
        "../secret.txt".to_owned(),
        "src/../../x".to_owned(),
        outside_file.clone(),
        "/etc/passwd".to_owned(),
        "escape/secret.txt".to_owned(),
        "escape/new.txt".to_owned(),
        "link.txt".to_owned(),
    ];
    for bad in &bad_paths {
        let inputs = [
            ("Read", json!({ "file_path": bad })),
            ("Write", json!({ "file_path": bad, "content": "x" })),
            (
                "Edit",
                json!({ "file_path": bad, "old_string": "top", "new_string": "x" }),
            ),
            ("Glob", json!({ "pattern": "*", "path": bad })),
            ("Grep", json!({ "pattern": "secret", "path": bad })),
        ];
        for (name, input) in inputs {
            let tool = tools.get(name).unwrap();
            let refused = tool.check(&input);
            assert!(refused.is_err(), "{name} must refuse {bad}: {refused:?}");
            // `run` re-checks: a tool is safe even when called without the pipeline.
            let outcome = tool.run(input, ToolContext::detached()).await;
            assert!(
                outcome.is_error,
                "{name} ran on {bad}: {:?}",
                outcome.output
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(&outside_file).unwrap(),
        "top secret\n"
    );
    assert!(!tree.outside.path().join("new.txt").exists());
}

#[tokio::test]
async fn file_tools_work_inside_the_roots_and_searches_do_not_follow_symlinks() {
    let tree = tree();
    let mut config = config(tree.root.path());
    config.max_output_bytes = 8;
    let tools = config.build(Vec::new()).await.unwrap();
    let run = |name: &str, input: Value| {
        let tool = tools.get(name).unwrap().clone();
        async move {
            tool.check(&input).expect("inside the roots");
            tool.run(input, ToolContext::detached()).await
        }
    };
    let read = run(
        "Read",
        json!({ "file_path": "notes.txt", "offset": 2, "limit": 1 }),
    )
    .await;
    assert_eq!(read.output["content"], "beta");
    let long = run("Read", json!({ "file_path": "src/main.rs" })).await;
    let content = long.output["content"].as_str().unwrap();
    assert!(
        content.starts_with("fn main(") && content.contains("output truncated"),
        "{content}"
    );

    run(
        "Write",
        json!({ "file_path": "new/dir/a.txt", "content": "one two two" }),
    )
    .await;
    let twice = run(
        "Edit",
        json!({ "file_path": "new/dir/a.txt", "old_string": "two", "new_string": "2" }),
    )
    .await;
    assert!(twice.is_error, "ambiguous edits are refused");
    let edited = run("Edit", json!({ "file_path": "new/dir/a.txt", "old_string": "two", "new_string": "2", "replace_all": true })).await;
    assert!(!edited.is_error);
    assert_eq!(
        std::fs::read_to_string(tree.root.path().join("new/dir/a.txt")).unwrap(),
        "one 2 2"
    );

    let globbed = run("Glob", json!({ "pattern": "**/*.txt" })).await;
    let files = globbed.output["files"].as_str().unwrap().to_owned();
    let tools_wide = ToolsConfig {
        max_output_bytes: 10_000,
        ..config
    };
    let tools_wide = tools_wide.build(Vec::new()).await.unwrap();
    let globbed = tools_wide
        .get("Glob")
        .unwrap()
        .run(json!({ "pattern": "**/*.txt" }), ToolContext::detached())
        .await;
    assert_eq!(
        globbed.output["files"], "new/dir/a.txt\nnotes.txt",
        "symlinks are not listed (was {files})"
    );
    let grep = tools_wide
        .get("Grep")
        .unwrap()
        .run(
            json!({ "pattern": "secret|println" }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(
        grep.output["matches"],
        "src/main.rs:2:    println!(\"hi\");"
    );
}

#[tokio::test]
async fn invalid_and_unsafe_calls_are_error_results_without_a_prompt_even_in_yolo() {
    let tree = tree();
    let tools: ToolRegistry = config(tree.root.path()).build(Vec::new()).await.unwrap();
    let turns = vec![
        tool_turn(
            "",
            &[
                ("Read", json!({ "path": "notes.txt" })),
                ("Write", json!({ "file_path": "../x", "content": "x" })),
                ("Bash", json!({ "command": 42 })),
                ("Read", json!({ "file_path": "notes.txt" })),
            ],
        ),
        ModelTurn {
            content: "done".into(),
            ..ModelTurn::default()
        },
    ];
    for mode in [PermissionMode::Yolo, PermissionMode::Default] {
        let mut executor = ExecutorConfig::default();
        executor.permissions.mode = mode;
        let harness = Harness::new(ScriptedModel::new(turns.clone()), tools.clone(), executor);
        let session = harness.create().await;
        harness.submit(&session, "go").await;
        let events = harness.until_result(&session, 0).await;
        assert!(
            !summary(&events).iter().any(|e| e.starts_with("permission")),
            "{mode:?}"
        );
        let results: Vec<_> = events
            .iter()
            .filter(|e| e.data["type"] == "tool_result")
            .collect();
        let errors: Vec<_> = results
            .iter()
            .map(|e| e.data["isError"].as_bool().unwrap())
            .collect();
        assert_eq!(errors, [true, true, true, false], "{mode:?}");
        let first = results[0].data["output"]["error"].as_str().unwrap();
        assert!(
            first.contains("Invalid input") && first.contains("file_path is required"),
            "{first}"
        );
        let second = results[1].data["output"]["error"].as_str().unwrap();
        assert!(second.contains("outside the allowed roots"), "{second}");
    }
}

/// TOOL-05: a FIFO, a device or a socket inside the roots is refused by every file tool at once,
/// never read from or written to (a FIFO with no writer would block the tool forever), and a
/// search passes it by.
#[tokio::test]
async fn tool_05_special_files_are_refused_without_blocking() {
    let tree = tree();
    let root = tree.root.path();
    let fifo = root.join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let socket = std::os::unix::net::UnixListener::bind(root.join("socket")).unwrap();
    let tools = config(root).build(Vec::new()).await.unwrap();
    let calls = [
        ("Read", json!({ "file_path": "pipe" })),
        ("Write", json!({ "file_path": "pipe", "content": "x" })),
        (
            "Edit",
            json!({ "file_path": "pipe", "old_string": "a", "new_string": "b" }),
        ),
        ("Read", json!({ "file_path": "socket" })),
        ("Write", json!({ "file_path": "socket", "content": "x" })),
    ];
    for (name, input) in calls {
        let tool = tools.get(name).unwrap().clone();
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            tool.run(input.clone(), ToolContext::detached()),
        )
        .await
        .unwrap_or_else(|_| panic!("{name} {input} blocked"));
        assert!(outcome.is_error, "{name} {input}: {:?}", outcome.output);
    }
    // Device files are not regular files either (a root containing /dev would be a bad config).
    let dev = config(Path::new("/dev")).build(Vec::new()).await.unwrap();
    let zero = dev
        .get("Read")
        .unwrap()
        .run(json!({ "file_path": "/dev/zero" }), ToolContext::detached())
        .await;
    assert!(zero.is_error);
    assert!(
        zero.output.to_string().contains("not a regular file"),
        "{:?}",
        zero.output
    );
    let grep = tools
        .get("Grep")
        .unwrap()
        .run(json!({ "pattern": "alpha" }), ToolContext::detached())
        .await;
    assert!(!grep.is_error);
    assert_eq!(grep.output["matches"], "notes.txt:1:alpha");
    drop(socket);
    assert!(fifo.exists(), "nothing replaced the FIFO");
}

/// TOOL-21: a Glob pattern only filters paths found under the search root; absolute patterns,
/// alternations naming other directories and `..` find nothing outside the roots.
#[tokio::test]
async fn tool_21_glob_patterns_never_reach_outside_the_roots() {
    let tree = tree();
    let mut config = config(tree.root.path());
    config.max_output_bytes = 10_000;
    let tools = config.build(Vec::new()).await.unwrap();
    let glob = tools.get("Glob").unwrap().clone();
    let outside = tree.outside.path().display().to_string();
    let patterns = [
        "/**".to_owned(),
        "/etc/*".to_owned(),
        "{/etc,.}/*".to_owned(),
        "../**".to_owned(),
        "**/../**".to_owned(),
        format!("{outside}/*"),
        "escape/**".to_owned(),
        "link.txt".to_owned(),
    ];
    for pattern in patterns {
        let input = json!({ "pattern": pattern });
        if glob.check(&input).is_err() {
            continue;
        }
        let found = glob.run(input, ToolContext::detached()).await;
        let files = found.output["files"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            !files.contains("secret") && !files.contains("passwd") && !files.contains(".."),
            "{pattern}: {files}"
        );
        for file in files.lines() {
            assert!(
                tree.root.path().join(file).is_file(),
                "{pattern}: {file} is not a file under the root"
            );
        }
    }
    // The same tool does find what is under the root.
    let inside = glob
        .run(json!({ "pattern": "**/*.txt" }), ToolContext::detached())
        .await;
    assert_eq!(inside.output["files"], "notes.txt");
}
