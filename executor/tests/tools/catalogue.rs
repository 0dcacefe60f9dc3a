//! P0 entries of the reliability catalogue (docs/reliability.md) for path safety of
//! the file tools: TOOL-01 (traversal), TOOL-02 (prefix confusion), TOOL-03 (symlink escape),
//! including hard links and `/proc/self/root`, `/proc/<pid>/cwd` tricks.

use std::path::Path;

use crate::support::{Harness, ScriptedModel};
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::permissions::{PermissionMode, Rule};
use agent_runtime_executor::provider::{ModelToolCall, ModelTurn};
use agent_runtime_executor::tools::{ToolContext, ToolOutcome, ToolRegistry, ToolsConfig};
use serde_json::{Value, json};

const CANARY: &str = "OUTSIDE-CANARY-7f3a";

/// `<parent>/root` is the only root; `<parent>/outside/secret.txt` holds the canary.
struct Tree {
    parent: tempfile::TempDir,
}

impl Tree {
    fn new() -> Self {
        let parent = tempfile::tempdir().unwrap();
        std::fs::create_dir(parent.path().join("root")).unwrap();
        std::fs::create_dir(parent.path().join("outside")).unwrap();
        std::fs::write(parent.path().join("root/ok.txt"), "inside\n").unwrap();
        std::fs::write(
            parent.path().join("outside/secret.txt"),
            format!("{CANARY}\n"),
        )
        .unwrap();
        Self { parent }
    }

    fn root(&self) -> std::path::PathBuf {
        self.parent.path().join("root")
    }

    fn path(&self, relative: &str) -> String {
        self.parent.path().join(relative).display().to_string()
    }

    async fn tools(&self) -> ToolRegistry {
        ToolsConfig {
            builtin_tools: true,
            roots: vec![self.root()],
            ..ToolsConfig::default()
        }
        .build(Vec::new())
        .await
        .unwrap()
    }
}

/// Runs `name` through its own check and then `run` (which re-checks), as the pipeline does and
/// as a caller without the pipeline would.
async fn call(tools: &ToolRegistry, name: &str, input: Value) -> (Result<(), String>, ToolOutcome) {
    let tool = tools.get(name).unwrap();
    let checked = tool.check(&input).map(|_| ());
    (checked, tool.run(input, ToolContext::detached()).await)
}

/// Refusals of the path-safety layer: the resolved path is outside every root, or the path
/// walks `..` out of a directory that does not exist (the kernel would refuse it too).
fn is_path_refusal(error: &str) -> bool {
    error.contains("outside the allowed roots")
        || error.contains("after a directory that does not exist")
}

/// Every read-side tool on `path` (Read the file, Glob and Grep under it) and Write of it:
/// refused by path safety (PATH_OUTSIDE_ROOT in the catalogue's words), with no byte of the
/// canary in any answer.
async fn assert_refused(tools: &ToolRegistry, path: &str) {
    for (name, input) in [
        ("Read", json!({ "file_path": path })),
        ("Glob", json!({ "pattern": "**/*", "path": path })),
        ("Grep", json!({ "pattern": "CANARY", "path": path })),
        (
            "Write",
            json!({ "file_path": path, "content": "clobbered" }),
        ),
    ] {
        let tool = tools.get(name).unwrap();
        // Checked first, and `run` only after a refusal: a Write to /etc/passwd must never run
        // for real if the check ever regressed.
        let error = tool
            .check(&input)
            .expect_err(&format!("{name} must refuse {path}"));
        assert!(is_path_refusal(&error), "{name} {path}: {error}");
        let outcome = tool.run(input, ToolContext::detached()).await;
        assert!(outcome.is_error, "{name} ran on {path}");
        let told = outcome.output["error"].as_str().unwrap();
        assert!(is_path_refusal(told), "{name} {path}: {told}");
        assert!(
            !outcome.output.to_string().contains(CANARY),
            "{name} {path}"
        );
    }
}

