//! P0 entries of the reliability catalogue (docs/reliability.md) for `Bash` and its
//! bubblewrap sandbox: TOOL-06, TOOL-09, TOOL-10, TOOL-23, RES-08 and SEC-05, and TOOL-11, TOOL-13,
//! LEASE-08, LEASE-14. Every sandbox test needs `bwrap` (scripts/test.sh installs it) and fails,
//! not skips, without it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::support::error_text;
use crate::support::{ScriptedModel, tool_turn};
use agent_runtime::clock;
use agent_runtime::executor_port::{CommandContext, SessionCommands};
use agent_runtime::protocol::command::{CreateSessionData, SessionRef, SubmitInputData};
use agent_runtime::protocol::content::UserContent;
use agent_runtime::protocol::{EventEnvelope, Principal, Scope};
use agent_runtime::telemetry::NoTelemetry;
use agent_runtime_executor::permissions::PermissionMode;
use agent_runtime_executor::provider::ModelTurn;
use agent_runtime_executor::sandbox::{ETC_ENTRIES, Sandbox, SandboxConfig};
use agent_runtime_executor::tools::{Tool, ToolContext, ToolOutcome, ToolRegistry, ToolsConfig};
use agent_runtime_executor::{
    ExecutorConfig, ExecutorDeps, InProcessExecutor, NoLeases, SessionCaps, StoreSink, WorkerLeases,
};
use agent_runtime_store::{MemoryStore, Store, StoreOptions};
use serde_json::{Value, json};

/// Variables bash itself adds to the allowlisted `PATH`, `HOME`, `LANG` and `TERM`.
const ALLOWED_ENV: &[&str] = &[
    "PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_", "OLDPWD",
];

async fn require_bwrap() {
    let probe = Sandbox::probe(&enabled()).await;
    assert!(
        matches!(probe, Ok(Some(_))),
        "bubblewrap must be installed and runnable for this test (scripts/test.sh installs it): {probe:?}"
    );
}

fn enabled() -> SandboxConfig {
    SandboxConfig {
        enabled: true,
        ..SandboxConfig::default()
    }
}

/// A directory outside `/tmp` (private inside the sandbox), removed at the end.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

async fn registry(config: ToolsConfig) -> ToolRegistry {
    ToolsConfig {
        builtin_tools: true,
        ..config
    }
    .build(Vec::new())
    .await
    .expect("tools build")
}

async fn bash_in(cwd: &Path, sandbox: SandboxConfig) -> Arc<dyn Tool> {
    registry(ToolsConfig {
        cwd: Some(cwd.to_path_buf()),
        sandbox,
        ..ToolsConfig::default()
    })
    .await
    .get("Bash")
    .unwrap()
    .clone()
}

async fn run(tool: &Arc<dyn Tool>, command: &str, timeout_ms: Option<u64>) -> ToolOutcome {
    let mut input = json!({ "command": command });
    if let Some(ms) = timeout_ms {
        input["timeout_ms"] = json!(ms);
    }
    tool.check(&input).expect("a valid Bash call");
    tool.run(input, ToolContext::detached()).await
}

fn stdout(outcome: &ToolOutcome) -> String {
    outcome.output["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `key=value` lines of a probe script; a key may repeat.
fn values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

/// Host processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == std::process::id().to_string() {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(marker)
        {
            found.push(name);
        }
    }
    found
}

