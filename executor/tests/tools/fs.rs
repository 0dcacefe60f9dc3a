//! Built-in file tools: registration rules, path safety for every path-taking tool, truncation,
//! and the pipeline around them (refusals are error results, never approval prompts).

use std::path::Path;

use crate::support::error_text;
use crate::support::{Harness, ScriptedModel, summary, tool_turn};
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::permissions::PermissionMode;
use agent_runtime_executor::provider::ModelTurn;
use agent_runtime_executor::tools::{ToolContext, ToolOutcome, ToolRegistry, ToolsConfig};
use serde_json::{Value, json};

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
            "AskUserQuestion",
            "Bash",
            "Edit",
            "EnterPlanMode",
            "ExitPlanMode",
            "Glob",
            "Grep",
            "KillShell",
            "NotebookEdit",
            "Read",
            "Task",
            "TaskCreate",
            "TaskGet",
            "TaskList",
            "TaskOutput",
            "TaskStop",
            "TaskUpdate",
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
        [
            "AskUserQuestion",
            "Bash",
            "EnterPlanMode",
            "ExitPlanMode",
            "KillShell",
            "Task",
            "TaskCreate",
            "TaskGet",
            "TaskList",
            "TaskOutput",
            "TaskStop",
            "TaskUpdate",
            "TodoWrite",
            "WebFetch"
        ]
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
            (
                "NotebookEdit",
                json!({ "notebook_path": bad, "new_source": "x", "cell_id": "a" }),
            ),
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
        json!({ "file_path": "notes.txt", "offset": 1, "limit": 1 }),
    )
    .await;
    // `     2→beta\n` cut at 8 bytes: the numbered line's 8 last bytes are not shown.
    let shown = read.output.as_str().unwrap();
    assert!(
        shown.starts_with("     2\n[… output truncated: 8 more bytes"),
        "{shown}"
    );
    let long = run("Read", json!({ "file_path": "src/main.rs" })).await;
    let content = long.output.as_str().unwrap();
    assert!(
        content.starts_with("fn main(") && content.contains("output truncated"),
        "{content}"
    );

    let wrote = run(
        "Write",
        json!({ "file_path": "new/dir/a.txt", "content": "one two two" }),
    )
    .await;
    let edit = tools.get("Edit").unwrap().clone();
    let unread = edit
        .run(
            json!({ "file_path": "new/dir/a.txt", "old_string": "one", "new_string": "1" }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(
        unread.output["error"],
        "You must use the Read tool before editing this existing file."
    );
    // This session wrote the file: it knows it, and may edit it.
    let twice = edit
        .run(
            json!({ "file_path": "new/dir/a.txt", "old_string": "two", "new_string": "2" }),
            ToolContext::after(&[&wrote]),
        )
        .await;
    assert!(twice.is_error, "ambiguous edits are refused");
    assert!(
        error_text(&twice).contains("(at lines 1, 1)"),
        "{:?}",
        twice.output
    );
    let edited = edit
        .run(
            json!({ "file_path": "new/dir/a.txt", "old_string": "two", "new_string": "2", "replace_all": true }),
            ToolContext::after(&[&wrote]),
        )
        .await;
    assert!(!edited.is_error, "{:?}", edited.output);
    assert_eq!(edited.output["total_matches"], 2);
    assert_eq!(edited.output["replacements"], 2);
    // The file changed since the write was recorded: refused until read again.
    let stale = edit
        .run(
            json!({ "file_path": "new/dir/a.txt", "old_string": "one", "new_string": "1" }),
            ToolContext::after(&[&wrote]),
        )
        .await;
    assert!(
        error_text(&stale).starts_with("The file changed since it was read"),
        "{:?}",
        stale.output
    );
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
            json!({ "pattern": "secret|println", "output_mode": "content" }),
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
        .run(
            json!({ "pattern": "alpha", "output_mode": "content" }),
            ToolContext::detached(),
        )
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

/// Runs `name` with `input` the way the pipeline does: `check`, then `run`.
async fn call(tools: &ToolRegistry, name: &str, input: Value) -> ToolOutcome {
    let tool = tools.get(name).unwrap().clone();
    tool.check(&input).expect("a valid call inside the roots");
    tool.run(input, ToolContext::detached()).await
}

fn notice(outcome: &ToolOutcome) -> String {
    outcome.output["notice"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A temporary directory in memory where the system has one: creating 100,000 files on this
/// disk takes more than a minute, in `/dev/shm` a few seconds.
fn in_memory_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().unwrap()
}

/// RES-09: a tree larger than the walk's cap (100,000 entries) is searched in part, and both
/// tools say so, even when nothing in the part they saw matched.
#[tokio::test]
async fn res_09_a_search_over_more_entries_than_the_walk_cap_says_it_is_partial() {
    let root = in_memory_tempdir();
    // 100 directories of 1,005 empty files: 100,600 entries.
    for dir in 0..100 {
        let dir = root.path().join(format!("d{dir:03}"));
        std::fs::create_dir(&dir).unwrap();
        for file in 0..1_005 {
            std::fs::File::create(dir.join(format!("f{file:04}"))).unwrap();
        }
    }
    let tools = config(root.path()).build(Vec::new()).await.unwrap();

    let everything = call(
        &tools,
        "Glob",
        json!({ "pattern": "**/*", "max_results": 1_000 }),
    )
    .await;
    assert!(!everything.is_error);
    assert_eq!(everything.output["count"], 1_000);
    assert_eq!(everything.output["truncated"], true);
    assert!(
        notice(&everything).contains("stopped after 100000"),
        "{:?}",
        everything.output
    );

    // Nothing matches in the part that was walked: still not a complete "no such file".
    let nothing = call(&tools, "Glob", json!({ "pattern": "**/*.rs" })).await;
    assert_eq!(nothing.output["count"], 0);
    assert_eq!(nothing.output["truncated"], true);
    assert!(nothing.summary.contains("partial"), "{}", nothing.summary);

    let grep = call(
        &tools,
        "Grep",
        json!({ "pattern": "needle", "output_mode": "content" }),
    )
    .await;
    assert_eq!(grep.output["count"], 0);
    assert_eq!(grep.output["truncated"], true);
    assert!(
        notice(&grep).contains("stopped after 100000"),
        "{:?}",
        grep.output
    );

    // A path inside the tree is under the cap: complete, and exactly 1,000 matches of 1,005 is
    // a cut by the match limit.
    let one_dir = call(
        &tools,
        "Glob",
        json!({ "pattern": "*", "path": "d000", "max_results": 1_000 }),
    )
    .await;
    assert_eq!(one_dir.output["count"], 1_000);
    assert_eq!(one_dir.output["truncated"], true);
    let said = notice(&one_dir);
    assert!(
        said.contains("first 1000 matches") && !said.contains("stopped"),
        "{said}"
    );
}

/// RES-09: the match limit cuts at 1,000 and says so; exactly 1,000 matches is a whole result.
#[tokio::test]
async fn res_09_the_match_limit_says_it_cut_and_exactly_the_limit_is_whole() {
    let root = tempfile::tempdir().unwrap();
    let hits = |n: usize| "hit\n".repeat(n);
    std::fs::write(root.path().join("exact.txt"), hits(1_000)).unwrap();
    std::fs::write(root.path().join("over.txt"), hits(1_001)).unwrap();
    let mut config = config(root.path());
    config.max_output_bytes = 1 << 20;
    let tools = config.build(Vec::new()).await.unwrap();

    let exact = call(
        &tools,
        "Grep",
        json!({ "pattern": "hit", "glob": "exact.txt", "output_mode": "content" }),
    )
    .await;
    assert_eq!(exact.output["count"], 1_000);
    assert_eq!(exact.output["truncated"], false);
    assert!(exact.output.get("notice").is_none());

    let over = call(
        &tools,
        "Grep",
        json!({ "pattern": "hit", "glob": "over.txt", "output_mode": "content" }),
    )
    .await;
    assert_eq!(over.output["count"], 1_000);
    assert_eq!(over.output["truncated"], true);
    assert!(
        notice(&over).contains("first 1000 matches"),
        "{:?}",
        over.output
    );
    let last = over.output["matches"]
        .as_str()
        .unwrap()
        .lines()
        .last()
        .unwrap();
    assert_eq!(last, "over.txt:1000:hit");
}

/// RES-09: symlink loops (a directory link to its parent, to itself, and two links pointing at
/// each other) end the walk normally, and every real file is listed and searched exactly once.
#[tokio::test]
async fn res_09_a_symlink_loop_ends_and_lists_nothing_twice() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    std::fs::create_dir(dir.join("a")).unwrap();
    std::fs::write(dir.join("a/inner.txt"), "needle\n").unwrap();
    std::fs::write(dir.join("top.txt"), "needle\n").unwrap();
    std::os::unix::fs::symlink("..", dir.join("a/up")).unwrap();
    std::os::unix::fs::symlink(".", dir.join("a/here")).unwrap();
    std::os::unix::fs::symlink("y", dir.join("x")).unwrap();
    std::os::unix::fs::symlink("x", dir.join("y")).unwrap();
    let mut config = config(dir);
    config.max_output_bytes = 10_000;
    let tools = config.build(Vec::new()).await.unwrap();

    let globbed = call(&tools, "Glob", json!({ "pattern": "**/*" })).await;
    assert_eq!(globbed.output["files"], "a/inner.txt\ntop.txt");
    assert_eq!(globbed.output["truncated"], false);
    let grep = call(
        &tools,
        "Grep",
        json!({ "pattern": "needle", "output_mode": "content" }),
    )
    .await;
    assert_eq!(
        grep.output["matches"],
        "a/inner.txt:1:needle\ntop.txt:1:needle"
    );
    // Searching from inside the loop, through the link, finds the same two files once each.
    let through = call(&tools, "Glob", json!({ "pattern": "**/*", "path": "a/up" })).await;
    assert_eq!(through.output["files"], "a/inner.txt\ntop.txt");
}

/// RES-09: a pattern whose automaton would be huge (an exploding repetition), nesting past the
/// parser's limit, a long pattern with a syntax error and a 1 MiB pattern are refused as short
/// tool errors that say why, by `check` and by `run`; so is a 1 MiB glob.
#[tokio::test]
async fn res_09_a_huge_or_exploding_grep_pattern_is_a_tool_error() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "aaaa\n").unwrap();
    let tools = config(root.path()).build(Vec::new()).await.unwrap();
    let grep = tools.get("Grep").unwrap().clone();
    let glob = tools.get("Glob").unwrap().clone();
    let calls = [
        (&grep, json!({ "pattern": "(a{1000}){1000}" }), "size limit"),
        (
            &grep,
            json!({ "pattern": format!("{}a{}", "(".repeat(1_000), ")".repeat(1_000)) }),
            "nested parentheses",
        ),
        // A syntax error quotes the pattern: the answer keeps the reason, not the whole quote.
        (
            &grep,
            json!({ "pattern": format!("({}", "a".repeat(60_000)) }),
            "unclosed group",
        ),
        // Refused before parsing, which would hold a syntax tree of about 100 MB.
        (
            &grep,
            json!({ "pattern": "a".repeat(1 << 20) }),
            "the limit is 65536 bytes",
        ),
        (
            &grep,
            json!({ "pattern": "a", "glob": "*".repeat(1 << 20) }),
            "the limit is 4096 bytes",
        ),
        (
            &glob,
            json!({ "pattern": "[".repeat(1 << 20) }),
            "the limit is 4096 bytes",
        ),
    ];
    for (tool, input, reason) in calls {
        let text = input.to_string();
        let shown = &text[..text.len().min(40)];
        let refused = tool.check(&input).unwrap_err();
        assert!(refused.contains(reason), "{shown}: {refused}");
        let outcome = tool.run(input, ToolContext::detached()).await;
        assert!(outcome.is_error, "{shown}: {:?}", outcome.output);
        let error = outcome.output["error"].as_str().unwrap();
        assert!(error.contains(reason), "{shown}: {error}");
        assert!(
            error.len() < 2_000,
            "{shown}: {} bytes of error",
            error.len()
        );
    }
}

