//! A webhook receiver built on the Standard Webhooks reference library
//! (`cli/tests/webhooks/receiver.py`), run as its own process.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The secret every test endpoint signs with.
pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

pub struct Receiver {
    child: Child,
    pub url: String,
    log: PathBuf,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    pub fn start(dir: &Path) -> Receiver {
        let log = dir.join("received.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/webhooks/receiver.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&log)
            .arg(SECRET)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the receiver (scripts/test.sh installs standardwebhooks)");
        let mut port = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        assert!(
            port.trim().parse::<u16>().is_ok(),
            "the receiver did not start (is standardwebhooks installed?): {port:?}"
        );
        Receiver {
            child,
            url: format!("http://127.0.0.1:{}", port.trim()),
            log,
        }
    }

    pub async fn set_mode(&self, mode: &str) {
        agent_runtime_executor::provider::client_builder()
            .build()
            .unwrap()
            .post(format!("{}/mode", self.url))
            .body(mode.to_owned())
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap();
    }

    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Waits until some received line matches.
    pub async fn wait_for(&self, what: &str, matches: impl Fn(&[Value]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !matches(&self.received()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the receiver never saw {what}: {:?}",
                self.received()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
