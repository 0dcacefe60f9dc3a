//! `WebSearch`: a web search through the search provider the operator configured
//! (docs/agent.md §6.5): a self-hosted SearXNG (its JSON API) or the Brave Search API (a hosted
//! one, with its key from the environment or a file). No public instance is ever used by default:
//! without a configured provider the tool is not registered. Every request goes through
//! `WebFetch`'s address policy (non-public and metadata addresses refused after DNS and on every
//! redirect).
//!
//! The answer has the reference's shape: `{query, results: [{title, url, snippet, display_url,
//! source}], provider, total_results, fetched_at}`, at most 8 results, after the call's domain
//! filters (blocked first, then allowed; results without a host are dropped).

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use reqwest::Url;
use serde_json::{Value, json};

use super::output::{failure, success};
use super::web_fetch::WebFetchTool;
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;
use crate::tools::text;

pub const WEB_SEARCH_TOOL: &str = "WebSearch";
/// Results kept after filtering.
const MAX_RESULTS: usize = 8;
/// Longest query sent.
const MAX_QUERY_CHARS: usize = 500;

/// Which search API answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SearchProvider {
    /// A SearXNG instance: `GET {url}/search?q=…&format=json`.
    Searxng,
    /// The Brave Search API: `GET {url}?q=…` with `X-Subscription-Token`.
    Brave,
}

impl SearchProvider {
    pub fn parse(name: &str) -> Option<SearchProvider> {
        match name {
            "searxng" => Some(SearchProvider::Searxng),
            "brave" => Some(SearchProvider::Brave),
            _ => None,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            SearchProvider::Searxng => "searxng",
            SearchProvider::Brave => "brave",
        }
    }
}

/// The Brave Search API's endpoint.
pub const DEFAULT_BRAVE_URL: &str = "https://api.search.brave.com/res/v1/web/search";

#[derive(Debug)]
pub struct WebSearchTool {
    pub provider: SearchProvider,
    /// SearXNG's base URL, or the Brave endpoint.
    pub url: String,
    /// The API key (Brave), read once at start-up; never shown.
    pub api_key: Option<agent_runtime::secret::Secret>,
    /// The egress: `WebFetch`'s address policy and limits.
    pub fetch: WebFetchTool,
}

/// One result, in the reference's shape.
fn result(title: &str, url: &str, snippet: &str, source: &str) -> Option<Value> {
    let parsed = Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    let display = format!("{host}{}", parsed.path().trim_end_matches('/'));
    Some(json!({
        "title": title, "url": url, "snippet": snippet,
        "display_url": display, "source": source,
    }))
}

fn domain_matches(host: &str, domain: &str) -> bool {
    let domain = domain.trim_start_matches("*.").trim_start_matches('.');
    host.eq_ignore_ascii_case(domain)
        || host
            .to_ascii_lowercase()
            .ends_with(&format!(".{}", domain.to_ascii_lowercase()))
}

