//! `WebFetch`: one HTTP request to an `http(s)` URL, answered with the response's text: `GET` and
//! `HEAD`, and `POST`, `PUT` and `DELETE` only when the operator allows write methods (then an
//! `execute` call).
//!
//! Server-side request forgery defence: unless `allow_private_addresses` is set, every address
//! the host name resolves to must be a global one (not loopback, private, link-local, CGNAT,
//! documentation, multicast, …). The check runs after DNS resolution, the connection is pinned
//! to the vetted address (so a second DNS answer cannot swap in `127.0.0.1`), and redirects are
//! followed by hand so that every hop is checked the same way. Hosts in `allow_hosts` skip the
//! address check (an operator's internal documentation server).
//!
//! Cloud metadata endpoints (169.254.0.0/16, `fd00:ec2::254`, `100.100.100.200`,
//! `metadata.google.internal`, …) are refused always, even with `allow_private_addresses` or
//! `allow_hosts` (reliability catalogue TOOL-14): they hand out the host's credentials.
//!
//! Names are resolved through a [`HostResolver`] (the system's by default); the HTTP client
//! resolves through the same resolver, so a test can prove that the connection goes to the
//! vetted address and not to a second, rebound answer (TOOL-15).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use agent_runtime_http_client::address::is_metadata_host;
use agent_runtime_http_client::address::{self, Refusal as VetRefusal};
pub use agent_runtime_http_client::address::{
    HostResolver, SystemResolver, is_global, is_metadata_address, pinned_client,
};
use async_trait::async_trait;
use futures_util::StreamExt;
use reqwest::Url;
use serde_json::{Value, json};

use super::output::{failed, failure, success, truncate};
use super::{Tool, ToolCheck, ToolContext, ToolEffect, ToolOutcome};
use crate::provider::ToolSpec;
use crate::tools::text;

/// Longest URL fetched (FUZZ-10).
const MAX_URL_BYTES: usize = 8 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebFetchConfig {
    /// Allow loopback, private and other non-global addresses. Default off.
    pub allow_private_addresses: bool,
    /// Host names exempt from the address check. Default none.
    pub allow_hosts: Vec<String>,
    /// Largest body read; the rest is cut with a marker. Default 1 MiB.
    pub max_body_bytes: usize,
    /// Limit for the whole fetch, redirects included. Default 30 s.
    pub timeout: Duration,
    /// Redirects followed. Default 5.
    pub max_redirects: usize,
    /// Let calls send POST, PUT and DELETE (with a `body`): an `execute`-kind call, asked for
    /// in every mode but `yolo`. Default off: WebFetch only reads.
    pub allow_write_methods: bool,
}

impl Default for WebFetchConfig {
    fn default() -> Self {
        Self {
            allow_private_addresses: false,
            allow_hosts: Vec::new(),
            max_body_bytes: 1024 * 1024,
            timeout: Duration::from_secs(30),
            max_redirects: 5,
            allow_write_methods: false,
        }
    }
}

/// What a request answered.
#[derive(Debug)]
pub(super) struct Fetched {
    /// The URL that answered (after redirects).
    pub url: Url,
    pub status: u16,
    pub content_type: String,
    pub body: String,
    /// The body went past `max_body_bytes` and was cut.
    pub cut: bool,
    /// The response's headers (names lower-case; repeated ones joined with `, `).
    pub headers: serde_json::Map<String, Value>,
    /// Redirects followed.
    pub redirects: usize,
    /// The URLs that redirected, in order.
    pub redirect_chain: Vec<String>,
    pub status_text: String,
}

/// How a request goes: its method, its body, and whether and how far redirects are followed.
#[derive(Clone, Debug)]
pub(super) struct GetOptions {
    pub method: reqwest::Method,
    /// Sent with POST and PUT.
    pub body: Option<String>,
    pub follow_redirects: bool,
    pub max_redirects: usize,
}

/// Headers a call may not set: the connection's own, and what the client sets itself.
const REFUSED_HEADERS: [&str; 7] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
];
/// Headers not sent on to another origin after a redirect.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

