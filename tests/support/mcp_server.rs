//! A real third-party MCP server for the MCP tests: the reference servers' `everything` server
//! (`@modelcontextprotocol/server-everything`, pinned in tests/mcp-server and installed by
//! scripts/test.sh with `npm ci`), over streamable HTTP on a free loopback port.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The server's entry point.
pub fn everything_entry() -> PathBuf {
    let entry = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("mcp-server/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "the MCP test server is not installed: run `npm ci --prefix tests/mcp-server` \
         (scripts/test.sh does)"
    );
    entry
}

pub struct EverythingServer {
    pub port: u16,
    child: Option<Child>,
}

impl EverythingServer {
    /// Starts it on a free port and waits until it listens.
    pub async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = Self { port, child: None };
        server.restart().await;
        server
    }

    /// `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Starts it (again) on its port. Its environment is cleared: its `get-env` tool would
    /// print ours.
    pub async fn restart(&mut self) {
        let mut child = Command::new("node")
            .arg(everything_entry())
            .arg("streamableHttp")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("PORT", self.port.to_string())
            .stdin(Stdio::null())
            // It logs every request on stdout: never let a full pipe block it.
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("listening on port") {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(ready, Ok(true), "the MCP server listens");
        // Keep draining its stderr so that it never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.child = Some(child);
    }

    /// Kills it (the port is free again).
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}
