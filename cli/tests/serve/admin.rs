//! `agent-runtime admin` against the real `serve` binary, reading the operator token `serve` keeps
//! in its data directory: a webhook endpoint disabled by failures and re-enabled, its waiting
//! delivery sent and then redelivered under its id (checked by the Standard Webhooks reference library's receiver),
//! sessions listed and closed, commands listed, a tenant deleted.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::cluster::{create_session, submit};
use crate::support::webhooks::{Receiver, SECRET};
use crate::support::{command, ends_request, events_until, serve_with_env};

/// Runs `agent-runtime admin ARGS` in `dir` (where `.agent-runtime/` is); returns the exit
/// status's success, stdout parsed as JSON (or as text) and stderr.
fn admin(dir: &Path, base: &str, args: &[&str]) -> (bool, Value, String) {
    let url = base.trim_end_matches("/v1/agent");
    let output = Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .arg("admin")
        .args(["--url", url])
        .args(args)
        .current_dir(dir)
        .env_remove("AGENT_RUNTIME_OPERATOR_TOKEN")
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let value = serde_json::from_str(&stdout).unwrap_or(Value::String(stdout));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.success(), value, stderr)
}

#[tokio::test]
async fn the_admin_subcommands_run_against_serve() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join(".agent-runtime");
    let receiver = Receiver::start(dir.path());
    receiver.set_mode("refuse").await;
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[webhooks]\npoll_interval_ms = 50\nretry_schedule_ms = [100, 100, 100, 100, 100, 100, 100, 100, 100, 100]\ndisable_after_ms = 150\n\n[[webhooks.endpoints]]\nid = \"ops\"\ntenant = \"dev\"\nurl = \"{}/hook\"\nevents = [\"request.completed\", \"session.closed\"]\nsecret_env = \"OPS_SECRET\"\nallow_private_addresses = true\n",
            receiver.url
        ),
    )
    .unwrap();
    let served = serve_with_env(
        &data,
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
        &[("OPS_SECRET", SECRET)],
    );
    let base = served.base.clone();
    let run = |args: &[&str]| admin(dir.path(), &base, args);

    // A request's webhook keeps failing until the endpoint is disabled; the delivery waits.
    let session = create_session(&served).await;
    let request = submit(&served, &session, "hello").await;
    events_until(&served, &session, |e| ends_request(e, &request)).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let listed = loop {
        let (ok, listed, stderr) = run(&["webhooks", "list"]);
        assert!(ok, "{stderr}");
        let endpoint = listed["endpoints"][0].clone();
        if endpoint["enabled"] == false {
            break endpoint;
        }
        assert!(tokio::time::Instant::now() < deadline, "{listed}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(listed["endpointId"], "ops");
    assert_eq!(listed["tenantId"], "dev");
    assert_eq!(listed["pending"], 1, "{listed}");
    let (ok, waiting, stderr) = run(&[
        "webhooks",
        "deliveries",
        "--tenant",
        "dev",
        "--endpoint",
        "ops",
        "--status",
        "pending",
    ]);
    assert!(ok, "{stderr}");
    let delivery = waiting["deliveries"][0]["deliveryId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(waiting["deliveries"][0]["attempts"].as_u64().unwrap() >= 2);

    // Re-enabled: the waiting delivery goes out under its id; then it is sent once more.
    receiver.set_mode("accept").await;
    let (ok, enabled, stderr) =
        run(&["webhooks", "enable", "--tenant", "dev", "--endpoint", "ops"]);
    assert!(ok, "{stderr}");
    assert_eq!(enabled["changed"], true);
    let accepted = |seen: &[Value], times: usize| {
        seen.iter()
            .filter(|line| line["mode"] == "accept" && line["id"] == delivery.as_str())
            .count()
            >= times
    };
    receiver
        .wait_for("the delivery after the endpoint came back", |seen| {
            accepted(seen, 1)
        })
        .await;
    let (ok, _, stderr) = run(&[
        "webhooks",
        "redeliver",
        "--tenant",
        "dev",
        "--delivery",
        &delivery,
    ]);
    assert!(ok, "{stderr}");
    receiver
        .wait_for("the redelivery", |seen| accepted(seen, 2))
        .await;
    assert!(
        receiver
            .received()
            .iter()
            .all(|line| line["verified"] == true)
    );

    // Sessions across tenants, and closing one.
    let (ok, sessions, stderr) = run(&["sessions", "list"]);
    assert!(ok, "{stderr}");
    assert_eq!(sessions["sessions"][0]["sessionId"], session.as_str());
    assert_eq!(sessions["sessions"][0]["status"], "active");
    // One process has no other executor to move a session to.
    let (ok, _, stderr) = run(&["sessions", "move", "--tenant", "dev", "--session", &session]);
    assert!(!ok && stderr.contains("no other executor"), "{stderr}");
    let (ok, _, stderr) = run(&[
        "sessions",
        "close",
        "--tenant",
        "dev",
        "--session",
        &session,
    ]);
    assert!(ok, "{stderr}");
    receiver
        .wait_for("the session's close", |seen| {
            seen.iter().any(|line| line["type"] == "session.closed")
        })
        .await;
    let (ok, commands, stderr) = run(&["commands", "list"]);
    assert!(ok, "{stderr}");
    assert_eq!(commands["commands"], json!([]));

    // A tenant is deleted only when confirmed.
    let (ok, _, stderr) = run(&["tenants", "delete", "--tenant", "dev"]);
    assert!(!ok);
    assert!(stderr.contains("--yes"), "{stderr}");
    let (ok, deleted, stderr) = run(&["tenants", "delete", "--tenant", "dev", "--yes"]);
    assert!(ok, "{stderr}");
    assert!(deleted["deletedRecords"].as_u64().unwrap() > 0, "{deleted}");
    let list = command(&served, "session.list", json!({})).await;
    assert_eq!(list["sessions"], json!([]));

    // A wrong token is refused with the server's words, and never echoed.
    let output = Command::new(env!("CARGO_BIN_EXE_agent-runtime"))
        .args([
            "admin",
            "--url",
            base.trim_end_matches("/v1/agent"),
            "--token",
            "op-not-it",
        ])
        .args(["sessions", "list"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("UNAUTHENTICATED"), "{stderr}");
    assert!(!stderr.contains("op-not-it"), "{stderr}");
}