#[derive(Debug)]
pub struct WebFetchTool {
    pub config: WebFetchConfig,
    pub max_output_bytes: usize,
    /// Where host names are resolved. Default: the system resolver.
    pub resolver: Arc<dyn HostResolver>,
}

/// The HTTP client's DNS goes through the same resolver; the vetted address is pinned on top
/// of it with `ClientBuilder::resolve`, so in practice the client never asks it.
#[derive(Debug)]
struct ClientResolver(Arc<dyn HostResolver>);

impl reqwest::dns::Resolve for ClientResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let resolver = Arc::clone(&self.0);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses = resolver.lookup(&host, 0).await?;
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

impl WebFetchTool {
    pub fn new(config: WebFetchConfig, max_output_bytes: usize) -> Self {
        Self {
            config,
            max_output_bytes,
            resolver: Arc::new(SystemResolver),
        }
    }
}

impl WebFetchTool {
    pub(super) fn parse(&self, raw: &str) -> Result<Url, String> {
        // Servers refuse much shorter ones; a huge URL is not sent anywhere, nor quoted back.
        if raw.len() > MAX_URL_BYTES {
            return Err(format!(
                "the URL is {} bytes long; the limit is {MAX_URL_BYTES} bytes",
                raw.len()
            ));
        }
        let url = Url::parse(raw).map_err(|e| format!("invalid URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "only http and https URLs can be fetched, not {}",
                url.scheme()
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("URLs with credentials are refused".to_owned());
        }
        let Some(host) = url.host_str() else {
            return Err("the URL has no host".to_owned());
        };
        // `docs.example.com.` names the same host as `docs.example.com` but not the same text:
        // refused, so no allowlist or rule has to think about it (TOOL-17).
        if host.ends_with('.') {
            return Err("host names ending with a dot are refused".to_owned());
        }
        let literal = host.trim_matches(['[', ']']).parse::<IpAddr>();
        if is_metadata_host(host) || literal.is_ok_and(is_metadata_address) {
            return Err(format!(
                "{host} is a cloud metadata endpoint; fetching it is refused"
            ));
        }
        Ok(url)
    }

    fn exempt(&self, url: &Url) -> bool {
        self.config.allow_private_addresses
            || url.host_str().is_some_and(|host| {
                self.config
                    .allow_hosts
                    .iter()
                    .any(|h| h.eq_ignore_ascii_case(host))
            })
    }

    /// The address to connect to, after the address check.
    pub(super) async fn vet(&self, url: &Url) -> Result<SocketAddr, String> {
        self.vet_address(url)
            .await
            .map_err(VetRefusal::into_message)
    }

    /// [`WebFetchTool::vet`], saying which rule refused the address.
    pub(crate) async fn vet_address(&self, url: &Url) -> Result<SocketAddr, VetRefusal> {
        address::vet(self.resolver.as_ref(), url, self.exempt(url), "fetching it").await
    }

    async fn fetch(&self, url: Url, input: &Value) -> Result<ToolOutcome, String> {
        let headers: Vec<(String, String)> = input["headers"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| {
                Some((name.to_ascii_lowercase(), value.as_str()?.to_owned()))
            })
            .collect();
        let method = input["method"].as_str().unwrap_or("GET");
        let options = GetOptions {
            method: reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::GET),
            body: input["body"].as_str().map(str::to_owned),
            follow_redirects: input["follow_redirects"].as_bool().unwrap_or(true),
            max_redirects: input["max_redirects"]
                .as_u64()
                .map_or(self.config.max_redirects, |n| {
                    (n as usize).min(self.config.max_redirects)
                }),
        };
        let started = std::time::Instant::now();
        let fetched = self.get_with(url, &headers, &options).await?;
        let (body, truncated) = truncate(&fetched.body, self.max_output_bytes);
        let mut output = json!({
            "status": fetched.status, "status_text": fetched.status_text, "body": body,
            "url": fetched.url.as_str(), "redirected": fetched.redirects > 0,
            "redirect_count": fetched.redirects, "redirect_chain": fetched.redirect_chain,
            "content_type": fetched.content_type,
            "response_time": started.elapsed().as_millis() as u64,
            "truncated": truncated || fetched.cut,
        });
        if input["return_headers"] == true {
            output["headers"] = Value::Object(fetched.headers.clone());
        }
        let summary = format!("HTTP {} from {}", fetched.status, fetched.url);
        let fine = (200..300).contains(&fetched.status)
            || (!options.follow_redirects && (300..400).contains(&fetched.status));
        Ok(match fine {
            true => success(output, summary),
            false => failed(output, summary),
        })
    }

