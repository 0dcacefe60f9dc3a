//! An independent OTLP/HTTP receiver (`tests/otlp/receiver.py`, on the OpenTelemetry project's
//! `opentelemetry-proto` package) run as a child process: what the tests see of exported spans is
//! what that parser decoded.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub struct OtlpReceiver {
    child: Child,
    /// The base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`); spans go to `{url}/v1/traces`.
    pub url: String,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl OtlpReceiver {
    pub fn start() -> OtlpReceiver {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/otlp/receiver.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdout = child.stdout.take().unwrap();
        let mut first = String::new();
        BufReader::new(stdout).read_line(&mut first).unwrap();
        let url = first
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| {
                panic!("the receiver did not start (scripts/test.sh installs opentelemetry-proto): {first:?}")
            })
            .to_owned();
        OtlpReceiver { child, url }
    }

    /// Every span received so far, as the receiver decoded it.
    pub async fn spans(&self) -> Vec<Value> {
        agent_runtime_executor::provider::client_builder()
            .build()
            .unwrap()
            .get(format!("{}/spans", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The spans `keep` selects, once `done` accepts them (or a deadline passes).
    pub async fn wait_for(
        &self,
        keep: impl Fn(&Value) -> bool,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let spans: Vec<Value> = self.spans().await.into_iter().filter(&keep).collect();
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "spans before the deadline; have {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
