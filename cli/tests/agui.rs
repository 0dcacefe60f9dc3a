//! The official AG-UI client (`@ag-ui/client`'s `HttpAgent`, unmodified, from npm:
//! tests/agui/client.mjs) against the real `serve` binary and a cluster of gateway and executor
//! processes on PostgreSQL: a text run, a tool call stopped by an approval and resumed with its
//! answer, a run whose connection drops and continues from `Last-Event-ID` (in the cluster, on
//! the other gateway), and a retried run that runs once. Every event the client received is then
//! validated by the AG-UI project's Python models (`ag-ui-protocol`, tests/agui/validate.py).

use std::path::Path;
use std::process::Command;

use crate::support::cluster::Cluster;
use crate::support::serve;

fn agui_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/agui")
}

/// Runs the client against `base` (reconnecting to `reconnect` when given), then validates what
/// it received.
fn official_client_passes(base: &str, token: &str, reconnect: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.json");
    let mut client = Command::new("node");
    client
        .arg("client.mjs")
        .args([base, token, events.to_str().unwrap()])
        .args(reconnect)
        .current_dir(agui_dir());
    let output = client
        .output()
        .expect("node must be installed (scripts/test.sh installs it)");
    assert!(
        output.status.success(),
        "the AG-UI client failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // scripts/test.sh installs ag-ui-protocol for the python3 on PATH.
    let validated = Command::new("python3")
        .arg(agui_dir().join("validate.py"))
        .arg(&events)
        .output()
        .unwrap();
    assert!(
        validated.status.success(),
        "an event failed ag-ui-protocol's validation:\n{}\n{}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );
}

#[test]
fn the_official_ag_ui_client_runs_resumes_and_retries_against_serve() {
    let data = tempfile::tempdir().unwrap();
    let served = serve(data.path());
    official_client_passes(&served.base, &served.token, None);
}

#[tokio::test]
async fn the_official_ag_ui_client_runs_and_resumes_across_the_clusters_gateways() {
    let cluster = Cluster::start().await;
    let first = cluster.served(0);
    let second = cluster.served(1);
    let (base, token, other) = (first.base.clone(), first.token.clone(), second.base.clone());
    tokio::task::spawn_blocking(move || official_client_passes(&base, &token, Some(&other)))
        .await
        .unwrap();
}
