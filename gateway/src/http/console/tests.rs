use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};

use super::*;

fn file<'a>(files: &'a [ConsoleFile], route: &str) -> &'a ConsoleFile {
    files
        .iter()
        .find(|file| file.route == route)
        .unwrap_or_else(|| panic!("{route} is served"))
}

fn text(file: &ConsoleFile) -> &str {
    std::str::from_utf8(&file.body).unwrap()
}

#[test]
fn the_page_announces_the_configured_base_path_escaped() {
    let files = files("/v1/agent");
    assert!(text(file(&files, "/")).contains(API_BASE_META));

    let files = super::files("/a\"b<c>&d");
    let index = text(file(&files, "/"));
    assert!(
        index.contains(r#"content="/a&quot;b&lt;c&gt;&amp;d""#),
        "{index}"
    );
    assert!(!index.contains(API_BASE_META));
}

#[test]
fn the_page_loads_only_files_that_are_served_and_has_no_inline_code() {
    let files = files("/v1/agent");
    let index = text(file(&files, "/"));
    for reference in [
        "/console/console.css",
        "/console/console.js",
        "/console/icon.svg",
    ] {
        assert!(
            index.contains(reference),
            "index.html references {reference}"
        );
        file(&files, reference);
    }
    assert!(!index.contains("<script>"), "no inline script");
    assert!(!index.contains("<style"), "no inline style");
    assert!(!index.contains(" style="), "no style attribute");
    assert!(
        !has_event_handler_attribute(index),
        "no inline event handler"
    );
}

/// Whether the text has an ` onsomething=` attribute.
fn has_event_handler_attribute(html: &str) -> bool {
    html.match_indices(" on").any(|(at, _)| {
        let rest = &html[at + 3..];
        let name_length = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        name_length > 0 && rest[name_length..].starts_with('=')
    })
}

#[test]
fn every_relative_import_of_a_served_module_is_served() {
    let files = files("/v1/agent");
    for module in files.iter().filter(|file| file.content_type == JAVASCRIPT) {
        for line in text(module).lines() {
            let Some(start) = line.find("from './") else {
                continue;
            };
            let name = &line[start + "from './".len()..];
            let name = &name[..name.find('\'').unwrap()];
            file(&files, &format!("/console/{name}"));
        }
    }
}

#[test]
fn get_answers_with_the_content_type_and_the_security_headers() {
    let files = files("/v1/agent");
    let cases = [
        ("/", "text/html; charset=utf-8"),
        ("/console/console.js", "text/javascript; charset=utf-8"),
        ("/console/agent-client.js", "text/javascript; charset=utf-8"),
        ("/console/console.css", "text/css; charset=utf-8"),
        ("/console/icon.svg", "image/svg+xml"),
    ];
    for (route, content_type) in cases {
        let served = file(&files, route);
        let response = respond(served, &Method::GET, &HeaderMap::new()).unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers();
        assert_eq!(headers[header::CONTENT_TYPE], content_type);
        assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(headers[header::ETAG], served.etag.as_str());
        let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(policy.starts_with("default-src 'self';"), "{policy}");
        assert!(policy.contains("connect-src 'self'"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
    }
}

#[test]
fn a_matching_if_none_match_gets_304_without_a_body() {
    let files = files("/v1/agent");
    let served = file(&files, "/console/console.js");
    let mut headers = HeaderMap::new();
    let tags = format!("\"other\", {}", served.etag);
    headers.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&tags).unwrap());
    let response = respond(served, &Method::GET, &headers).unwrap();
    assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(response.headers()[header::ETAG], served.etag.as_str());

    headers.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"stale\""));
    let response = respond(served, &Method::GET, &headers).unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[test]
fn only_get_and_head_are_answered() {
    let files = files("/v1/agent");
    let served = file(&files, "/");
    assert!(respond(served, &Method::HEAD, &HeaderMap::new()).is_some());
    for method in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS] {
        assert!(
            respond(served, &method, &HeaderMap::new()).is_none(),
            "{method}"
        );
    }
}

#[test]
fn the_openapi_document_is_served_under_the_configured_base_path() {
    let files = files("/v1/agent");
    let document: serde_json::Value =
        serde_json::from_str(text(file(&files, "/v1/agent/openapi.json"))).unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    assert!(document["paths"]["/v1/agent/commands"]["post"].is_object());

    let files = super::files("/api");
    let document: serde_json::Value =
        serde_json::from_str(text(file(&files, "/api/openapi.json"))).unwrap();
    let paths: Vec<&String> = document["paths"].as_object().unwrap().keys().collect();
    assert_eq!(paths, ["/api/commands", "/api/sessions/{sessionId}/events"]);
}