/// RES-09: a matching line of 4 MiB shows 2,000 bytes and a marker, and a 50 MiB file with no
/// line break is not read at all; the result names it, so its silence is not a "no match".
#[tokio::test]
async fn res_09_grep_on_giant_lines_stays_bounded_and_says_so() {
    let root = tempfile::tempdir().unwrap();
    let long_line = format!("{}needle{}", "a".repeat(2 << 20), "b".repeat(2 << 20));
    std::fs::write(root.path().join("one-line.txt"), &long_line).unwrap();
    let huge = std::fs::File::create(root.path().join("huge.log")).unwrap();
    // "needle" followed by 50 MiB of NUL bytes (sparse): one line, valid UTF-8.
    std::io::Write::write_all(&mut &huge, b"needle").unwrap();
    huge.set_len(50 << 20).unwrap();
    let tools = config(root.path()).build(Vec::new()).await.unwrap();

    let grep = call(
        &tools,
        "Grep",
        json!({ "pattern": "needle", "output_mode": "content" }),
    )
    .await;
    assert!(!grep.is_error);
    assert_eq!(grep.output["count"], 1);
    let matches = grep.output["matches"].as_str().unwrap();
    let omitted = long_line.len() - 2_000;
    assert!(
        matches.starts_with("one-line.txt:1:aaaa")
            && matches.ends_with(&format!("[… line truncated: {omitted} more bytes …]")),
        "{}",
        &matches[matches.len().saturating_sub(200)..]
    );
    assert!(matches.len() < 2_200, "{} bytes shown", matches.len());
    assert_eq!(grep.output["truncated"], true);
    assert!(
        notice(&grep).contains("not searched: huge.log"),
        "{:?}",
        grep.output["notice"]
    );
}