async fn wait_until_gone(marker: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "processes of the sandbox remain: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// TOOL-06. As written ("decisions identical") the entry is n.a.: docs/agent.md §4 says `Bash` is
/// not bounded by the roots, only by the sandbox and the rules, and the sandbox shows the system
/// directories read-only. What must agree, and is asserted here path by path: writes outside the
/// workspace are refused by the file tools *and* impossible for sandboxed Bash, and host user data
/// (another directory, `/root`, `/home`) is neither readable by the file tools nor visible to Bash.
/// The two documented divergences (system files readable by Bash, a private `/tmp` writable by
/// Bash) are rows of the table too, so a change in either shows up.
#[tokio::test]
async fn tool_06_tools_and_sandbox_agree_on_writes_and_host_data() {
    require_bwrap().await;
    let root = scratch();
    let outside = scratch();
    std::fs::write(root.path().join("in.txt"), "inside-marker\n").unwrap();
    std::fs::write(outside.path().join("secret.txt"), "outside-marker\n").unwrap();
    let tools = registry(ToolsConfig {
        roots: vec![root.path().to_path_buf()],
        sandbox: enabled(),
        ..ToolsConfig::default()
    })
    .await;
    let inside = root.path().join("in.txt").display().to_string();
    let secret = outside.path().join("secret.txt").display().to_string();
    let outside_dir = outside.path().display().to_string();
    let host_tmp = std::env::temp_dir().join(unique("tool06"));
    let host_tmp = host_tmp.display().to_string();
    let host_tmp_marker = std::env::temp_dir().join(unique("tool06-marker"));
    std::fs::write(&host_tmp_marker, "marker").unwrap();

    struct Row<'a> {
        what: &'a str,
        /// The file the read-side tools and `cat` get, the directory Glob/Grep search.
        read: &'a str,
        dir: &'a str,
        /// The file `Write` and `echo >` create.
        write: String,
        tools_read: bool,
        bash_read: bool,
        tools_write: bool,
        bash_write: bool,
    }
    let root_dir = root.path().display().to_string();
    let rows = [
        Row {
            what: "a file in the workspace",
            read: &inside,
            dir: &root_dir,
            write: format!("{root_dir}/new.txt"),
            tools_read: true,
            bash_read: true,
            tools_write: true,
            bash_write: true,
        },
        Row {
            what: "another host directory (user data, data dir)",
            read: &secret,
            dir: &outside_dir,
            write: format!("{outside_dir}/new.txt"),
            tools_read: false,
            bash_read: false,
            tools_write: false,
            bash_write: false,
        },
        Row {
            what: "the host home",
            read: "/root/.bashrc",
            dir: "/root",
            write: "/root/new.txt".to_owned(),
            tools_read: false,
            bash_read: false,
            tools_write: false,
            bash_write: false,
        },
        Row {
            what: "/home",
            read: "/home",
            dir: "/home",
            write: "/home/new.txt".to_owned(),
            tools_read: false,
            bash_read: false,
            tools_write: false,
            bash_write: false,
        },
        // Divergence (docs/agent.md §4): system files are readable by sandboxed Bash, never
        // writable.
        Row {
            what: "a system file",
            read: "/etc/hosts",
            dir: "/usr/share",
            write: "/usr/new.txt".to_owned(),
            tools_read: false,
            bash_read: true,
            tools_write: false,
            bash_write: false,
        },
        // Divergence: sandboxed Bash writes a private in-memory /tmp, never the host's.
        Row {
            what: "/tmp",
            read: "/tmp",
            dir: "/tmp",
            write: host_tmp.clone(),
            tools_read: false,
            bash_read: false,
            tools_write: false,
            bash_write: true,
        },
    ];
    let bash = &tools.get("Bash").unwrap();
    for row in rows {
        let what = row.what;
        for (name, input) in [
            ("Read", json!({ "file_path": row.read })),
            ("Glob", json!({ "pattern": "**/*", "path": row.dir })),
            ("Grep", json!({ "pattern": "marker", "path": row.dir })),
        ] {
            let tool = tools.get(name).unwrap();
            let checked = tool.check(&input);
            let outcome = tool.run(input, ToolContext::detached()).await;
            assert_eq!(
                checked.is_ok(),
                row.tools_read,
                "{name} on {what}: {checked:?}"
            );
            assert_eq!(
                !outcome.is_error, row.tools_read,
                "{name} on {what}: {outcome:?}"
            );
        }
        let read = row.read;
        let cat = run(
            bash,
            &format!("test -r {read} && (cat {read} || ls {read}) >/dev/null 2>&1"),
            None,
        )
        .await;
        // `/tmp` exists (private) inside: "readable" there means the host's files in it. (Not
        // "empty": when the workspace itself lives under /tmp, its bind mount shows there.)
        let bash_read = match what {
            "/tmp" => {
                let check = format!("test -e {}", host_tmp_marker.display());
                let seen = !run(bash, &check, None).await.is_error;
                let _ = std::fs::remove_file(&host_tmp_marker);
                seen
            }
            _ => !cat.is_error,
        };
        assert_eq!(bash_read, row.bash_read, "Bash read of {what}: {cat:?}");

        let write = tools.get("Write").unwrap();
        let input = json!({ "file_path": row.write, "content": "x" });
        let checked = write.check(&input);
        let outcome = write.run(input, ToolContext::detached()).await;
        assert_eq!(
            checked.is_ok(),
            row.tools_write,
            "Write to {what}: {checked:?}"
        );
        assert_eq!(!outcome.is_error, row.tools_write, "Write to {what}");
        let _ = std::fs::remove_file(&row.write);
        let echoed = run(
            bash,
            &format!("echo x > {} && cat {}", row.write, row.write),
            None,
        )
        .await;
        assert_eq!(
            !echoed.is_error, row.bash_write,
            "Bash write to {what}: {echoed:?}"
        );
        if what == "/tmp" {
            assert!(
                !Path::new(&host_tmp).exists(),
                "the sandbox's /tmp is not the host's"
            );
        } else {
            assert_eq!(
                Path::new(&row.write).exists(),
                row.bash_write,
                "Bash write to {what} reached the host"
            );
        }
        let _ = std::fs::remove_file(&row.write);
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "outside-marker\n"
    );
}

/// TOOL-09: no controlling terminal (bwrap `--new-session`, stdin `/dev/null`, output pipes),
/// so TIOCSTI, its `| 0x100000000` variant and TIOCLINUX all fail. Perl instead of a C program:
/// it is in every image that has bash's usual tools, and `ioctl` is a builtin.
#[tokio::test]
async fn tool_09_tiocsti_and_tioclinux_are_refused() {
    require_bwrap().await;
    let cwd = scratch();
    let bash = bash_in(cwd.path(), enabled()).await;
    let script = r#"perl -e '
my $c = "x";
if (open(my $t, "+<", "/dev/tty")) {
  print "tty=open\n";
  print(ioctl($t, 0x5412, $c) ? "ioctl=ok\n" : "ioctl=$!\n");
} else { print "tty=$!\n"; }
for my $fd (0, 1, 2) {
  my $mode = $fd == 0 ? "<&=" : ">&=";
  open(my $h, $mode, $fd) or do { print "ioctl=open $fd: $!\n"; next };
  print(ioctl($h, 0x5412, $c) ? "ioctl=ok\n" : "ioctl=TIOCSTI $fd: $!\n");
  print(ioctl($h, 0x100005412, $c) ? "ioctl=ok\n" : "ioctl=TIOCSTI64 $fd: $!\n");
  my $sel = "\x0b";
  print(ioctl($h, 0x541C, $sel) ? "ioctl=ok\n" : "ioctl=TIOCLINUX $fd: $!\n");
}'"#;
    let outcome = run(&bash, script, None).await;
    let out = stdout(&outcome);
    assert_eq!(values(&out, "tty"), ["No such device or address"], "{out}");
    let ioctls = values(&out, "ioctl");
    assert_eq!(ioctls.len(), 9, "{out}");
    for result in ioctls {
        assert!(
            result.ends_with("Inappropriate ioctl for device"),
            "every injection attempt fails: {out}"
        );
    }
}