    /// A GET of `url` (with `headers`) under this tool's address policy: every hop's address
    /// vetted and pinned, redirects followed up to the limit, the body read up to its limit.
    pub(super) async fn get(
        &self,
        url: Url,
        headers: &[(&'static str, String)],
    ) -> Result<Fetched, String> {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.clone()))
            .collect();
        let options = GetOptions {
            method: reqwest::Method::GET,
            body: None,
            follow_redirects: true,
            max_redirects: self.config.max_redirects,
        };
        self.get_with(url, &headers, &options).await
    }

    // Stays whole: one loop per redirect hop, each vetting its address before it connects: the
    // check and the connection must not come apart.
    async fn get_with(
        &self,
        mut url: Url,
        headers: &[(String, String)],
        options: &GetOptions,
    ) -> Result<Fetched, String> {
        let origin = url.origin();
        let mut redirect_chain = Vec::new();
        let mut method = options.method.clone();
        let mut body = options.body.clone();
        loop {
            let redirects = redirect_chain.len();
            let address = self.vet(&url).await?;
            let client = pinned_client(&url, address)
                .dns_resolver(ClientResolver(Arc::clone(&self.resolver)))
                .build()
                .map_err(|_| "cannot create the HTTP client".to_owned())?;
            let mut request = client
                .request(method.clone(), url.clone())
                .header("user-agent", "agent-runtime-webfetch/1");
            if let Some(body) = &body {
                request = request.body(body.clone());
            }
            let same_origin = url.origin() == origin;
            for (name, value) in headers {
                if !same_origin && CREDENTIAL_HEADERS.contains(&name.as_str()) {
                    continue;
                }
                request = request.header(name.as_str(), value);
            }
            let response = request
                .send()
                .await
                .map_err(|e| format!("fetching {url} failed: {}", e.without_url()))?;
            let status = response.status();
            if status.is_redirection() && options.follow_redirects {
                if redirects == options.max_redirects {
                    return Err(format!("more than {} redirects", options.max_redirects));
                }
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| format!("{url} redirected without a location"))?;
                let next = url
                    .join(location)
                    .map_err(|e| format!("bad redirect: {e}"))?;
                let next = self.parse(next.as_str())?;
                let write = !matches!(method, reqwest::Method::GET | reqwest::Method::HEAD);
                // As browsers do: only 307 and 308 repeat the method and its body, and a write
                // is never repeated to an origin nobody approved it for.
                if matches!(status.as_u16(), 307 | 308) {
                    if write && next.origin() != url.origin() {
                        return Err(format!(
                            "{url} redirected a {method} to another origin ({next}); a write is \
                             sent only where it was approved"
                        ));
                    }
                } else if method != reqwest::Method::HEAD {
                    method = reqwest::Method::GET;
                    body = None;
                }
                redirect_chain.push(url.to_string());
                url = next;
                continue;
            }
            let mut response_headers = serde_json::Map::new();
            for (name, value) in response.headers() {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                match response_headers.get_mut(name.as_str()) {
                    Some(Value::String(joined)) => {
                        joined.push_str(", ");
                        joined.push_str(&value);
                    }
                    _ => {
                        response_headers.insert(name.as_str().to_owned(), Value::String(value));
                    }
                }
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let (text, cut) = self.read_body(response).await?;
            return Ok(Fetched {
                url,
                status: status.as_u16(),
                content_type,
                body: text,
                cut,
                headers: response_headers,
                redirects,
                redirect_chain,
                status_text: status.canonical_reason().unwrap_or_default().to_owned(),
            });
        }
    }

    /// `raw` as a URL this tool may fetch (scheme, credentials, metadata hosts checked).
    pub(super) fn url(&self, raw: &str) -> Result<Url, String> {
        self.parse(raw)
    }

