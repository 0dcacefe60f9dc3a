//! `WebSearch` against scripted SearXNG and Brave APIs on loopback (reached through the
//! `allow_private_addresses` test seam of the `WebFetch` policy it shares): the reference's result
//! shape, domain filters, the 8-result cap, the key sent only as the provider's header and never
//! shown, and the policy refusing a private address without the seam.

use crate::support::{Reply, ScriptedServer};
use agent_runtime_executor::tools::{
    SearchProvider, Tool, ToolContext, ToolOutcome, ToolsConfig, WebFetchConfig, WebSearchConfig,
};
use serde_json::{Value, json};

async fn web_search(search: WebSearchConfig, allow_private: bool) -> std::sync::Arc<dyn Tool> {
    let config = ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(vec!["WebSearch".into()]),
        web_fetch: WebFetchConfig {
            allow_private_addresses: allow_private,
            ..WebFetchConfig::default()
        },
        web_search: Some(search),
        ..ToolsConfig::default()
    };
    let tools = config.build(Vec::new()).await.expect("tools build");
    tools.get("WebSearch").expect("registered").clone()
}

async fn search(tool: &std::sync::Arc<dyn Tool>, input: Value) -> ToolOutcome {
    tool.check(&input).expect("a valid query");
    tool.run(input, ToolContext::detached()).await
}

fn searxng_answer() -> String {
    let results: Vec<Value> = (0..10)
        .map(|i| {
            let host = if i == 1 {
                "spam.example"
            } else {
                "docs.example.org"
            };
            json!({ "title": format!("Result {i}"), "url": format!("https://{host}/page/{i}"),
                    "content": format!("snippet {i}"), "engine": "duckduckgo" })
        })
        .chain([json!({ "title": "no host", "url": "mailto:x", "content": "" })])
        .collect();
    json!({ "query": "rust async", "number_of_results": 10, "results": results }).to_string()
}

#[tokio::test]
async fn searxng_results_come_back_in_the_reference_shape_filtered_and_capped() {
    let server = ScriptedServer::start(vec![Reply::Status(200, None, searxng_answer())]).await;
    let tool = web_search(
        WebSearchConfig {
            provider: SearchProvider::Searxng,
            url: Some(format!("{}/searx/", server.base_url)),
            api_key_env: None,
            api_key_file: None,
        },
        true,
    )
    .await;
    let outcome = search(
        &tool,
        json!({ "query": "rust async", "blocked_domains": ["spam.example"] }),
    )
    .await;
    assert!(!outcome.is_error, "{:?}", outcome.output);
    let output = &outcome.output;
    assert_eq!(output["query"], "rust async");
    assert_eq!(output["provider"], "searxng");
    assert_eq!(
        output["total_results"], 9,
        "after the filters, before the cap"
    );
    let results = output["results"].as_array().unwrap();
    assert_eq!(results.len(), 8);
    assert_eq!(
        results[0],
        json!({ "title": "Result 0", "url": "https://docs.example.org/page/0",
                "snippet": "snippet 0", "display_url": "docs.example.org/page/0",
                "source": "searxng" })
    );
    assert!(
        results
            .iter()
            .all(|r| !r["url"].as_str().unwrap().contains("spam"))
    );
    assert!(output["fetched_at"].as_u64().unwrap() > 0);
    let received = server.received();
    assert_eq!(received[0].path, "/searx/search");
    assert_eq!(
        received[0].query.as_deref(),
        Some("q=rust+async&format=json")
    );
}

#[tokio::test]
async fn brave_gets_its_key_as_a_header_and_the_key_never_shows() {
    const KEY: &str = "BSA-test-key-7c2f";
    let key_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(key_file.path(), format!("{KEY}\n")).unwrap();
    let answer = json!({ "web": { "results": [
        { "title": "Tokio", "url": "https://tokio.rs/", "description": "An async runtime" },
        { "title": "Docs", "url": "https://docs.rs/tokio/latest/tokio/", "description": "API" },
    ] } });
    let server = ScriptedServer::start(vec![Reply::Status(200, None, answer.to_string())]).await;
    let tool = web_search(
        WebSearchConfig {
            provider: SearchProvider::Brave,
            url: Some(format!("{}/res/v1/web/search", server.base_url)),
            api_key_env: None,
            api_key_file: Some(key_file.path().to_path_buf()),
        },
        true,
    )
    .await;
    let outcome = search(
        &tool,
        json!({ "query": "tokio", "allowed_domains": ["docs.rs"] }),
    )
    .await;
    assert!(!outcome.is_error, "{:?}", outcome.output);
    assert_eq!(outcome.output["total_results"], 1);
    assert_eq!(outcome.output["results"][0]["snippet"], "API");
    assert_eq!(
        outcome.output["results"][0]["display_url"],
        "docs.rs/tokio/latest/tokio"
    );
    let received = server.received();
    assert_eq!(received[0].headers["x-subscription-token"], KEY);
    assert_eq!(received[0].query.as_deref(), Some("q=tokio&count=20"));
    assert!(
        !format!("{outcome:?} {tool:?}").contains(KEY),
        "the key never shows"
    );
}

#[tokio::test]
async fn the_fetch_policy_applies_and_a_provider_needs_its_settings() {
    let server = ScriptedServer::start(vec![Reply::Status(200, None, searxng_answer())]).await;
    let searxng = |url: Option<String>| WebSearchConfig {
        provider: SearchProvider::Searxng,
        url,
        api_key_env: None,
        api_key_file: None,
    };
    let tool = web_search(searxng(Some(server.base_url.clone())), false).await;
    let refused = search(&tool, json!({ "query": "anything" })).await;
    assert!(refused.is_error);
    let error = refused.output["error"].as_str().unwrap();
    assert!(error.contains("non-public address"), "{error}");
    assert!(server.received().is_empty(), "nothing was sent");

    let build = |search: Option<WebSearchConfig>| ToolsConfig {
        builtin_tools: true,
        web_search: search,
        ..ToolsConfig::default()
    };
    let no_provider = build(None).build(Vec::new()).await.unwrap();
    assert!(
        no_provider.get("WebSearch").is_none(),
        "no provider, no tool"
    );
    let no_url = build(Some(searxng(None))).build(Vec::new()).await;
    assert!(no_url.unwrap_err().to_string().contains("web_search_url"));
    let brave_without_key = WebSearchConfig {
        provider: SearchProvider::Brave,
        url: None,
        api_key_env: Some("AGENT_RUNTIME_TEST_NO_SUCH_BRAVE_KEY".into()),
        api_key_file: None,
    };
    let no_key = build(Some(brave_without_key)).build(Vec::new()).await;
    assert!(no_key.unwrap_err().to_string().contains("API key"));
}