/// TOOL-10: one sandboxed script prints what it can see; one assertion per probe.
#[tokio::test]
async fn tool_10_sandbox_visibility_audit() {
    require_bwrap().await;
    let cwd = scratch();
    // A stand-in for a user's home with a key: a host directory outside the working directory.
    let home = scratch();
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    std::fs::write(home.path().join(".ssh/id_rsa"), "PRIVATE-KEY-CANARY").unwrap();
    let key = home.path().join(".ssh/id_rsa").display().to_string();
    let bash = bash_in(cwd.path(), enabled()).await;
    let script = format!(
        r#"echo "pids=$(ls /proc | grep -cE '^[0-9]+$')"
echo "env=$(env | cut -d= -f1 | sort | tr '\n' ' ')"
echo "etc=$(ls -A /etc | tr '\n' ' ')"
for p in /root /home /var/run/docker.sock /run /srv /var /etc/agent-runtime {key} {home}; do
  if test -e "$p"; then echo "visible=$p"; fi
done
cat {key} 2>/dev/null
grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status | tr -d '\t ' | sed 's/^/cap=/'
if getent hosts example.com >/dev/null 2>&1; then echo dns=yes; else echo dns=no; fi
if (echo > /dev/tcp/1.1.1.1/53) 2>/dev/null; then echo net=yes; else echo net=no; fi
"#,
        home = home.path().display()
    );
    let outcome = run(&bash, &script, None).await;
    let out = stdout(&outcome);
    assert!(!outcome.is_error, "{outcome:?}");

    // Only the sandbox's pid namespace: a handful of processes, not the host's hundreds.
    let pids: usize = values(&out, "pids")[0].parse().unwrap();
    assert!(pids <= 8, "{pids} processes visible: {out}");
    for name in values(&out, "env")[0].split_whitespace() {
        assert!(
            ALLOWED_ENV.contains(&name),
            "{name} leaked into the sandbox"
        );
    }
    // Only the allowlisted files of /etc: not the executor's configuration (/etc/agent-runtime in
    // the deploy files) nor anything else an operator keeps there.
    for entry in values(&out, "etc")[0].split_whitespace() {
        assert!(ETC_ENTRIES.contains(&entry), "/etc/{entry} is visible");
    }
    assert_eq!(values(&out, "visible"), Vec::<&str>::new(), "{out}");
    assert!(!out.contains("PRIVATE-KEY-CANARY"), "{out}");
    let caps = values(&out, "cap");
    assert_eq!(caps.len(), 5, "{out}");
    for cap in caps {
        assert!(
            cap.ends_with(":0000000000000000"),
            "a capability is left: {cap}"
        );
    }
    assert_eq!(values(&out, "dns"), ["no"]);
    assert_eq!(values(&out, "net"), ["no"]);

    // --die-with-parent: a parent (the executor's role) killed with SIGKILL takes the whole
    // sandbox with it.
    let marker = unique("tool10-orphan");
    let sandbox = Sandbox::probe(&enabled()).await.unwrap().unwrap();
    let command = sandbox.command(cwd.path(), &format!("exec -a {marker} sleep 300"));
    let command = command.as_std();
    let mut parent = std::process::Command::new("bash")
        .arg("-c")
        .arg(r#""$@" & wait"#)
        .arg("parent")
        .arg(command.get_program())
        .args(command.get_args())
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while processes_with(&format!("{marker}\0")).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sandbox never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    parent.kill().unwrap();
    parent.wait().unwrap();
    wait_until_gone(&marker).await;
}

/// RES-08, scaled down to run in seconds: tiny limits instead of a full disk and 64 GB.
/// Each hostile command ends as an error result, a concurrent call is served meanwhile, the
/// file stays under the cap and no process of the sandbox remains.
#[tokio::test]
async fn res_08_sandbox_resource_limits() {
    require_bwrap().await;
    let cwd = scratch();
    let limits = SandboxConfig {
        max_processes: 64,
        max_memory_bytes: 256 << 20,
        max_file_bytes: 4 << 20,
        max_cpu_seconds: 1,
        tmp_size_bytes: 2 << 20,
        ..enabled()
    };
    let bash = bash_in(cwd.path(), limits).await;

    // Memory: a 600 MB string under a 256 MiB address-space cap.
    let hog = run(
        &bash,
        "perl -e '$x = \"x\" x 600_000_000; print length $x'",
        None,
    )
    .await;
    assert!(hog.is_error, "{hog:?}");
    assert!(!stdout(&hog).contains("600000000"), "{hog:?}");
    assert_eq!(hog.output.get("error"), None, "not timed out");

    // Disk: `yes` into the workspace stops at the file-size cap (SIGXFSZ) …
    let fill = run(&bash, "yes > big", Some(30_000)).await;
    assert!(
        fill.is_error && fill.output.get("error").is_none(),
        "{fill:?}"
    );
    let size = std::fs::metadata(cwd.path().join("big")).unwrap().len();
    assert!(size <= 4 << 20, "big grew to {size} bytes");
    // … and the private /tmp at its size.
    let tmp = run(&bash, "head -c 3000000 /dev/zero > /tmp/f", None).await;
    assert!(tmp.is_error, "{tmp:?}");
    assert!(
        tmp.output["stderr"]
            .as_str()
            .unwrap()
            .contains("No space left"),
        "{tmp:?}"
    );

    // CPU: a busy loop is stopped by RLIMIT_CPU (1 s here), not by the 30 s timeout.
    let spin = run(&bash, "while :; do :; done", Some(30_000)).await;
    assert!(
        spin.is_error && spin.output.get("error").is_none(),
        "{spin:?}"
    );

    // A bounded fork bomb (400 sleepers, far past the 64-process cap) next to a normal call.
    // The kernel exempts uid 0 from RLIMIT_NPROC (documented in docs/configuration.md), so as
    // root the bomb's processes exist until the timeout tears the pid namespace down; as any
    // other user the forks themselves fail.
    let marker = unique("res08-bomb");
    let bomb = format!("for i in $(seq 400); do ( exec -a {marker} sleep 60 ) & done; wait");
    let (bomb, other) = tokio::join!(run(&bash, &bomb, Some(3_000)), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        run(&bash, "echo still-served", None).await
    });
    assert!(bomb.is_error, "{bomb:?}");
    assert_eq!(stdout(&other), "still-served\n", "{other:?}");
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if !root {
        let stderr = bomb.output["stderr"].as_str().unwrap();
        assert!(
            stderr.contains("Resource temporarily unavailable"),
            "{bomb:?}"
        );
    }
    wait_until_gone(&marker).await;

    // The wall clock still bounds what no rlimit sees.
    let idle = run(&bash, "sleep infinity", Some(500)).await;
    assert!(
        error_text(&idle).starts_with("Command execution timed out"),
        "{:?}",
        idle
    );
    let after = run(&bash, "echo ok", None).await;
    assert_eq!(stdout(&after), "ok\n");
}

