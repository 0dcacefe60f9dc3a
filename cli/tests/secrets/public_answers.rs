//! SEC-12: what the server answers without a token (`healthz`, `readyz`, `/metrics`,
//! `openapi.json`, the console) carries no credential-bearing URL, store path, profile or MCP
//! server name, nor error text from outside: fixed states, codes and counts only. A
//! `session:admin` bearer sees the details on `readyz`, still without the URL's query; no log
//! line carries it either. Against the real `agent-runtime serve` binary (JSONL store).

use super::{Client, Server};

/// A key in an MCP server's URL query: what an operator pasting a provider's URL does.
const URL_KEY: &str = "sec12-url-key-4b1d";
const PROFILE: &str = "acme-bank-sec12";
const MCP_SERVER: &str = "ledger-sec12";

#[tokio::test]
async fn sec_12_unauthenticated_answers_carry_no_names_paths_or_url_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data-dir-sec12");
    // Nothing listens on port 1: every connect fails with a transport error naming the URL.
    let mcp_url = format!("http://127.0.0.1:1/mcp?api_key={URL_KEY}");
    let admin = "sec12-admin-token";
    let user = "sec12-user-token";
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
data_dir = "{data}"
store = "jsonl"

[[mcp_servers]]
name = "{MCP_SERVER}"
url = "{mcp_url}"
allow_private_addresses = true
connect_timeout_ms = 500

[[profiles]]
name = "{PROFILE}"
tenants = ["tenant-p"]

[[auth.tokens]]
sha256 = "{admin_hash}"
tenant = "tenant-p"
subject = "operator"
scopes = ["session:admin"]

[[auth.tokens]]
sha256 = "{user_hash}"
tenant = "tenant-p"
subject = "user"
scopes = ["session:create", "session:read", "session:write"]
"#,
            data = data.display(),
            admin_hash = agent_runtime_gateway::token_sha256(admin),
            user_hash = agent_runtime_gateway::token_sha256(user),
        ),
    )
    .unwrap();
    let server = Server::start(&config, dir.path(), &[]);
    let mut client = Client::new(&server.url, user);
    let api = format!("{}/v1/agent", server.url);

    // Wait until the supervisor has failed to connect once (its error names the URL).
    let mut details = String::new();
    for _ in 0..100 {
        let (status, body) = client.get(&format!("{api}/readyz"), Some(admin)).await;
        assert_eq!(status, 200, "{body}");
        details = body;
        if details.contains("\"unavailable\"") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let listed: serde_json::Value = serde_json::from_str(&details).unwrap();
    let entry = &listed["mcp_servers"][0];
    assert_eq!(entry["server"], MCP_SERVER, "{details}");
    assert_eq!(entry["state"], "unavailable", "{details}");
    let error = entry["error"].as_str().unwrap_or_default();
    assert!(!error.is_empty(), "{details}");
    assert!(!details.contains(URL_KEY), "the admin's view: {details}");

    let secrets = [URL_KEY, PROFILE, MCP_SERVER, "data-dir-sec12", error];
    let mut public = Vec::new();
    for path in [
        format!("{api}/readyz"),
        format!("{api}/healthz"),
        format!("{api}/openapi.json"),
        format!("{}/metrics", server.url),
        format!("{}/", server.url),
    ] {
        let (_, body) = client.get(&path, None).await;
        public.push((path, body));
    }
    // A token without `session:admin` gets the anonymous answer too.
    let (_, user_view) = client.get(&format!("{api}/readyz"), Some(user)).await;
    public.push(("readyz as a user".to_owned(), user_view.clone()));
    for (path, body) in &public {
        for secret in secrets {
            assert!(!body.contains(secret), "{path} shows {secret:?}: {body}");
        }
    }
    let anonymous: serde_json::Value = serde_json::from_str(&public[0].1).unwrap();
    assert_eq!(anonymous["status"], "ready");
    assert_eq!(anonymous["backend"], "jsonl");
    // Two connections: the default tool set's and the profile's.
    assert_eq!(
        anonymous["mcp_server_states"]["unavailable"], 2,
        "{anonymous}"
    );
    assert_eq!(
        anonymous,
        serde_json::from_str::<serde_json::Value>(&user_view).unwrap()
    );
    let metrics = &public[3].1;
    assert!(
        metrics.contains("agent_runtime_mcp_servers{state=\"unavailable\"} 2"),
        "{metrics}"
    );

    let (logs, stdout) = server.stop();
    assert!(logs.contains("cannot connect to an MCP server"), "{logs}");
    assert!(
        !logs.contains(URL_KEY),
        "a log line carries the URL's key: {logs}"
    );
    assert!(!stdout.contains(URL_KEY), "{stdout}");
}