/// RES-09: glob patterns built to make a backtracking matcher explode (`**a` forty times before a
/// `**b` that never matches, against a name of 100 `a`s) get the right answer, and a 1 MiB
/// pattern (which a recursive matcher would recurse into once per token) is a tool error.
#[tokio::test]
async fn res_09_a_glob_pattern_built_to_backtrack_gets_the_right_answer() {
    let root = tempfile::tempdir().unwrap();
    let name = "a".repeat(100);
    std::fs::write(root.path().join(&name), "needle\n").unwrap();
    let tools = config(root.path()).build(Vec::new()).await.unwrap();

    let never = format!("{}**b", "**a".repeat(40));
    let none = call(&tools, "Glob", json!({ "pattern": never })).await;
    assert_eq!(none.output["count"], 0);
    let grep = call(
        &tools,
        "Grep",
        json!({ "pattern": "needle", "glob": never }),
    )
    .await;
    assert_eq!(grep.output["count"], 0);
    let always = "**a".repeat(40);
    let one = call(&tools, "Glob", json!({ "pattern": always })).await;
    assert_eq!(one.output["files"], name.as_str());
    let slashes = format!("{}*", "*/".repeat(40));
    let none = call(&tools, "Glob", json!({ "pattern": slashes })).await;
    assert_eq!(none.output["count"], 0);
}

