//! `Bash` (plain and inside the bubblewrap sandbox) and `WebFetch` address safety. Every network
//! connection here goes to loopback. The sandbox tests need `bwrap` (scripts/test.sh installs
//! it) and fail, not skip, without it.

use std::sync::Arc;
use std::time::Duration;

use crate::support::error_text;
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
    // the secret-canary version of this check is executor/tests/sandbox.rs::sec_05_…
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
    let outcome = tool
        .run(
            input,
            ToolContext {
                progress: sender,
                ..ToolContext::detached()
            },
        )
        .await;
    assert!(outcome.is_error, "a non-zero exit is an error result");
    assert_eq!(outcome.output["exit_code"], 3);
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
    assert!(
        error_text(&slow).starts_with("Command execution timed out"),
        "{:?}",
        slow
    );
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
    assert_eq!(wrote.output["exit_code"], 0, "{:?}", wrote.output);
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
    assert_ne!(read.output["exit_code"], 0);
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
    assert_ne!(system.output["exit_code"], 0, "the system is read-only");

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
    assert_ne!(net.output["exit_code"], 0, "{:?}", net.output);
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
        error_text(&by_name).contains("non-public address"),
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
    assert!(error_text(&redirected).contains("127.0.0.1"));
    let direct = trusted
        .run(
            json!({ "url": format!("http://localhost:{}/page", site.port()) }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(direct.output["body"], "hello from loopback");
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
    assert_eq!(outcome.output["body"], "hello from");
    assert_eq!(outcome.output["truncated"], true);
    assert_eq!(outcome.output["status"], 200);
}

/// What the hostile upstream of RES-10 saw: each request's head, and the connections whose
/// response ended (the client went away, or the response was complete).
#[derive(Default)]
struct Upstream {
    requests: std::sync::Mutex<Vec<String>>,
    closed: std::sync::Mutex<Vec<String>>,
}

/// A raw HTTP/1.1 server on loopback with one hostile answer per path.
async fn hostile_upstream() -> (std::net::SocketAddr, Arc<Upstream>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let seen = Arc::new(Upstream::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let shared = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let seen = shared.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
                seen.requests.lock().unwrap().push(head);
                let ok = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n";
                let _ = match path.as_str() {
                    "/infinite" => {
                        let chunk = vec![b'x'; 64 * 1024];
                        let mut written = socket
                            .write_all(format!("{ok}Connection: close\r\n\r\n").as_bytes())
                            .await;
                        while written.is_ok() {
                            written = socket.write_all(&chunk).await;
                        }
                        written
                    }
                    "/slow" => {
                        let mut written = socket
                            .write_all(format!("{ok}Content-Length: 1000\r\n\r\n").as_bytes())
                            .await;
                        while written.is_ok() {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            written = socket.write_all(b"s").await;
                        }
                        written
                    }
                    "/big-header" => {
                        let value = "h".repeat(1024 * 1024);
                        let response = format!("{ok}X-Big: {value}\r\nContent-Length: 2\r\n\r\nok");
                        socket.write_all(response.as_bytes()).await
                    }
                    "/many-headers" => {
                        let headers: String =
                            (0..10_000).map(|i| format!("X-H{i}: v\r\n")).collect();
                        let response = format!("{ok}{headers}Content-Length: 2\r\n\r\nok");
                        socket.write_all(response.as_bytes()).await
                    }
                    "/gzip" => {
                        // gzip magic and then bytes: WebFetch has no decompression to bomb.
                        let mut body = vec![0x1f, 0x8b, 0x08, 0x00];
                        body.resize(3 * 1024 * 1024, b'z');
                        let response = format!(
                            "{ok}Content-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
                            body.len()
                        );
                        let written = socket.write_all(response.as_bytes()).await;
                        match written {
                            Ok(()) => socket.write_all(&body).await,
                            error => error,
                        }
                    }
                    "/ok" => {
                        socket
                            .write_all(format!("{ok}Content-Length: 7\r\n\r\nhealthy").as_bytes())
                            .await
                    }
                    redirect if redirect.starts_with("/r/") => {
                        let n: u32 = redirect[3..].parse().unwrap();
                        let response = match n < 20 {
                            true => format!(
                                "HTTP/1.1 302 Found\r\nLocation: /r/{}\r\nContent-Length: 0\r\n\r\n",
                                n + 1
                            ),
                            false => format!("{ok}Content-Length: 4\r\n\r\nlast"),
                        };
                        socket.write_all(response.as_bytes()).await
                    }
                    _ => {
                        socket
                            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                            .await
                    }
                };
                seen.closed.lock().unwrap().push(path);
            });
        }
    });
    (address, seen)
}

