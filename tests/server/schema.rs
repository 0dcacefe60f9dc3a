//! Real answers validate against the published contract, checked by an independent validator
//! (Python `jsonschema` and `openapi-spec-validator`, tests/schema/validate.py): every command
//! type with a success, the common failures, and every event a session produced, from text
//! deltas and a permission prompt to `session.closed`. The gateway serves the committed OpenAPI
//! document next to the console.

use std::process::Command;

use crate::support::{TOKEN_A, TestServer, is_result, python_with, test_config};
use agent_runtime_cli::config::StoreKind;
use serde_json::{Value, json};

/// What the test sent and received.
#[derive(Default)]
struct Traffic {
    commands: Vec<Value>,
    /// Commands the server refused as invalid: the schema must refuse them too.
    invalid_commands: Vec<Value>,
    results: Vec<(String, Value)>,
}

impl Traffic {
    /// Sends one command and keeps both sides; returns the answer's body.
    async fn send(&mut self, server: &TestServer, kind: &str, data: Value) -> Value {
        let id = agent_runtime::ids::nanoid();
        let body = json!({ "protocolVersion": 1, "commandId": id, "type": kind, "data": data });
        let (status, answer) = server
            .command(TOKEN_A, &id, kind, body["data"].clone())
            .await;
        if status == 400 {
            self.invalid_commands.push(body);
        } else {
            self.commands.push(body);
        }
        self.results.push((kind.to_owned(), answer.clone()));
        answer
    }
}

#[tokio::test]
async fn live_answers_and_events_validate_against_the_published_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(test_config(StoreKind::Memory, dir.path())).await;
    let mut traffic = Traffic::default();
    let client = json!({ "client": { "name": "schema-test", "version": "1" } });
    traffic.send(&server, "initialize", client).await;
    let created = traffic.send(&server, "session.create", json!({})).await;
    let session = created["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let this = json!({ "sessionId": session });
    let input = |text: &str| json!({ "sessionId": session, "input": text });
    traffic.send(&server, "input.submit", input("hello")).await;
    server.collect_events(TOKEN_A, &session, 0, is_result).await;
    traffic
        .send(&server, "input.submit", input("needs approval"))
        .await;
    let prompt = server.permission_request(TOKEN_A, &session, 0).await;
    let resolve = json!({ "sessionId": session, "permissionRequestId": prompt, "approved": true });
    traffic.send(&server, "permission.resolve", resolve).await;
    traffic
        .send(&server, "input.submit", input("demo:slow"))
        .await;
    traffic.send(&server, "request.abort", this.clone()).await;
    traffic.send(&server, "session.read", this.clone()).await;
    traffic.send(&server, "session.list", json!({})).await;
    traffic.send(&server, "session.fork", this.clone()).await;
    traffic.send(&server, "session.resume", this.clone()).await;
    traffic.send(&server, "session.close", this.clone()).await;
    // Failures: a missing session, a command that is no command, a closed session.
    let missing = json!({ "sessionId": "no-such-session" });
    traffic.send(&server, "session.read", missing).await;
    traffic
        .send(&server, "input.submit", json!({ "sessionId": session }))
        .await;
    traffic
        .send(&server, "input.submit", input("too late"))
        .await;
    let events = server
        .collect_events(TOKEN_A, &session, 0, |e| e["type"] == "session.closed")
        .await;

    let failures = traffic.results.iter().filter(|(_, r)| r["ok"] == false);
    assert_eq!(failures.count(), 3, "{:?}", traffic.results);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    for kind in ["session.stream", "permission.requested", "session.closed"] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    let file = dir.path().join("traffic.json");
    assert_eq!(traffic.invalid_commands.len(), 1);
    let traffic = json!({
        "commands": traffic.commands,
        "invalidCommands": traffic.invalid_commands,
        "results": traffic.results,
        "events": events,
    });
    std::fs::write(&file, traffic.to_string()).unwrap();
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/validate.py");
    let output = Command::new(python_with("jsonschema, openapi_spec_validator"))
        .args([script, docs, file.to_str().unwrap()])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        report.starts_with("valid: 14 commands (1 invalid refused), 15 results"),
        "{report}"
    );

    // The document is served beside the console, without a token, as committed.
    let served: Value = server
        .client
        .get(format!("{}/openapi.json", server.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let committed = std::fs::read_to_string(format!("{docs}/openapi.json")).unwrap();
    assert_eq!(served, serde_json::from_str::<Value>(&committed).unwrap());
    server.stop().await;
}