fn strings(input: &Value, key: &str) -> Vec<String> {
    input[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// The results the call's filters keep: blocked domains first, then allowed ones; a result
/// without a host is dropped.
fn filtered(results: Vec<Value>, input: &Value) -> Vec<Value> {
    let blocked = strings(input, "blocked_domains");
    let allowed = strings(input, "allowed_domains");
    results
        .into_iter()
        .filter(|result| {
            let Some(host) = result["url"]
                .as_str()
                .and_then(|u| Url::parse(u).ok())
                .and_then(|u| u.host_str().map(str::to_owned))
            else {
                return false;
            };
            !blocked.iter().any(|d| domain_matches(&host, d))
                && (allowed.is_empty() || allowed.iter().any(|d| domain_matches(&host, d)))
        })
        .collect()
}

impl WebSearchTool {
    fn request_url(&self, query: &str) -> Result<Url, String> {
        let mut url = match self.provider {
            SearchProvider::Searxng => {
                let base = self.url.trim_end_matches('/');
                self.fetch.url(&format!("{base}/search"))?
            }
            SearchProvider::Brave => self.fetch.url(&self.url)?,
        };
        {
            let mut pairs = url.query_pairs_mut();
            pairs.append_pair("q", query);
            match self.provider {
                SearchProvider::Searxng => pairs.append_pair("format", "json"),
                SearchProvider::Brave => pairs.append_pair("count", "20"),
            };
        }
        Ok(url)
    }

    /// The provider's results, in the reference's shape.
    fn parse(&self, body: &Value) -> Vec<Value> {
        let source = self.provider.name();
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let items = match self.provider {
            SearchProvider::Searxng => body["results"].as_array(),
            SearchProvider::Brave => body["web"]["results"].as_array(),
        };
        items
            .into_iter()
            .flatten()
            .filter_map(|item| {
                let snippet = match self.provider {
                    SearchProvider::Searxng => text(&item["content"]),
                    SearchProvider::Brave => text(&item["description"]),
                };
                result(&text(&item["title"]), &text(&item["url"]), &snippet, source)
            })
            .collect()
    }

    async fn search(&self, query: &str) -> Result<Vec<Value>, String> {
        let url = self.request_url(query)?;
        let mut headers = vec![("accept", "application/json".to_owned())];
        if let Some(key) = &self.api_key {
            headers.push(("x-subscription-token", key.expose().to_owned()));
        }
        let fetched = self.fetch.get(url, &headers).await?;
        let provider = self.provider.name();
        if !(200..300).contains(&fetched.status) {
            return Err(format!(
                "the {provider} search answered HTTP {}",
                fetched.status
            ));
        }
        if fetched.cut {
            return Err(format!("the {provider} search answer was too large"));
        }
        let body: Value = serde_json::from_str(&fetched.body)
            .map_err(|_| format!("the {provider} search answer is not JSON"))?;
        Ok(self.parse(&body))
    }
}

#[async_trait]
impl Tool for WebSearchTool {
    fn spec(&self) -> ToolSpec {
        let domains = json!({ "type": "array", "items": { "type": "string", "minLength": 1 } });
        ToolSpec {
            name: WEB_SEARCH_TOOL.to_owned(),
            description: "Searches the web and returns up to 8 results (title, url, snippet). \
                `allowed_domains` keeps only results from those domains; `blocked_domains` \
                drops results from those."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "query": { "type": "string", "minLength": 2 },
                    "allowed_domains": domains,
                    "blocked_domains": domains,
                },
                "required": ["query"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Network
    }

    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        let query = text(input, "query");
        if query.chars().count() > MAX_QUERY_CHARS {
            return Err(format!(
                "the query is longer than {MAX_QUERY_CHARS} characters"
            ));
        }
        self.request_url(query)?;
        Ok(ToolCheck {
            subject: Some(query.to_owned()),
            affected_paths: Vec::new(),
        })
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Search the web for {}", text(input, "query"))
    }

    async fn run(&self, input: Value, context: ToolContext) -> ToolOutcome {
        let query = text(&input, "query");
        let provider = self.provider.name();
        context.report(
            format!("Searching with {provider}"),
            Some(json!({ "query": query, "providerCount": 1 })),
        );
        let found = match self.search(query).await {
            Ok(found) => found,
            Err(error) => {
                return failure(format!("All search providers failed:\n{provider}: {error}"));
            }
        };
        let mut results = filtered(found, &input);
        let total = results.len();
        results.truncate(MAX_RESULTS);
        let fetched_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64);
        context.say(format!("Search completed with {provider}"));
        success(
            json!({
                "query": query, "results": results, "provider": provider,
                "total_results": total, "fetched_at": fetched_at,
            }),
            format!("{total} result(s) from {provider}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_filters_drop_blocked_then_keep_allowed_and_hostless_results() {
        let results = vec![
            json!({ "url": "https://docs.rs/tokio" }),
            json!({ "url": "https://blog.example.com/post" }),
            json!({ "url": "https://example.com/" }),
            json!({ "url": "not a url" }),
        ];
        let input = json!({ "blocked_domains": ["blog.example.com"], "allowed_domains": ["example.com", "docs.rs"] });
        let kept = filtered(results.clone(), &input);
        let kept: Vec<&str> = kept.iter().map(|r| r["url"].as_str().unwrap()).collect();
        assert_eq!(kept, ["https://docs.rs/tokio", "https://example.com/"]);
        assert_eq!(filtered(results, &json!({})).len(), 3);
    }
}