/// RES-10: hostile WebFetch upstreams get caps and a short answer, and the executor goes on. An
/// endless body is cut at `max_body_bytes` (marked `truncated`) and its connection dropped; a
/// body trickling at 1 byte per second hits the total time limit (a tool error); a chain of 20
/// redirects is followed 5 times (6 requests) and then refused; a 1 MiB response header and
/// 10,000 headers are errors of the HTTP client. There is no decompression to bomb: reqwest is
/// built without its gzip/brotli/deflate features, so no `Accept-Encoding` is sent and a gzip body
/// comes back as its raw bytes, bounded like any other. Afterwards a plain fetch works.
#[tokio::test]
async fn res_10_hostile_upstreams_are_capped_and_the_executor_goes_on() {
    let (address, seen) = hostile_upstream().await;
    let tool = web_fetch(WebFetchConfig {
        allow_private_addresses: true,
        timeout: Duration::from_secs(3),
        ..WebFetchConfig::default()
    })
    .await;
    let max_body = WebFetchConfig::default().max_body_bytes;
    let fetch = |path: &str| {
        let tool = tool.clone();
        let url = format!("http://{address}{path}");
        async move {
            // A hang guard, not a timing assertion.
            tokio::time::timeout(
                Duration::from_secs(30),
                tool.run(json!({ "url": url }), ToolContext::detached()),
            )
            .await
            .unwrap_or_else(|_| panic!("{url} hung"))
        }
    };

    let endless = fetch("/infinite").await;
    assert!(!endless.is_error, "{:?}", endless.summary);
    assert_eq!(endless.output["truncated"], true);
    let content = endless.output["body"].as_str().unwrap();
    assert!(content.len() <= max_body, "{} bytes", content.len());

    let slow = fetch("/slow").await;
    assert!(slow.is_error);
    let error = slow.output["error"].as_str().unwrap();
    assert!(error.contains("took longer than 3000 ms"), "{error}");

    let redirects = fetch("/r/0").await;
    assert!(redirects.is_error);
    let error = redirects.output["error"].as_str().unwrap();
    assert!(error.contains("more than 5 redirects"), "{error}");
    let hops: Vec<String> = seen
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter_map(|head| head.split(' ').nth(1))
        .filter(|path| path.starts_with("/r/"))
        .map(str::to_owned)
        .collect();
    assert_eq!(hops, ["/r/0", "/r/1", "/r/2", "/r/3", "/r/4", "/r/5"]);

    for path in ["/big-header", "/many-headers"] {
        let outcome = fetch(path).await;
        assert!(outcome.is_error, "{path}: {:?}", outcome.output);
        let error = outcome.output["error"].as_str().unwrap();
        assert!(error.starts_with("fetching"), "{path}: {error}");
        assert!(error.len() < 1_000, "{path}: a short error");
    }

    let gzip = fetch("/gzip").await;
    assert_eq!(gzip.output["truncated"], true, "{:?}", gzip.summary);
    assert!(gzip.output["body"].as_str().unwrap().len() <= max_body + 4);
    let requests = seen.requests.lock().unwrap().clone();
    assert!(
        requests
            .iter()
            .all(|head| !head.to_ascii_lowercase().contains("accept-encoding")),
        "{requests:?}"
    );

    let healthy = fetch("/ok").await;
    assert!(!healthy.is_error, "{:?}", healthy.output);
    assert_eq!(healthy.output["body"], "healthy");
    // The endless and the trickling responses were abandoned by the client, not kept open.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let closed = seen.closed.lock().unwrap().clone();
        if closed.iter().any(|p| p == "/infinite") && closed.iter().any(|p| p == "/slow") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still served: {closed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `Bash` takes the reference's `cwd` (beneath the roots), `env` (names that load code or change
/// how bash starts refused before anything runs) and `timeout` (ms), and answers the reference's
/// shape (`stdout`, `stderr`, `execution_time`, `exit_code`, `signal`).
#[tokio::test]
async fn bash_takes_cwd_env_and_timeout_and_answers_the_reference_shape() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::create_dir(root_path.join("sub")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let tool = bash(ToolsConfig {
        roots: vec![root_path.clone()],
        ..ToolsConfig::default()
    })
    .await;
    let run = |input: serde_json::Value| {
        let tool = tool.clone();
        async move {
            match tool.check(&input) {
                Ok(_) => tool.run(input, ToolContext::detached()).await,
                Err(refused) => agent_runtime_executor::tools::output::failure(refused),
            }
        }
    };
    let ran = run(json!({ "command": "pwd; echo \"$GREETING\"", "cwd": "sub",
                          "env": { "GREETING": "hello" } }))
    .await;
    assert!(!ran.is_error, "{:?}", ran.output);
    assert_eq!(
        ran.output["stdout"],
        format!("{}\nhello\n", root_path.join("sub").display())
    );
    assert_eq!(ran.output["exit_code"], 0);
    assert_eq!(ran.output["signal"], serde_json::Value::Null);
    assert!(ran.output["execution_time"].is_u64());

    for (input, why) in [
        (
            json!({ "command": "true", "cwd": outside.path() }),
            "outside the allowed roots",
        ),
        (
            json!({ "command": "true", "env": { "LD_PRELOAD": "/tmp/x.so" } }),
            "LD_PRELOAD",
        ),
        (
            json!({ "command": "true", "env": { "BASH_ENV": "/tmp/x" } }),
            "BASH_ENV",
        ),
        (
            json!({ "command": "true", "env": { "BASH_FUNC_ls%%": "() { id; }" } }),
            "variable name",
        ),
    ] {
        let refused = run(input.clone()).await;
        assert!(refused.is_error, "{input}");
        let error = refused.output["error"].as_str().unwrap();
        assert!(error.contains(why), "{input}: {error}");
    }

    let slow = run(json!({ "command": "sleep 5", "timeout": 1000 })).await;
    assert!(slow.is_error);
    assert_eq!(
        slow.output["error"],
        "Command execution timed out (1000 ms)"
    );
    assert_eq!(slow.output["signal"], "SIGKILL");
}
