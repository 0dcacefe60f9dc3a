//! The official A2A client (PyPI `a2a-sdk`, unmodified: tests/a2a/client.py) against the real
//! `serve` binary and a cluster of gateway and executor processes on PostgreSQL: the agent card
//! and the extended card (the tenant's profile tools as skills; in the cluster the gateway asks
//! an executor over gRPC), sent and streamed messages, get and cancel, a dropped stream
//! subscribed again (exactly after the last update kept, with our event-sequence extension;
//! from the task's snapshot without it), an input-required approval answered by the next
//! message, and a message retried with its id that runs once.

use std::path::Path;
use std::process::Command;

use crate::support::cluster::Cluster;
use crate::support::serve;

/// Runs the client against the server at `origin` (where the card is); the extended card must
/// list the demo profile's tool as a skill.
fn official_client_passes(origin: &str, token: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/a2a/client.py");
    // scripts/test.sh installs a2a-sdk for the python3 on PATH.
    let output = Command::new("python3")
        .arg(script)
        .args([origin, token, "demo_approval"])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "the A2A client failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `http://host:port` of a base URL like `http://host:port/v1/agent`.
fn origin(base: &str) -> String {
    let after_scheme = base.find("://").map_or(0, |at| at + 3);
    let end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |at| after_scheme + at);
    base[..end].to_owned()
}

#[test]
fn the_official_a2a_client_runs_against_serve() {
    let data = tempfile::tempdir().unwrap();
    let served = serve(data.path());
    official_client_passes(&origin(&served.base), &served.token);
}

#[tokio::test]
async fn the_official_a2a_client_runs_against_the_cluster() {
    let cluster = Cluster::start().await;
    let served = cluster.served(0);
    let (base, token) = (origin(&served.base), served.token.clone());
    tokio::task::spawn_blocking(move || official_client_passes(&base, &token))
        .await
        .unwrap();
}