/// TOOL-04: a racing thread swaps `root/f` between a regular file and a symlink to a secret file
/// outside the root, and `root/d` between a directory and a symlink to the outside directory,
/// each with one atomic `renameat2(RENAME_EXCHANGE)`, in a tight loop while the file tools run.
/// Checking a path and then opening it by name loses this race; the tools open beneath the root
/// with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so a swapped-in link is never followed.
/// 10,000 Reads, 500 Greps and 1,000 Writes: none reads the secret, none writes outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_04_a_symlink_swapped_in_between_check_and_open_is_never_followed() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const SECRET: &str = "SWAPPED-SECRET-4b1d";
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root_path = root.path().to_path_buf();
    // The outside directory mirrors the root's names, so a followed link anywhere finds the secret.
    std::fs::write(outside.path().join("f"), format!("{SECRET}\n")).unwrap();
    std::fs::write(root_path.join("f"), "inside\n").unwrap();
    std::os::unix::fs::symlink(outside.path().join("f"), root_path.join("f-link")).unwrap();
    std::fs::create_dir(root_path.join("d")).unwrap();
    std::fs::write(root_path.join("d/f"), "inside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), root_path.join("d-link")).unwrap();
    let outside_before = std::fs::read_dir(outside.path()).unwrap().count();

    let mut config = config(&root_path);
    config.max_output_bytes = 10_000;
    let tools = config.build(Vec::new()).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let racer = {
        let (stop, swaps, root) = (stop.clone(), swaps.clone(), root_path.clone());
        std::thread::spawn(move || {
            use rustix::fs::{CWD, RenameFlags, renameat_with};
            while !stop.load(Ordering::Relaxed) {
                for (a, b) in [("f", "f-link"), ("d", "d-link")] {
                    renameat_with(CWD, root.join(a), CWD, root.join(b), RenameFlags::EXCHANGE)
                        .expect("the swap works");
                }
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let (mut leaked, mut inside_reads, mut refused) = (Vec::new(), 0, 0);
    let reads = 10_000;
    for i in 0..reads {
        let path = ["f", "d/f", "f-link", "d-link/f"][i % 4];
        let outcome = tools
            .get("Read")
            .unwrap()
            .run(json!({ "file_path": path }), ToolContext::detached())
            .await;
        let text = outcome.output.to_string();
        if text.contains(SECRET) {
            leaked.push(format!("Read {path}: {text}"));
        } else if outcome.is_error {
            refused += 1;
        } else if outcome.output == "inside\n" {
            inside_reads += 1;
        }
    }
    for _ in 0..500 {
        let outcome = tools
            .get("Grep")
            .unwrap()
            .run(
                json!({ "pattern": "SECRET|inside" }),
                ToolContext::detached(),
            )
            .await;
        let text = outcome.output.to_string();
        if text.contains(SECRET) {
            leaked.push(format!("Grep: {text}"));
        }
    }
    for i in 0..1_000 {
        let path = ["f", "d/f", "f-link", "d-link/f"][i % 4];
        tools
            .get("Write")
            .unwrap()
            .run(
                json!({ "file_path": path, "content": "inside\n" }),
                ToolContext::detached(),
            )
            .await;
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();

    let swaps = swaps.load(Ordering::Relaxed);
    assert!(
        leaked.is_empty(),
        "{} of {reads} Reads and the Greps read the secret, e.g. {:?}",
        leaked.len(),
        &leaked[..leaked.len().min(3)]
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("f")).unwrap(),
        format!("{SECRET}\n"),
        "a Write went through a swapped-in link"
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        outside_before,
        "a Write created a file outside the root"
    );
    // The race really ran: the names were swapped throughout and both outcomes occurred.
    assert!(swaps > 100, "only {swaps} swaps");
    assert!(
        inside_reads > 0 && refused > 0,
        "{inside_reads} inside reads, {refused} refusals"
    );
}

/// SEC-06: the executor's own secrets are outside every root by construction. A deployment's
/// layout in a temporary host directory (the configuration file as in deploy/, a credential
/// directory, a Kubernetes service-account token) next to per-session workspaces: Read, Grep and
/// Glob of each, and of `/proc/self/environ`, `/proc/<executor pid>/environ`, `/proc/self/mem`
/// and `/proc/self/root/<config>`, are path refusals in `check` and in `run`, with no byte of any
/// secret; a search over the whole workspace finds none of them; and a root that would contain
/// `/proc` (`/`, `/proc`) is refused at start-up.
#[tokio::test]
async fn sec_06_tools_cannot_read_the_executors_own_secrets() {
    const CANARY: &str = "EXECUTOR-SECRET-06";
    let host = tempfile::tempdir().unwrap();
    let h = host.path().canonicalize().unwrap();
    let secrets = [
        "etc/agent-runtime/config/executor.toml",
        "etc/agent-runtime/jwt/jwks.json",
        "run/secrets/openai-key",
        "var/run/secrets/kubernetes.io/serviceaccount/token",
    ];
    for secret in secrets {
        let path = h.join(secret);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("{CANARY} {secret}\n")).unwrap();
    }
    let tools = ToolsConfig {
        builtin_tools: true,
        workspace_root: Some(h.join("var/lib/agent-runtime/workspaces")),
        max_output_bytes: 100_000,
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .map(std::sync::Arc::new)
    .unwrap()
    .for_session("tenant-a", "session-1");
    let pid = std::process::id();
    let mut targets: Vec<String> = secrets
        .iter()
        .map(|s| h.join(s).display().to_string())
        .collect();
    targets.extend([
        h.join("etc/agent-runtime/jwt").display().to_string(),
        h.join("run/secrets").display().to_string(),
        "../../../../../etc/agent-runtime/config/executor.toml".to_owned(),
        "/proc/self/environ".to_owned(),
        format!("/proc/{pid}/environ"),
        "/proc/thread-self/environ".to_owned(),
        "/proc/self/mem".to_owned(),
        format!("/proc/{pid}/mem"),
        "/proc/self".to_owned(),
        format!("/proc/self/root{}", h.join(secrets[0]).display()),
        format!("/proc/{pid}/cwd"),
    ]);
    for target in &targets {
        for (name, input) in [
            ("Read", json!({ "file_path": target })),
            ("Grep", json!({ "pattern": ".", "path": target })),
            ("Glob", json!({ "pattern": "**", "path": target })),
        ] {
            let tool = tools.get(name).unwrap().clone();
            let error = tool
                .check(&input)
                .expect_err(&format!("{name} must refuse {target}"));
            assert!(
                error.contains("outside the allowed roots"),
                "{name} {target}: {error}"
            );
            let outcome = tool.run(input, ToolContext::detached()).await;
            assert!(outcome.is_error, "{name} {target}");
            let text = outcome.output.to_string();
            assert!(
                text.contains("outside the allowed roots"),
                "{name} {target}: {text}"
            );
            assert!(
                !text.contains(CANARY) && !text.contains("PATH="),
                "{name} {target}"
            );
        }
    }
    // The workspace itself holds none of them: a search over all of it finds no secret.
    for (name, input) in [
        ("Grep", json!({ "pattern": CANARY })),
        ("Glob", json!({ "pattern": "**" })),
    ] {
        let outcome = call(&tools, name, input).await;
        assert!(!outcome.is_error, "{name}: {:?}", outcome.output);
        assert_eq!(outcome.output["count"], 0, "{name}: {:?}", outcome.output);
    }
    // No root can hold /proc, the executor's environment and memory.
    for root in ["/", "/proc"] {
        let refused = ToolsConfig {
            builtin_tools: true,
            roots: vec![root.into()],
            ..ToolsConfig::default()
        }
        .build(Vec::new())
        .await
        .expect_err(&format!("a root {root} is refused"));
        assert!(refused.to_string().contains("contains /proc"), "{refused}");
    }
}

/// Notebook JSON bombs cost bounded work: a notebook over the 10 MiB file limit is refused before
/// it is parsed, and one nested past the parser's depth limit is an error result, not a stack
/// overflow; the file is left as it was in both cases.
#[tokio::test]
async fn notebook_json_bombs_are_refused_with_bounded_work() {
    let tree = tree();
    let tools = config(tree.root.path()).build(Vec::new()).await.unwrap();
    let tool = tools.get("NotebookEdit").unwrap();
    let huge = tree.root.path().join("huge.ipynb");
    let mut big = String::from("{\"cells\": [], \"pad\": \"");
    big.push_str(&"x".repeat(11 * 1024 * 1024));
    big.push_str("\"}");
    std::fs::write(&huge, &big).unwrap();
    let deep = tree.root.path().join("deep.ipynb");
    let nested = format!(
        "{{\"cells\": {}{}}}",
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    std::fs::write(&deep, &nested).unwrap();
    for (path, original) in [(&huge, &big), (&deep, &nested)] {
        let input = json!({ "notebook_path": path, "cell_id": "a", "new_source": "x" });
        let outcome = tool.run(input, ToolContext::detached()).await;
        assert!(outcome.is_error, "{path:?}: {:?}", outcome.output);
        assert_eq!(&std::fs::read_to_string(path).unwrap(), original);
    }
}

/// `Read` takes the reference's inputs: the text as it is without `offset`/`limit`; with them,
/// 0-based `offset` and numbered lines (`%6d→`), each cut at 2000 characters; `encoding`
/// base64 (and known binary files) come back base64-encoded; the reference's errors for a
/// missing file and a directory.
#[tokio::test]
async fn read_takes_the_reference_inputs_and_numbers_lines_only_when_asked() {
    let tree = tree();
    let root = tree.root.path();
    std::fs::write(
        root.join("long.txt"),
        format!("short\n{}\nend\n", "x".repeat(2500)),
    )
    .unwrap();
    std::fs::write(root.join("pixel.png"), [0x89, b'P', b'N', b'G', 0, 1]).unwrap();
    let tools = config(root).build(Vec::new()).await.unwrap();
    let read = |input: Value| {
        let tool = tools.get("Read").unwrap().clone();
        async move { tool.run(input, ToolContext::detached()).await }
    };
    let whole = read(json!({ "file_path": "notes.txt" })).await;
    assert_eq!(whole.output, "alpha\nbeta\ngamma\n");
    let tail = read(json!({ "file_path": "notes.txt", "offset": 1 })).await;
    assert_eq!(tail.output, "     2\u{2192}beta\n     3\u{2192}gamma\n");
    let first = read(json!({ "file_path": "notes.txt", "limit": 1 })).await;
    assert_eq!(first.output, "     1\u{2192}alpha\n");
    let cut = read(json!({ "file_path": "long.txt", "offset": 1, "limit": 1 })).await;
    assert_eq!(cut.output, format!("     2\u{2192}{}\n", "x".repeat(2000)));
    let encoded = read(json!({ "file_path": "notes.txt", "encoding": "base64" })).await;
    assert_eq!(encoded.output, "YWxwaGEKYmV0YQpnYW1tYQo=");
    let image = read(json!({ "file_path": "pixel.png" })).await;
    assert_eq!(image.output, "iVBORwAB");
    let missing = read(json!({ "file_path": "nope.txt" })).await;
    assert!(missing.is_error);
    assert!(error_text(&missing).starts_with("File not found: "));
    let directory = read(json!({ "file_path": "src" })).await;
    assert!(error_text(&directory).starts_with("Cannot read a directory"));
}

/// `Glob` and `Grep` take the reference's options: Glob's `max_results` (default 100),
/// `include_directories` and `case_sensitive` (default off); Grep's output modes (files by
/// default, content, count), `-i`, `-n`, context lines, `type`, paging and `multiline`.
#[tokio::test]
async fn glob_and_grep_take_the_reference_options() {
    let tree = tree();
    let root = tree.root.path();
    std::fs::write(root.join("README.MD"), "Alpha\nbeta\n").unwrap();
    std::fs::write(
        root.join("src/lib.rs"),
        "fn a() {}\n// alpha one\nfn b() {}\nfn c() {}\n// alpha two\n",
    )
    .unwrap();
    let tools = config(root).build(Vec::new()).await.unwrap();

    let any_case = call(&tools, "Glob", json!({ "pattern": "*.md" })).await;
    assert_eq!(any_case.output["files"], "README.MD");
    let exact_case = call(
        &tools,
        "Glob",
        json!({ "pattern": "*.md", "case_sensitive": true }),
    )
    .await;
    assert_eq!(exact_case.output["files"], "");
    let with_dirs = call(
        &tools,
        "Glob",
        json!({ "pattern": "s*", "include_directories": true }),
    )
    .await;
    assert_eq!(with_dirs.output["files"], "src");
    let capped = call(
        &tools,
        "Glob",
        json!({ "pattern": "**/*", "max_results": 1 }),
    )
    .await;
    assert_eq!(capped.output["count"], 1);
    assert!(
        notice(&capped).contains("only the first 1 matches"),
        "{:?}",
        capped.output
    );

    let files = call(&tools, "Grep", json!({ "pattern": "alpha", "-i": true })).await;
    assert_eq!(files.output["mode"], "files_with_matches");
    assert_eq!(files.output["files"], "README.MD\nnotes.txt\nsrc/lib.rs");
    let counts = call(
        &tools,
        "Grep",
        json!({ "pattern": "alpha", "output_mode": "count" }),
    )
    .await;
    assert_eq!(counts.output["counts"], "notes.txt:1\nsrc/lib.rs:2");
    let typed = call(
        &tools,
        "Grep",
        json!({ "pattern": "alpha", "type": "rust", "output_mode": "content" }),
    )
    .await;
    assert_eq!(
        typed.output["matches"],
        "src/lib.rs:2:// alpha one\nsrc/lib.rs:5:// alpha two"
    );
    let context = call(
        &tools,
        "Grep",
        json!({ "pattern": "alpha", "glob": "src/*", "output_mode": "content", "-B": 1 }),
    )
    .await;
    assert_eq!(
        context.output["matches"],
        "src/lib.rs-1-fn a() {}\nsrc/lib.rs:2:// alpha one\n--\nsrc/lib.rs-4-fn c() {}\nsrc/lib.rs:5:// alpha two"
    );
    let paged = call(
        &tools,
        "Grep",
        json!({ "pattern": "alpha", "type": "rust", "output_mode": "content", "-n": false,
                "offset": 1, "head_limit": 1 }),
    )
    .await;
    assert_eq!(paged.output["matches"], "src/lib.rs:// alpha two");
    let spanning = call(
        &tools,
        "Grep",
        json!({ "pattern": "one\\nfn b", "multiline": true, "output_mode": "content" }),
    )
    .await;
    assert_eq!(
        spanning.output["matches"],
        "src/lib.rs:2:// alpha one\nsrc/lib.rs:3:fn b() {}"
    );
    let unknown = tools
        .get("Grep")
        .unwrap()
        .check(&json!({ "pattern": "x", "type": "cobol" }));
    assert!(unknown.unwrap_err().contains("unknown file type"));
}
