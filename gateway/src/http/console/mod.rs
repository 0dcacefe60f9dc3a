//! The web console: static files compiled into the binary, served at `/` (the page) and
//! `/console/…` (its scripts, styles and icon, and the product's browser client from
//! `clients/js/src`), with the API's OpenAPI document at `{base}/openapi.json`. No build step and no authentication: the files hold no data, and everything
//! the console shows comes from the authenticated API with the token the user pastes.
//!
//! Every route is registered explicitly, so any other path still reaches the fallback, which
//! authenticates before answering "Route not found". A method other than GET or HEAD is answered
//! the same way. Responses carry a strict content security policy (no inline script or style,
//! same-origin connections only, no form submission, no framing) and an `ETag`, so `no-cache`
//! costs a 304 on reload.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::any;
use axum::{Extension, Router};
use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::{ClientAddr, not_found};
use crate::state::AppState;

#[cfg(test)]
mod tests;

/// The policy of every console response. `form-action 'none'`: the forms are handled by script,
/// so a page without its script can never submit the token in a URL.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The `<meta>` of `index.html` that tells the page where the API is; its `content` is replaced
/// by the configured base path when the router is built.
const API_BASE_META: &str = r#"<meta name="agent-runtime-api-base" content="/v1/agent">"#;

const HTML: &str = "text/html; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";
const JSON: &str = "application/json";

/// The OpenAPI document of the API (generated from the protocol types, checked for drift by
/// tests/protocol/schema.rs). Its paths name the default base path, replaced by the configured one.
const OPENAPI: &str = include_str!("../../../../docs/openapi.json");
const OPENAPI_BASE: &str = "\"/v1/agent/";

const INDEX: &str = include_str!("../../../console/index.html");

/// Everything under `/console/`: (file name, content type, body).
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "console.css",
        CSS,
        include_str!("../../../console/console.css"),
    ),
    (
        "console.js",
        JAVASCRIPT,
        include_str!("../../../console/console.js"),
    ),
    (
        "conversation.js",
        JAVASCRIPT,
        include_str!("../../../console/conversation.js"),
    ),
    (
        "follow.js",
        JAVASCRIPT,
        include_str!("../../../console/follow.js"),
    ),
    (
        "inspector.js",
        JAVASCRIPT,
        include_str!("../../../console/inspector.js"),
    ),
    (
        "dom.js",
        JAVASCRIPT,
        include_str!("../../../console/dom.js"),
    ),
    ("icon.svg", SVG, include_str!("../../../console/icon.svg")),
    // The product's own browser client (an ES module and the modules it imports).
    (
        "agent-client.js",
        JAVASCRIPT,
        include_str!("../../../../clients/js/src/agent-client.js"),
    ),
    (
        "errors.js",
        JAVASCRIPT,
        include_str!("../../../../clients/js/src/errors.js"),
    ),
    (
        "schema.js",
        JAVASCRIPT,
        include_str!("../../../../clients/js/src/schema.js"),
    ),
    (
        "sse.js",
        JAVASCRIPT,
        include_str!("../../../../clients/js/src/sse.js"),
    ),
];

/// One file, ready to send.
#[derive(Debug)]
pub struct ConsoleFile {
    /// The route, e.g. `/` or `/console/console.js`.
    pub route: String,
    pub content_type: &'static str,
    pub body: Bytes,
    /// A strong validator derived from the body (quoted, as sent).
    pub etag: String,
}

impl ConsoleFile {
    fn new(route: String, content_type: &'static str, body: Bytes) -> Self {
        let digest = hex::encode(Sha256::digest(&body));
        Self {
            route,
            content_type,
            body,
            etag: format!("\"{}\"", &digest[..32]),
        }
    }
}

/// The console's files, with `base_path` (already normalised) announced to the page.
pub fn files(base_path: &str) -> Vec<ConsoleFile> {
    let meta = format!(
        r#"<meta name="agent-runtime-api-base" content="{}">"#,
        escape_attribute(base_path)
    );
    let index = INDEX.replacen(API_BASE_META, &meta, 1);
    let mut files = vec![ConsoleFile::new("/".to_owned(), HTML, Bytes::from(index))];
    let openapi = OPENAPI.replace(OPENAPI_BASE, &format!("\"{base_path}/"));
    files.push(ConsoleFile::new(
        format!("{base_path}/openapi.json"),
        JSON,
        Bytes::from(openapi),
    ));
    files.extend(ASSETS.iter().map(|(name, content_type, body)| {
        ConsoleFile::new(
            format!("/console/{name}"),
            content_type,
            Bytes::from_static(body.as_bytes()),
        )
    }));
    files
}

/// Adds a route per console file.
pub fn add_routes(mut router: Router<Arc<AppState>>, base_path: &str) -> Router<Arc<AppState>> {
    for file in files(base_path) {
        let route = file.route.clone();
        let file = Arc::new(file);
        let handler = move |State(state): State<Arc<AppState>>,
                            method: Method,
                            headers: HeaderMap,
                            client: Option<Extension<ClientAddr>>| {
            let file = Arc::clone(&file);
            async move {
                match respond(&file, &method, &headers) {
                    Some(response) => response,
                    None => not_found(&state, &headers, ClientAddr::of(client)),
                }
            }
        };
        router = router.route(&route, any(handler));
    }
    router
}

/// The response to a request for `file`; `None` for a method the console does not answer.
pub fn respond(file: &ConsoleFile, method: &Method, headers: &HeaderMap) -> Option<Response> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    let fresh = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|tag| tag.trim() == file.etag);
    let (status, body) = if fresh {
        (StatusCode::NOT_MODIFIED, Body::empty())
    } else {
        (StatusCode::OK, Body::from(file.body.clone()))
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let out = response.headers_mut();
    if !fresh {
        out.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(file.content_type),
        );
    }
    if let Ok(etag) = HeaderValue::from_str(&file.etag) {
        out.insert(header::ETAG, etag);
    }
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    out.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    out.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    out.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    out.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    Some(response)
}

/// Escapes text for a double-quoted HTML attribute.
fn escape_attribute(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '"' => escaped.push_str("&quot;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            other => escaped.push(other),
        }
    }
    escaped
}