/// SEC-05. The executor's own environment must hold the secrets, so the probe runs in a child
/// process of this test (this binary re-run on [`sec_05_child_probe`]) with canaries in its
/// environment: a provider key, a database URL, a cluster secret and a JWT key.
#[tokio::test]
async fn sec_05_sandbox_environment_scrubbing() {
    require_bwrap().await;
    let canary = unique("CANARY");
    let child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sandbox::sec_05_child_probe",
            "--ignored",
            "--nocapture",
        ])
        .env("P0_SEC05_CHILD", "1")
        .env("OPENAI_API_KEY", format!("sk-{canary}"))
        .env(
            "AGENT_RUNTIME_DATABASE_URL",
            format!("postgres://u:{canary}@db/x"),
        )
        .env("AGENT_RUNTIME_CLUSTER_SECRET", format!("cluster-{canary}"))
        .env("AGENT_RUNTIME_JWT_KEY", format!("jwt-{canary}"))
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&child.stdout).into_owned();
    assert!(
        child.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    let probe = |mode: &str| -> Value {
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("SEC05 {mode} ")))
            .unwrap_or_else(|| panic!("no {mode} probe in {out}"));
        serde_json::from_str(line).unwrap()
    };
    let sandboxed = probe("sandboxed");
    for part in ["env", "init", "parent"] {
        let text = sandboxed[part].as_str().unwrap();
        assert!(!text.contains(&canary), "sandboxed {part}: {text}");
        for name in text
            .lines()
            .filter_map(|l| l.split_once('=').map(|(n, _)| n))
        {
            assert!(ALLOWED_ENV.contains(&name), "sandboxed {part}: {name}");
        }
    }
    assert!(sandboxed["env"].as_str().unwrap().contains("PATH="));

    // Without the sandbox Bash's own environment is scrubbed the same way …
    let plain = probe("unsandboxed");
    let env = plain["env"].as_str().unwrap();
    assert!(!env.contains(&canary), "{env}");
    for name in env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n))
    {
        assert!(ALLOWED_ENV.contains(&name), "unsandboxed env: {name}");
    }
    // … but the command runs as the executor's user, next to it, and reads its original
    // environment block from /proc/$PPID/environ. That cannot be prevented without the sandbox
    // (clearing variables at start-up does not change the block); docs/configuration.md and the
    // README say so and tell operators to run Bash only sandboxed. Asserted so the limit stays
    // visible: if this starts failing, the leak was fixed and this line and the docs can go.
    assert!(
        plain["parent"].as_str().unwrap().contains(&canary),
        "documented limit of unsandboxed Bash changed"
    );
}

/// The child half of [`sec_05_sandbox_environment_scrubbing`]; only meaningful with its
/// environment, so it is ignored in normal runs and refuses to run without it.
#[tokio::test]
#[ignore = "run by sec_05_sandbox_environment_scrubbing in a child process"]
async fn sec_05_child_probe() {
    assert!(
        std::env::var_os("P0_SEC05_CHILD").is_some(),
        "only sec_05_sandbox_environment_scrubbing runs this, with canaries in its environment"
    );
    let cwd = scratch();
    for (mode, sandbox) in [
        ("sandboxed", enabled()),
        ("unsandboxed", SandboxConfig::default()),
    ] {
        let bash = bash_in(cwd.path(), sandbox).await;
        let mut parts = serde_json::Map::new();
        for (part, command) in [
            ("env", "env"),
            ("init", "tr '\\0' '\\n' < /proc/1/environ"),
            ("parent", "tr '\\0' '\\n' < /proc/$PPID/environ"),
        ] {
            let outcome = run(&bash, command, None).await;
            parts.insert(part.to_owned(), json!(stdout(&outcome)));
        }
        println!("SEC05 {mode} {}", Value::Object(parts));
    }
}

fn done() -> ModelTurn {
    ModelTurn {
        content: "done".into(),
        ..ModelTurn::default()
    }
}

fn context(tenant: &str) -> CommandContext {
    let scopes = [
        Scope::SessionCreate,
        Scope::SessionRead,
        Scope::SessionWrite,
    ];
    CommandContext {
        principal: Principal::new(tenant, "user", &scopes),
        command_id: "cmd".to_owned(),
        trace: None,
        execution_id: None,
        chosen_session_id: None,
    }
}

