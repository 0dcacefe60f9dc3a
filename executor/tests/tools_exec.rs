//! `Bash` (plain and inside the bubblewrap sandbox) and `WebFetch` address safety. Every network
//! connection here goes to loopback. The sandbox tests need `bwrap` (scripts/test.sh installs
//! it) and fail, not skip, without it.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime_executor::sandbox::{Sandbox, SandboxConfig};
use agent_runtime_executor::tools::{Tool, ToolContext, ToolsConfig, WebFetchConfig, is_global};
use serde_json::json;
use tokio::sync::mpsc;

async fn bash(config: ToolsConfig) -> Arc<dyn Tool> {
    let config = ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(vec!["Bash".into()]),
        ..config
    };
    config
        .build(Vec::new())
        .await
        .expect("tools build")
        .get("Bash")
        .unwrap()
        .clone()
}

fn sandboxed(cwd: &std::path::Path) -> ToolsConfig {
    ToolsConfig {
        cwd: Some(cwd.to_path_buf()),
        sandbox: SandboxConfig {
            enabled: true,
            network: false,
            bwrap: None,
            ..SandboxConfig::default()
        },
        ..ToolsConfig::default()
    }
}

#[tokio::test]
async fn bash_runs_reports_progress_and_does_not_leak_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let tool = bash(ToolsConfig {
        cwd: Some(dir.path().to_path_buf()),
        bash_progress_interval: Duration::from_millis(100),
        ..ToolsConfig::default()
    })
    .await;
    // A variable of this test process that Bash must not inherit (the runner sets plenty:
    // CARGO_*, NEXTEST_*, RUST_*). Picked from the real environment so the check is never vacuous;
    // the secret-canary version of this check is p0_sandbox.rs::sec_05_…
    let inherited = std::env::vars()
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, _)| name)
        .find(|name| {
            ![
                "PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_", "OLDPWD",
            ]
            .contains(&name.as_str())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .expect("the test process has some environment variable besides the allowlisted ones");
    let (sender, mut progress) = mpsc::channel(64);
    let input = json!({ "command": format!("echo start; sleep 0.5; echo \"key=${{{inherited}:-none}}\"; pwd; exit 3") });
    assert_eq!(
        tool.check(&input).unwrap().subject.as_deref(),
        Some(input["command"].as_str().unwrap())
    );
    let outcome = tool.run(input, ToolContext { progress: sender }).await;
    assert!(outcome.is_error, "a non-zero exit is an error result");
    assert_eq!(outcome.output["exitCode"], 3);
    let stdout = outcome.output["stdout"].as_str().unwrap();
    assert!(
        stdout.starts_with("start\nkey=none\n"),
        "{inherited}: {stdout}"
    );
    let mut reports = 0;
    while progress.try_recv().is_ok() {
        reports += 1;
    }
    assert!(reports >= 2, "progress while the command runs ({reports})");

    let slow = tool
        .run(
            json!({ "command": "sleep 5", "timeout_ms": 200 }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(slow.output["timedOut"], true);
}

#[tokio::test]
async fn the_sandbox_probe_fails_start_up_when_bwrap_cannot_run() {
    let broken = SandboxConfig {
        enabled: true,
        network: false,
        bwrap: Some("/nonexistent/bwrap".into()),
        ..SandboxConfig::default()
    };
    let error = Sandbox::probe(&broken).await.unwrap_err().to_string();
    assert!(error.contains("never run unsandboxed"), "{error}");
    let config = ToolsConfig {
        sandbox: broken,
        ..ToolsConfig::default()
    };
    let config = ToolsConfig {
        builtin_tools: true,
        ..config
    };
    assert!(
        config.build(Vec::new()).await.is_err(),
        "start-up fails instead of falling back"
    );
}

#[tokio::test]
async fn sandboxed_bash_writes_its_cwd_but_cannot_read_outside_or_use_the_network() {
    assert!(
        Sandbox::probe(&SandboxConfig {
            enabled: true,
            ..SandboxConfig::default()
        })
        .await
        .is_ok(),
        "bubblewrap must be installed and runnable for this test (scripts/test.sh installs it)"
    );
    // Outside /tmp (private in the sandbox) and outside the working directory.
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    let cwd = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let tool = bash(sandboxed(cwd.path())).await;

    let wrote = tool
        .run(
            json!({ "command": "echo made > here.txt && cat here.txt && ls /" }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(wrote.output["exitCode"], 0, "{:?}", wrote.output);
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("here.txt")).unwrap(),
        "made\n"
    );

    let secret = outside.path().join("secret.txt").display().to_string();
    let read = tool
        .run(
            json!({ "command": format!("cat {secret}") }),
            ToolContext::detached(),
        )
        .await;
    assert_ne!(read.output["exitCode"], 0);
    assert!(
        !read.output["stdout"]
            .as_str()
            .unwrap()
            .contains("top secret")
    );
    let system = tool
        .run(
            json!({ "command": "touch /usr/x-sandbox-test" }),
            ToolContext::detached(),
        )
        .await;
    assert_ne!(system.output["exitCode"], 0, "the system is read-only");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = tokio::spawn(async move {
        let first = tokio::time::timeout(Duration::from_secs(3), listener.accept())
            .await
            .is_ok();
        let second = tokio::time::timeout(Duration::from_secs(3), listener.accept())
            .await
            .is_ok();
        (first, second)
    });
    let connect =
        json!({ "command": format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected") });
    // The same command outside the sandbox does connect: the probe itself works.
    let plain = bash(ToolsConfig {
        cwd: Some(cwd.path().to_path_buf()),
        ..ToolsConfig::default()
    })
    .await;
    let reached = plain.run(connect.clone(), ToolContext::detached()).await;
    assert_eq!(
        reached.output["stdout"], "connected\n",
        "{:?}",
        reached.output
    );
    let net = tool.run(connect, ToolContext::detached()).await;
    assert_ne!(net.output["exitCode"], 0, "{:?}", net.output);
    assert_eq!(
        accepted.await.unwrap(),
        (true, false),
        "only the unsandboxed connection arrived"
    );
}

fn web_fetch(config: WebFetchConfig) -> impl std::future::Future<Output = Arc<dyn Tool>> {
    let tools = ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(vec!["WebFetch".into()]),
        web_fetch: config,
        ..ToolsConfig::default()
    };
    async move {
        tools
            .build(Vec::new())
            .await
            .unwrap()
            .get("WebFetch")
            .unwrap()
            .clone()
    }
}

async fn loopback_site() -> std::net::SocketAddr {
    let app = axum::Router::new()
        .route(
            "/page",
            axum::routing::get(|| async { "hello from loopback" }),
        )
        .route(
            "/hop",
            axum::routing::get(
                |axum::extract::Query(q): axum::extract::Query<
                    std::collections::HashMap<String, String>,
                >| async move { axum::response::Redirect::temporary(&q["to"]) },
            ),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

#[tokio::test]
async fn web_fetch_refuses_non_public_addresses_and_redirects_to_them() {
    for ip in [
        "127.0.0.1",
        "10.1.2.3",
        "169.254.169.254",
        "::1",
        "192.168.0.1",
        "100.64.0.1",
        "::ffff:127.0.0.1",
        "fd00::1",
        "0.0.0.0",
    ] {
        assert!(!is_global(ip.parse().unwrap()), "{ip}");
    }
    assert!(is_global("93.184.215.14".parse().unwrap()));
    assert!(is_global("2606:4700::1111".parse().unwrap()));

    let tool = web_fetch(WebFetchConfig::default()).await;
    for url in [
        "http://127.0.0.1/",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest",
        "http://[::1]:80/",
        "file:///etc/passwd",
    ] {
        assert!(tool.check(&json!({ "url": url })).is_err(), "{url}");
    }
    let site = loopback_site().await;
    // A name that resolves to loopback is refused after DNS resolution.
    let by_name = tool
        .run(
            json!({ "url": format!("http://localhost:{}/page", site.port()) }),
            ToolContext::detached(),
        )
        .await;
    assert!(by_name.is_error);
    assert!(
        by_name.output["error"]
            .as_str()
            .unwrap()
            .contains("non-public address"),
        "{:?}",
        by_name.output
    );

    // `localhost` is trusted by name here; the redirect to the 127.0.0.1 literal is not.
    let trusted = web_fetch(WebFetchConfig {
        allow_hosts: vec!["localhost".into()],
        ..WebFetchConfig::default()
    })
    .await;
    let hop = format!(
        "http://localhost:{}/hop?to=http://127.0.0.1:{}/page",
        site.port(),
        site.port()
    );
    let redirected = trusted
        .run(json!({ "url": hop }), ToolContext::detached())
        .await;
    assert!(redirected.is_error, "{:?}", redirected.output);
    assert!(
        redirected.output["error"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1")
    );
    let direct = trusted
        .run(
            json!({ "url": format!("http://localhost:{}/page", site.port()) }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(direct.output["content"], "hello from loopback");
}

#[tokio::test]
async fn web_fetch_allows_private_addresses_when_configured_and_bounds_the_body() {
    let site = loopback_site().await;
    let tool = web_fetch(WebFetchConfig {
        allow_private_addresses: true,
        max_body_bytes: 10,
        ..WebFetchConfig::default()
    })
    .await;
    let url = format!("http://127.0.0.1:{}/hop?to=/page", site.port());
    tool.check(&json!({ "url": url }))
        .expect("allowed by configuration");
    let outcome = tool
        .run(json!({ "url": url }), ToolContext::detached())
        .await;
    assert!(!outcome.is_error, "{:?}", outcome.output);
    assert_eq!(outcome.output["content"], "hello from");
    assert_eq!(outcome.output["truncated"], true);
    assert_eq!(outcome.output["status"], 200);
}