/// TOOL-01. The catalogue's inputs, relative to the root (the tools' working directory). `~`,
/// `%2e%2e` and backslashes are not special to the Linux kernel: they are literal names that
/// resolve *inside* the root (and do not exist), so for them the expected result is "nothing
/// outside is read" (an error result without the canary) rather than PATH_OUTSIDE_ROOT.
#[tokio::test]
async fn tool_01_traversal() {
    let tree = Tree::new();
    let tools = tree.tools().await;
    for outside in [
        "../../etc/passwd",
        "../outside/secret.txt",
        "root/../../etc",
        "ok.txt/../../outside/secret.txt",
        "/etc/shadow",
        "/etc/passwd",
        &tree.path("outside/secret.txt"),
        &tree.path("root/../outside/secret.txt"),
        &format!("{}/.", tree.path("outside")),
        "../outside/.",
        "..",
        "/",
        // /proc tricks: both are symlinks the resolver follows to where they really lead.
        &format!("/proc/self/root{}", tree.path("outside/secret.txt")),
        &format!("/proc/{}/cwd/Cargo.toml", std::process::id()),
        "/proc/self/cwd",
        "/proc/self/environ",
    ] {
        assert_refused(&tools, outside).await;
    }
    for literal in [
        "~",
        "~/.ssh/id_rsa",
        "%2e%2e/outside/secret.txt",
        "..%2f..%2fetc/passwd",
        ".\\..\\outside\\secret.txt",
    ] {
        let (checked, outcome) = call(&tools, "Read", json!({ "file_path": literal })).await;
        assert!(checked.is_ok(), "{literal} is a name inside the root");
        assert!(outcome.is_error, "{literal} does not exist: {outcome:?}");
        assert!(!outcome.output.to_string().contains(CANARY), "{literal}");
    }
    // A trailing `/.` inside the root stays inside.
    let (checked, _) = call(&tools, "Glob", json!({ "pattern": "*", "path": "./." })).await;
    assert!(checked.is_ok());
    assert_eq!(
        std::fs::read_to_string(tree.path("outside/secret.txt")).unwrap(),
        format!("{CANARY}\n")
    );
    assert!(!Path::new(&tree.path("outside/new.txt")).exists());
}

/// TOOL-02: containment is by path component, never by string prefix.
#[tokio::test]
async fn tool_02_prefix_confusion() {
    let tree = Tree::new();
    for sibling in ["root-evil", "root_evil", "rootX", "root.bak", "roo"] {
        std::fs::create_dir(tree.parent.path().join(sibling)).unwrap();
        std::fs::write(
            tree.parent.path().join(sibling).join("secret.txt"),
            format!("{CANARY}\n"),
        )
        .unwrap();
    }
    let tools = tree.tools().await;
    for sibling in ["root-evil", "root_evil", "rootX", "root.bak", "roo"] {
        assert_refused(&tools, &tree.path(&format!("{sibling}/secret.txt"))).await;
        assert_refused(&tools, &tree.path(sibling)).await;
        assert_refused(&tools, &format!("../{sibling}/secret.txt")).await;
        assert_refused(&tools, &format!("../{sibling}")).await;
    }
    // The root itself and a path inside it are fine.
    let (checked, outcome) = call(
        &tools,
        "Read",
        json!({ "file_path": tree.path("root/ok.txt") }),
    )
    .await;
    assert!(checked.is_ok() && !outcome.is_error, "{outcome:?}");
}