/// Runs one input in a new session of `tenant`; the `tool_result` outputs of the request.
async fn session_run(
    executor: &InProcessExecutor,
    store: &Arc<dyn Store>,
    tenant: &str,
) -> (String, Vec<Value>) {
    let context = context(tenant);
    let session = executor
        .create(&context, CreateSessionData { metadata: None })
        .await
        .unwrap()
        .session_id;
    executor
        .submit(
            &context,
            SubmitInputData {
                session_id: session.clone(),
                input: UserContent::Text("go".into()),
                priority: None,
                expected_request_id: None,
                max_turns: None,
            },
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut events: Vec<EventEnvelope> = Vec::new();
    let mut cursor = 0;
    while !events.iter().any(|e| e.data["type"] == "result") {
        let page = store
            .read_events(tenant, &session, cursor, 1000)
            .await
            .unwrap();
        for event in page.events {
            cursor = event.sequence;
            events.push(event);
        }
        if events.iter().any(|e| e.data["type"] == "result") {
            break;
        }
        let wait = store.wait_for_events(tenant, &session, cursor);
        let _ = tokio::time::timeout_at(deadline, wait).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "no result: {:?}",
            events
                .iter()
                .map(|e| Value::Object((*e.data).clone()))
                .collect::<Vec<_>>()
        );
    }
    let results = events
        .iter()
        .filter(|e| e.data["type"] == "tool_result")
        .map(|e| e.data["output"].clone())
        .collect();
    (session, results)
}

/// TOOL-23: S1 (tenant A) writes `secret.txt` with Write and Bash; S2 (tenant B) and S3
/// (tenant A, another session) look for it with Bash `find /`, Glob and a Read of its absolute
/// path: nothing. Closing S1 deletes its workspace.
#[tokio::test]
async fn tool_23_workspace_isolation_between_sessions_and_tenants() {
    require_bwrap().await;
    let workspaces = scratch();
    let tools = registry(ToolsConfig {
        workspace_root: Some(workspaces.path().to_path_buf()),
        sandbox: enabled(),
        ..ToolsConfig::default()
    })
    .await;
    let ws = workspaces.path().canonicalize().unwrap();
    let secret_of = |tenant: &str, session: &str| -> PathBuf { ws.join(tenant).join(session) };

    let look = |s1_dir: &Path| {
        vec![
            tool_turn(
                "",
                &[
                    (
                        "Bash",
                        json!({ "command": "pwd; find / -name 'secret*.txt' 2>/dev/null; ls -a .. ../.. 2>&1" }),
                    ),
                    ("Glob", json!({ "pattern": "**/secret*" })),
                    (
                        "Read",
                        json!({ "file_path": s1_dir.join("secret.txt").display().to_string() }),
                    ),
                ],
            ),
            done(),
        ]
    };
    let write = vec![
        tool_turn(
            "",
            &[
                (
                    "Write",
                    json!({ "file_path": "secret.txt", "content": "A-SECRET" }),
                ),
                (
                    "Bash",
                    json!({ "command": "echo A-BASH-SECRET > secret-bash.txt; pwd" }),
                ),
            ],
        ),
        done(),
    ];
    // S1's id is only known once it exists: the lookers' scripts are added after it ran.
    let script = ScriptedModel::new(write);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let mut config = ExecutorConfig::default();
    config.permissions.mode = PermissionMode::Yolo;
    let telemetry = Arc::new(NoTelemetry);
    let executor = InProcessExecutor::new(
        config,
        ExecutorDeps {
            store: Arc::clone(&store),
            sink: Arc::new(StoreSink::new(Arc::clone(&store), telemetry.clone())),
            provider: script.clone(),
            tools,
            profiles: Vec::new(),
            clock: clock::system(),
            leases: Arc::new(NoLeases),
            telemetry,
        },
    );

    let (s1, wrote) = session_run(&executor, &store, "tenant-a").await;
    let s1_dir = secret_of("tenant-a", &s1);
    assert_eq!(
        std::fs::read_to_string(s1_dir.join("secret.txt")).unwrap(),
        "A-SECRET"
    );
    assert!(s1_dir.join("secret-bash.txt").exists(), "{wrote:?}");
    assert_eq!(wrote[1]["stdout"], format!("{}\n", s1_dir.display()));

    for tenant in ["tenant-b", "tenant-a"] {
        script.push(look(&s1_dir));
        let (session, seen) = session_run(&executor, &store, tenant).await;
        let own = secret_of(tenant, &session);
        assert_ne!(own, s1_dir);
        let listing = seen[0]["stdout"].as_str().unwrap();
        assert!(
            listing.starts_with(&format!("{}\n", own.display())),
            "{listing}"
        );
        assert!(!listing.contains("secret"), "{tenant}: {listing}");
        assert!(
            !listing.contains(&s1),
            "{tenant} sees S1's workspace: {listing}"
        );
        assert_eq!(seen[1]["files"], "", "{tenant}: {:?}", seen[1]);
        let read = seen[2]["error"].as_str().unwrap_or_default();
        assert!(
            read.contains("outside the allowed roots"),
            "{tenant}: {:?}",
            seen[2]
        );
        assert!(!seen[2].to_string().contains("A-SECRET"));
    }

    executor
        .close(&context("tenant-a"), SessionRef::new(&s1))
        .await
        .unwrap();
    assert!(!s1_dir.exists(), "a closed session's workspace is deleted");
}

