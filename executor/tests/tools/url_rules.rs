//! TOOL-25 (docs/reliability.md): permission rules on URLs match a canonical form of the URL,
//! so no spelling of a path escapes a `deny` rule or widens an `allow` rule. Driven through a
//! real `InProcessExecutor` with a scripted model and a loopback server.

use std::sync::Arc;

use super::web_fetch::{ScriptedDns, Sink};
use crate::support::{Harness, ScriptedModel, stream_type, tool_turn};
use agent_runtime::protocol::EventEnvelope;
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::permissions::{
    PermissionMode, PermissionPolicy, PermissionRules, Rule,
};
use agent_runtime_executor::tools::{Tool, ToolsConfig, WebFetchConfig, WebFetchTool};
use serde_json::{Value, json};

/// `deny: WebFetch:<site>/admin*` and `allow: WebFetch:<site>/public/*` in the default mode.
/// Every spelling of `/admin` the attack used (`//admin`, `/%61dmin`, `/ADMIN`, `/;/admin`) and
/// its relatives (`..;`, `%2F`, `/./`, a mixed-case host) is denied by the rule without asking;
/// spellings that a server may read as a path outside `/public/` (`..;/`, `..%2F`, another
/// case) are asked about instead of allowed; the plain allowed URL runs. Only that one request
/// reaches the server.
#[tokio::test]
async fn tool_25_url_rules_match_a_canonical_path() {
    let sink = Sink::start("127.0.0.1", 0, "page").await;
    let site = format!("http://site.test:{}", sink.port());
    let dns = ScriptedDns::new(&[("site.test", &[&["127.0.0.1"]])]);
    let mut web_fetch = WebFetchTool::new(
        WebFetchConfig {
            allow_private_addresses: true,
            ..WebFetchConfig::default()
        },
        30_000,
    );
    web_fetch.resolver = dns;
    let root = tempfile::tempdir().unwrap();
    let tools = ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(Vec::new()),
        roots: vec![root.path().to_path_buf()],
        ..ToolsConfig::default()
    }
    .build(vec![Arc::new(web_fetch) as Arc<dyn Tool>])
    .await
    .unwrap();
    let deny_rule = format!("WebFetch:{site}/admin*");
    let rule = |text: &str| vec![Rule::parse(text).unwrap()];
    let config = ExecutorConfig {
        permissions: PermissionPolicy {
            mode: PermissionMode::Default,
            rules: PermissionRules {
                deny: rule(&deny_rule),
                ask: Vec::new(),
                allow: rule(&format!("WebFetch:{site}/public/*")),
            },
        },
        ..ExecutorConfig::default()
    };

    let denied = [
        "//admin",
        "/%61dmin",
        "/ADMIN",
        "/;/admin",
        "/Admin/users",
        "/public/..;/admin",
        "/public/..%2Fadmin",
        "/public/..%2fadmin",
        "/.//admin",
        "/x;a=b/..;c=d/admin",
    ];
    let asked = ["/PUBLIC/page", "/public/..;/secret", "/public/..%2Fsecret"];
    let allowed = "/public/page";
    let mut calls: Vec<String> = denied.iter().map(|p| format!("{site}{p}")).collect();
    calls.push(format!("http://SITE.Test:{}/admin", sink.port()));
    calls.extend(asked.iter().map(|p| format!("{site}{p}")));
    calls.push(format!("{site}{allowed}"));
    let turn: Vec<(&str, Value)> = calls
        .iter()
        .map(|url| ("WebFetch", json!({ "url": url })))
        .collect();
    let harness = Harness::new(ScriptedModel::new([tool_turn("", &turn)]), tools, config);
    let session = harness.create().await;
    harness.submit(&session, "fetch them").await;

    let mut events: Vec<EventEnvelope> = Vec::new();
    let mut prompted: Vec<String> = Vec::new();
    let mut after = 0;
    loop {
        let batch = harness
            .events_until(&session, after, |e| {
                matches!(stream_type(e).as_str(), "permission.requested" | "result")
            })
            .await;
        let last = batch.last().unwrap().clone();
        after = last.sequence;
        events.extend(batch);
        if stream_type(&last) == "result" {
            break;
        }
        prompted.push(last.data["input"]["url"].as_str().unwrap().to_owned());
        let id = last.data["permissionRequestId"].as_str().unwrap();
        harness.resolve(&session, id, false).await;
    }

    let results: Vec<(bool, String)> = events
        .iter()
        .filter(|e| stream_type(e) == "tool_result")
        .map(|e| {
            (
                e.data["isError"].as_bool().unwrap(),
                e.data["output"]["error"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(results.len(), calls.len());
    let denial = format!("Denied by the permission rule {deny_rule}");
    for (url, (is_error, error)) in calls.iter().zip(&results).take(denied.len() + 1) {
        assert!(*is_error && *error == denial, "{url}: {error}");
    }
    let expected_prompts: Vec<String> = asked.iter().map(|p| format!("{site}{p}")).collect();
    assert_eq!(prompted, expected_prompts, "only these are asked about");
    assert_eq!(
        results.last().unwrap(),
        &(false, String::new()),
        "{allowed}"
    );
    let heads = sink.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(heads[0].starts_with("GET /public/page "), "{heads:?}");
}