/// TOOL-03: links out of the root (to a system dir, to a key, a chain of relative links, to a
/// configuration dir, `/proc/self/root`) and a hard link to an outside file are refused; Glob
/// and Grep do not follow or read them while walking; and deny rules apply to the *resolved*
/// path, through the real pipeline.
#[tokio::test]
async fn tool_03_symlink_escape() {
    let tree = Tree::new();
    let root = tree.root();
    let home = tree.parent.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), format!("{CANARY}\n")).unwrap();
    let config_dir = tree.parent.path().join("etc-agent-runtime");
    std::fs::create_dir(&config_dir).unwrap();
    std::fs::write(config_dir.join("executor.toml"), format!("# {CANARY}\n")).unwrap();
    let link =
        |target: &Path, name: &str| std::os::unix::fs::symlink(target, root.join(name)).unwrap();
    link(Path::new("/etc"), "link");
    link(&home.join(".ssh/id_rsa"), "link2");
    // a -> b -> ../outside (relative links, resolved one after the other).
    link(Path::new("b"), "a");
    link(Path::new("../outside"), "b");
    link(&config_dir, "config");
    link(Path::new("/proc/self/root"), "proc-root");
    std::fs::hard_link(tree.path("outside/secret.txt"), root.join("hard.txt")).unwrap();
    let tools = tree.tools().await;

    for escape in [
        "link/passwd",
        "link",
        "link2",
        "a/secret.txt",
        "a",
        "b/secret.txt",
        "config/executor.toml",
        "config",
        &format!("proc-root{}", tree.path("outside/secret.txt")),
    ] {
        assert_refused(&tools, escape).await;
    }
    // The hard link lies inside the root by path, but it is the outside file: the file tools
    // refuse it for reading and writing, and Grep does not read it.
    for (name, input) in [
        ("Read", json!({ "file_path": "hard.txt" })),
        (
            "Write",
            json!({ "file_path": "hard.txt", "content": "clobbered" }),
        ),
        (
            "Edit",
            json!({ "file_path": "hard.txt", "old_string": CANARY, "new_string": "clobbered" }),
        ),
    ] {
        let (checked, outcome) = call(&tools, name, input).await;
        assert!(checked.unwrap_err().contains("hard links"), "{name}");
        assert!(
            outcome.is_error && !outcome.output.to_string().contains(CANARY),
            "{name}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(tree.path("outside/secret.txt")).unwrap(),
        format!("{CANARY}\n"),
        "nothing was written through the hard link"
    );
    let (_, globbed) = call(&tools, "Glob", json!({ "pattern": "**/*" })).await;
    assert_eq!(
        globbed.output["files"], "hard.txt\nok.txt",
        "links are not listed or walked"
    );
    let (_, grep) = call(
        &tools,
        "Grep",
        json!({ "pattern": "CANARY|inside", "output_mode": "content" }),
    )
    .await;
    assert_eq!(grep.output["matches"], "ok.txt:1:inside");

    // Deny rules match the resolved path: `alias` -> `private/secret.txt` is denied by a rule
    // written for `private/**`, in yolo mode, through the session pipeline.
    std::fs::create_dir(root.join("private")).unwrap();
    std::fs::write(root.join("private/secret.txt"), "private\n").unwrap();
    link(Path::new("private/secret.txt"), "alias");
    let real_root = root.canonicalize().unwrap();
    let mut config = ExecutorConfig::default();
    config.permissions.mode = PermissionMode::Yolo;
    config.permissions.rules.deny =
        vec![Rule::parse(&format!("Read:{}/private/**", real_root.display())).unwrap()];
    let read = |path: &str| ModelToolCall {
        id: format!("read-{path}"),
        name: "Read".into(),
        arguments: json!({ "file_path": path }).to_string(),
    };
    let turns = vec![
        ModelTurn {
            tool_calls: vec![read("alias"), read("private/secret.txt"), read("ok.txt")],
            ..ModelTurn::default()
        },
        ModelTurn {
            content: "done".into(),
            ..ModelTurn::default()
        },
    ];
    let harness = Harness::new(ScriptedModel::new(turns), tools, config);
    let session = harness.create().await;
    harness.submit(&session, "go").await;
    let events = harness.until_result(&session, 0).await;
    let results: Vec<Value> = events
        .iter()
        .filter(|e| e.data["type"] == "tool_result")
        .map(|e| Value::Object((*e.data).clone()))
        .collect();
    assert_eq!(results.len(), 3);
    for denied in &results[..2] {
        assert_eq!(denied["isError"], true, "{denied}");
        let error = denied["output"]["error"].as_str().unwrap();
        assert!(error.contains("Denied by the permission rule"), "{error}");
        assert!(!denied.to_string().contains("private\\n"), "{denied}");
    }
    assert_eq!(results[2]["isError"], false);
}