/// TOOL-13: the model cannot switch the sandbox off or widen what it sees. In `yolo` mode (every
/// call allowed, so only the schema stands in the way), Bash calls that add
/// `dangerouslyDisableSandbox`, `sandbox: false`, a broader root, working directory or writable
/// directory, or a bypass mode, and file tools that add roots, are refused as tool errors
/// ("Invalid input", recorded in the session's events like every tool result) and run nothing:
/// each command would leave a marker in the workspace and try to write outside it. The same
/// command without the extra field then runs, sandboxed: its workspace marker appears, its write
/// outside fails. There is no unsandboxed mode a person could approve: the sandbox is operator
/// configuration only.
#[tokio::test]
async fn tool_13_the_model_cannot_disable_the_sandbox_or_widen_its_roots() {
    require_bwrap().await;
    let cwd = scratch();
    let outside = scratch();
    std::fs::write(outside.path().join("secret.txt"), "OUTSIDE-13\n").unwrap();
    let tools = registry(ToolsConfig {
        cwd: Some(cwd.path().to_path_buf()),
        roots: vec![cwd.path().to_path_buf()],
        sandbox: enabled(),
        ..ToolsConfig::default()
    })
    .await;
    let out = outside.path().display().to_string();
    let command = |n: usize| format!("touch ran-{n}; touch {out}/escaped-{n}");
    let extras: Vec<(&str, Value)> = vec![
        ("dangerouslyDisableSandbox", json!(true)),
        ("sandbox", json!(false)),
        ("sandbox", json!({ "enabled": false, "network": true })),
        ("unsandboxed", json!(true)),
        ("network", json!(true)),
        ("roots", json!(["/"])),
        ("cwd", json!("/")),
        ("workdir", json!(out)),
        ("writable_roots", json!([out])),
        ("additionalDirectories", json!([out])),
        ("permission_mode", json!("bypassPermissions")),
        ("approved", json!(true)),
    ];
    let mut calls: Vec<(&str, Value)> = Vec::new();
    for (n, (field, value)) in extras.iter().enumerate() {
        let mut input = json!({ "command": command(n) });
        input[*field] = value.clone();
        calls.push(("Bash", input));
    }
    let secret = format!("{out}/secret.txt");
    calls.push(("Read", json!({ "file_path": secret, "roots": ["/"] })));
    calls.push((
        "Glob",
        json!({ "pattern": "*", "path": out, "roots": [out] }),
    ));
    calls.push((
        "Grep",
        json!({ "pattern": "OUTSIDE", "path": out, "additionalDirectories": [out] }),
    ));
    let refused = calls.len();
    let script = ScriptedModel::new(vec![
        tool_turn("", &calls),
        tool_turn("", &[("Bash", json!({ "command": command(99) }))]),
        done(),
    ]);
    let mut config = ExecutorConfig::default();
    config.permissions.mode = PermissionMode::Yolo;
    let harness = crate::support::Harness::new(script, tools, config);
    let session = harness.create().await;
    harness.submit(&session, "go").await;
    let events = harness.until_result(&session, 0).await;

    let results: Vec<&EventEnvelope> = events
        .iter()
        .filter(|e| e.data["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), refused + 1);
    for (result, (name, input)) in results.iter().zip(&calls) {
        assert_eq!(result.data["isError"], true, "{name} {input}");
        let error = result.data["output"]["error"].as_str().unwrap_or_default();
        // `cwd` is a Bash input of the reference: it is refused by the roots, not the schema.
        let unknown = error.contains("Invalid input") && error.contains("is not a known field");
        let outside = input.get("cwd").is_some() && error.contains("outside the allowed roots");
        assert!(unknown || outside, "{name} {input}: {error}");
        assert!(!result.data["output"].to_string().contains("OUTSIDE-13"));
    }
    for n in 0..extras.len() {
        assert!(
            !cwd.path().join(format!("ran-{n}")).exists(),
            "call {n} ran"
        );
        assert!(!outside.path().join(format!("escaped-{n}")).exists());
    }
    // The control: the plain call ran, and ran inside the sandbox.
    let control = results.last().unwrap();
    assert!(cwd.path().join("ran-99").exists(), "{:?}", control.data);
    assert!(
        !outside.path().join("escaped-99").exists(),
        "the plain call ran unsandboxed"
    );
    let stderr = control.data["output"]["stderr"]
        .as_str()
        .unwrap_or_default();
    // Outside the workspace is read-only or absent in the sandbox.
    assert!(
        stderr.contains("cannot touch") && stderr.contains("escaped-99"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        1,
        "only the secret is outside"
    );
}

/// LEASE-14: cancelling the request reaches a running sandboxed Bash. The command starts a tree
/// (background sleeps, a subshell, a nested `sh -c` with its own children), every process of it
/// carrying a marker on its command line (the sleep length). Once the tree is up the request is
/// aborted: the whole tree, bwrap included, is gone from the host's `/proc` (the call future is
/// dropped, `kill_on_drop` kills bwrap, `--die-with-parent` takes the sandbox's pid namespace
/// with it), the call ends with one `tool_result` "interrupted", and the request with exactly
/// one terminal `result` (after `error:REQUEST_ABORTED`), nothing after it.
#[tokio::test]
async fn lease_14_an_abort_kills_the_running_sandboxed_process_tree() {
    require_bwrap().await;
    let cwd = scratch();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    // `sleep 300.<unique digits>`: the marker is in every sleeping process's command line.
    let marker = format!("300.{}{nanos:09}", std::process::id());
    let command = format!(
        "sleep {marker} & (sleep {marker}; :) & sh -c 'sleep {marker} & sleep {marker}; wait' & sleep {marker}; wait"
    );
    let tools = registry(ToolsConfig {
        cwd: Some(cwd.path().to_path_buf()),
        sandbox: enabled(),
        ..ToolsConfig::default()
    })
    .await;
    let mut config = ExecutorConfig::default();
    config.permissions.mode = PermissionMode::Yolo;
    let script = ScriptedModel::new(vec![
        tool_turn("", &[("Bash", json!({ "command": command }))]),
        done(),
    ]);
    let harness = crate::support::Harness::new(script, tools, config);
    let session = harness.create().await;
    harness.submit(&session, "go").await;
    harness
        .events_until(&session, 0, |e| e.data["type"] == "tool_use")
        .await;
    // bwrap, its init, bash, the subshell, sh and five sleeps.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while processes_with(&format!("sleep {marker}")).len() < 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tree did not start: {:?}",
            processes_with(&marker)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = processes_with(&marker);
    assert!(before.len() >= 8, "{before:?}");

    harness.abort(&session).await;
    let events = harness.until_result(&session, 0).await;
    wait_until_gone(&marker).await;

    let kinds = crate::support::summary(&events);
    assert_eq!(
        &kinds[kinds.len() - 3..],
        ["tool_result:Bash", "error:REQUEST_ABORTED", "result:error"],
        "{kinds:?}"
    );
    let result = events
        .iter()
        .find(|e| e.data["type"] == "tool_result")
        .unwrap();
    assert_eq!(result.data["isError"], true);
    assert_eq!(
        result.data["output"]["error"],
        "The tool call was interrupted"
    );
    // One terminal event, and nothing after it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let all = harness
        .store
        .read_events(crate::support::TENANT, &session, 0, 1000)
        .await
        .unwrap()
        .events;
    let terminal = all
        .iter()
        .filter(|e| crate::support::stream_type(e) == "result")
        .count();
    assert_eq!(terminal, 1);
    assert_eq!(
        all.last().unwrap().sequence,
        events.last().unwrap().sequence,
        "events after the result"
    );
}

/// TOOL-11: protected paths that do not exist yet cannot be created from the sandbox. Sandboxed
/// Bash tries to create, with `mkdir -p` and a write, an executor configuration beside the real
/// one (`/etc/agent-runtime/…`, and a directory standing in for the deployment's config
/// directory outside the workspace), `~/.ssh/…` of the host's home, `/var/lib/agent-runtime/…`,
/// `/usr/local/…` and a new top-level directory: every one fails inside the sandbox (read-only or
/// absent; the sandbox's own root is read-only too) and nothing appears on the host. A dangling
/// symlink in the workspace pointing at such a path is refused by Write as well. Hook-like files
/// the sandbox may write in its workspace (`.git/hooks/post-checkout`, `.envrc`) are inert: the
/// executor runs no git, direnv or other host-side helper, so after the file tools have worked on
/// that workspace the hooks' host marker still does not exist. The sandbox's root is read-only
/// (not a writable tmpfs), so the creations fail with "Read-only file system" instead of
/// "succeeding" in a private copy that vanishes with the command.
#[tokio::test]
async fn tool_11_absent_protected_paths_cannot_be_created_from_the_sandbox() {
    require_bwrap().await;
    let cwd = scratch();
    // Outside `/tmp`: the sandbox has a private `/tmp`, where a checkout under `/tmp` (as in a
    // clean clone there) would be writable, in a copy the host never sees.
    let host = tempfile::tempdir_in("/var/tmp").unwrap();
    let config_dir = host.path().join("etc-agent-runtime");
    std::fs::create_dir(&config_dir).unwrap();
    std::fs::write(config_dir.join("executor.toml"), "[tools]\n").unwrap();
    let id = unique("tool11");
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".to_owned());
    let targets = [
        format!("/etc/agent-runtime/{id}.toml"),
        format!("/etc/{id}/executor.toml"),
        config_dir.join(format!("{id}.toml")).display().to_string(),
        config_dir
            .join(id.as_str())
            .join("x.toml")
            .display()
            .to_string(),
        format!("{home}/.ssh/{id}"),
        format!("/var/lib/agent-runtime/{id}"),
        format!("/usr/local/{id}"),
        format!("/{id}/x"),
    ];
    let bash = bash_in(cwd.path(), enabled()).await;
    for target in &targets {
        let probe = format!(
            "p='{target}'; mkdir -p \"$(dirname \"$p\")\" 2>/dev/null; \
             if echo evil > \"$p\"; then echo WROTE; else echo REFUSED; fi; \
             test -e \"$p\" && echo EXISTS; true"
        );
        let outcome = run(&bash, &probe, None).await;
        let out = stdout(&outcome);
        assert_eq!(out.trim(), "REFUSED", "{target}: {:?}", outcome.output);
        let stderr = outcome.output["stderr"].as_str().unwrap_or_default();
        assert!(
            stderr.contains("Read-only file system") || stderr.contains("No such file"),
            "{target}: {stderr}"
        );
        assert!(!Path::new(target).exists(), "{target} exists on the host");
    }
    assert_eq!(
        std::fs::read_dir(&config_dir).unwrap().count(),
        1,
        "only the configuration is in its directory"
    );

    // The file tools refuse a link to an absent protected path.
    let tools = registry(ToolsConfig {
        roots: vec![cwd.path().to_path_buf()],
        sandbox: enabled(),
        ..ToolsConfig::default()
    })
    .await;
    let planted = config_dir.join(format!("{id}-via-link.toml"));
    std::os::unix::fs::symlink(&planted, cwd.path().join("link.toml")).unwrap();
    let write = tools.get("Write").unwrap();
    let input = json!({ "file_path": "link.toml", "content": "evil" });
    assert!(write.check(&input).is_err());
    assert!(write.run(input, ToolContext::detached()).await.is_error);
    assert!(!planted.exists());

    // Hooks written in the workspace are inert: nothing on the host runs them.
    let marker = host.path().join("hook-ran");
    let hook = format!("#!/bin/sh\ntouch {}\n", marker.display());
    let plant = format!(
        "mkdir -p .git/hooks && printf '%s' '{hook}' > .git/hooks/post-checkout && \
         cp .git/hooks/post-checkout .git/hooks/pre-commit && \
         chmod +x .git/hooks/* && printf '%s' 'touch {}' > .envrc && echo planted",
        marker.display()
    );
    let planted_hooks = run(&bash, &plant, None).await;
    assert_eq!(
        stdout(&planted_hooks).trim(),
        "planted",
        "{:?}",
        planted_hooks.output
    );
    let mut done = Vec::new();
    for (name, input) in [
        ("Write", json!({ "file_path": "a.txt", "content": "one" })),
        (
            "Edit",
            json!({ "file_path": "a.txt", "old_string": "one", "new_string": "two" }),
        ),
        ("Read", json!({ "file_path": ".envrc" })),
        ("Glob", json!({ "pattern": "**/*" })),
        ("Grep", json!({ "pattern": "touch" })),
    ] {
        // Each call sees the state the earlier ones left, as in a session (Edit needs the Write).
        let context = ToolContext::after(&done.iter().collect::<Vec<_>>());
        let outcome = tools.get(name).unwrap().run(input, context).await;
        assert!(!outcome.is_error, "{name}: {:?}", outcome.output);
        done.push(outcome);
    }
    let outcome = run(&bash, "cd . && ls -a > /dev/null && echo done", None).await;
    assert_eq!(stdout(&outcome).trim(), "done");
    assert!(!marker.exists(), "a hook ran on the host");
}

/// LEASE-08. Our leases are per session, not per tool call: a cluster executor renews all of
/// its sessions' leases, each every third of the TTL (`WorkerLeases::spawn_renewal`), and
/// a running tool's `tool_progress` reports (a heartbeat every `bash_progress_interval` of
/// silence) are fenced writes of its session. Set up as a cluster executor (a registered worker,
/// a 1 s lease TTL, a 200 ms Bash progress interval), a sandboxed `sleep 300` tree runs for more
/// than four TTLs while renewals flow: the lease holds, the tree runs, nothing ends the request.
/// Then the renewal task is stopped (the starved heartbeat): the lease expires, the next
/// progress report is refused as `LEASE_LOST`, and that ends the call at once, so the whole tree
/// is killed and no process remains. The executor writes nothing more for the session (it no
/// longer holds it; another executor would adopt it): the last stored event is the last
/// progress detail, long before the command would have ended (here 300 s).
#[tokio::test]
async fn lease_08_a_lost_lease_ends_a_long_tool_run_and_kills_its_tree() {
    use agent_runtime_store::model::RegisterWorker;
    require_bwrap().await;
    let cwd = scratch();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let marker = format!("300.{}{nanos:09}8", std::process::id());
    let command = format!("sleep {marker} & sh -c 'sleep {marker}'; wait");
    let tools = registry(ToolsConfig {
        cwd: Some(cwd.path().to_path_buf()),
        sandbox: enabled(),
        bash_progress_interval: Duration::from_millis(200),
        ..ToolsConfig::default()
    })
    .await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    store
        .register_worker(RegisterWorker {
            worker_id: "worker-1".to_owned(),
            capacity: 10,
            ttl_ms: 3_600_000,
            metadata: Default::default(),
        })
        .await
        .unwrap();
    let ttl = Duration::from_secs(1);
    let (leases, _lost) = WorkerLeases::new(
        Arc::clone(&store),
        "worker-1",
        ttl,
        SessionCaps::uniform(10),
        clock::system(),
    );
    let renewal = leases.spawn_renewal();
    let mut config = ExecutorConfig::default();
    config.permissions.mode = PermissionMode::Yolo;
    let telemetry = Arc::new(NoTelemetry);
    let executor = InProcessExecutor::new(
        config,
        ExecutorDeps {
            store: Arc::clone(&store),
            sink: Arc::new(StoreSink::new(Arc::clone(&store), telemetry.clone())),
            provider: ScriptedModel::new(vec![
                tool_turn("", &[("Bash", json!({ "command": command }))]),
                done(),
            ]),
            tools,
            profiles: Vec::new(),
            clock: clock::system(),
            leases: leases.clone(),
            telemetry,
        },
    );
    let context = context("tenant-a");
    let session = executor
        .create(&context, CreateSessionData { metadata: None })
        .await
        .unwrap()
        .session_id;
    executor
        .submit(
            &context,
            SubmitInputData {
                session_id: session.clone(),
                input: UserContent::Text("go".into()),
                priority: None,
                expected_request_id: None,
                max_turns: None,
            },
        )
        .await
        .unwrap();
    let events = |store: Arc<dyn Store>, session: String| async move {
        store
            .read_events("tenant-a", &session, 0, 1000)
            .await
            .unwrap()
            .events
    };
    let kinds = |events: &[EventEnvelope]| -> Vec<String> {
        events
            .iter()
            .map(|e| {
                let kind = e.data["type"].as_str().unwrap_or(e.event_type.as_str());
                kind.to_owned()
            })
            .collect()
    };

    // While renewals flow: 20 progress reports of 200 ms each, over four TTLs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let seen = kinds(&events(store.clone(), session.clone()).await);
        assert!(
            !seen.iter().any(|k| k == "tool_result" || k == "result"),
            "the call ended while its lease was renewed: {seen:?}"
        );
        if seen.iter().filter(|k| *k == "tool_progress").count() >= 20 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(processes_with(&format!("sleep {marker}")).len() >= 2);
    assert_eq!(leases.count(), 1, "the lease is held");

    // The heartbeat stops: the tree goes.
    renewal.abort();
    wait_until_gone(&marker).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stored = events(store.clone(), session.clone()).await;
    let seen = kinds(&stored);
    assert_eq!(
        seen.last().map(String::as_str),
        Some("tool_progress"),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|k| k == "tool_result" || k == "result"),
        "{seen:?}"
    );
    let last = stored.last().unwrap();
    assert_eq!(last.data["name"], "Bash");
}