    async fn read_body(&self, response: reqwest::Response) -> Result<(String, bool), String> {
        let limit = self.config.max_body_bytes;
        let mut stream = response.bytes_stream();
        let mut body = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| format!("reading the body failed: {}", e.without_url()))?;
            body.extend_from_slice(&chunk);
            if body.len() > limit {
                body.truncate(limit);
                return Ok((String::from_utf8_lossy(&body).into_owned(), true));
            }
        }
        Ok((String::from_utf8_lossy(&body).into_owned(), false))
    }
}

#[async_trait]
impl Tool for WebFetchTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "WebFetch".to_owned(),
            description: "Fetches an http(s) URL (GET or HEAD; POST, PUT and DELETE where the \
                server allows them) and returns the response. `headers` are sent with it (credentials only to the same origin after a \
                redirect); `return_headers` adds the response's headers; `timeout` is in ms."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "url": { "type": "string", "minLength": 1 },
                    "method": { "type": "string", "enum": ["GET", "POST", "PUT", "DELETE", "HEAD"] },
                    "headers": { "type": "object", "additionalProperties": { "type": "string" } },
                    "body": { "type": "string" },
                    "timeout": { "type": "integer", "minimum": 1000, "maximum": 120000 },
                    "follow_redirects": { "type": "boolean" },
                    "max_redirects": { "type": "integer", "minimum": 0, "maximum": 10 },
                    "return_headers": { "type": "boolean" },
                },
                "required": ["url"],
                "additionalProperties": false,
            }),
        }
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Network
    }

    /// A write (POST, PUT, DELETE) acts on the world: an `execute` call (docs/agent.md §6.14).
    fn effect_of(&self, input: &Value) -> ToolEffect {
        match input["method"].as_str() {
            Some("POST" | "PUT" | "DELETE") => ToolEffect::Execute,
            _ => ToolEffect::Network,
        }
    }

    /// Refuses what is knowable without DNS (scheme, IP literals, a method or header this server
    /// does not send); names are vetted in `run`.
    fn check(&self, input: &Value) -> Result<ToolCheck, String> {
        let method = input["method"].as_str().unwrap_or("GET");
        if !self.config.allow_write_methods && !matches!(method, "GET" | "HEAD") {
            return Err(format!(
                "method {method} is not allowed on this server: WebFetch only reads (GET, HEAD); \
                 the operator may allow writes (tools.web_fetch_allow_write_methods)"
            ));
        }
        if input.get("body").is_some() && !matches!(method, "POST" | "PUT") {
            return Err("a body is sent only with POST or PUT".to_owned());
        }
        for name in input["headers"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(n, _)| n)
        {
            let lower = name.to_ascii_lowercase();
            let token = !lower.is_empty()
                && lower
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
            if !token || REFUSED_HEADERS.contains(&lower.as_str()) {
                return Err(format!("the header {name:?} cannot be set"));
            }
        }
        let url = self.parse(text(input, "url"))?;
        let literal = url
            .host_str()
            .unwrap_or_default()
            .trim_matches(['[', ']'])
            .parse::<IpAddr>();
        if let Ok(ip) = literal
            && !self.exempt(&url)
            && !is_global(ip)
        {
            return Err(format!("fetching the non-public address {ip} is refused"));
        }
        Ok(ToolCheck {
            subject: Some(url.to_string()),
            affected_paths: Vec::new(),
        })
    }

    fn approval_title(&self, input: &Value) -> String {
        format!("Fetch {}", text(input, "url"))
    }

    async fn run(&self, input: Value, _context: ToolContext) -> ToolOutcome {
        if let Err(error) = self.check(&input) {
            return failure(error);
        }
        let url = match self.parse(text(&input, "url")) {
            Ok(url) => url,
            Err(error) => return failure(error),
        };
        let timeout = input["timeout"].as_u64().map_or(self.config.timeout, |ms| {
            Duration::from_millis(ms).min(self.config.timeout)
        });
        match tokio::time::timeout(timeout, self.fetch(url, &input)).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(error)) => failure(error),
            Err(_) => failure(format!(
                "the fetch took longer than {} ms",
                timeout.as_millis()
            )),
        }
    }
}
