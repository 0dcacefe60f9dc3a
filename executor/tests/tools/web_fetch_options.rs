//! `WebFetch`'s reference inputs on loopback (through the `allow_private_addresses` test seam):
//! `headers` sent (credentials dropped on a redirect to another origin), `return_headers`,
//! `follow_redirects: false`, `HEAD`, and a write method refused before anything is sent unless
//! the operator allows writes (then an `execute` call, its method and body kept only across a
//! 307/308 redirect).

use std::sync::{Arc, Mutex};

use crate::support::error_text;
use agent_runtime_executor::tools::{ToolContext, ToolsConfig, WebFetchConfig};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use serde_json::json;

/// What a server saw: the path, and the `authorization` and `x-trace` headers.
type Seen = Arc<Mutex<Vec<(String, Option<String>, Option<String>)>>>;

/// A loopback server (its own origin) recording every request in `seen`, answering with
/// `answer(path)`.
async fn server(
    seen: &Seen,
    answer: impl Fn(&str) -> axum::response::Response + Clone + Send + Sync + 'static,
) -> String {
    let seen = Arc::clone(seen);
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri, headers: HeaderMap| {
        let (seen, answer) = (Arc::clone(&seen), answer.clone());
        async move {
            let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
            seen.lock().unwrap().push((
                uri.path().to_owned(),
                header("authorization"),
                header("x-trace"),
            ));
            answer(uri.path())
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// Two origins: `/hop` on the first redirects to the second's `/seen`.
async fn servers() -> (String, String, Seen) {
    let seen = Seen::default();
    let second = server(&seen, |_| {
        ([("x-served-by", "second")], "second origin").into_response()
    })
    .await;
    let target = format!("{second}/seen");
    let first = server(&seen, move |path| match path {
        "/hop" => (
            axum::http::StatusCode::FOUND,
            [("location", target.clone())],
            "",
        )
            .into_response(),
        _ => ([("x-served-by", "first")], "first origin").into_response(),
    })
    .await;
    (first, second, seen)
}

#[tokio::test]
async fn web_fetch_takes_the_reference_options_within_its_policy() {
    let (first, _second, seen) = servers().await;
    let tools = ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(vec!["WebFetch".into()]),
        web_fetch: WebFetchConfig {
            allow_private_addresses: true,
            ..WebFetchConfig::default()
        },
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .unwrap();
    let fetch = tools.get("WebFetch").unwrap().clone();
    let run = |input: serde_json::Value| {
        let fetch = fetch.clone();
        async move {
            match fetch.check(&input) {
                Ok(_) => fetch.run(input, ToolContext::detached()).await,
                Err(refused) => agent_runtime_executor::tools::output::failure(refused),
            }
        }
    };

    let headers = json!({ "Authorization": "Bearer secret-token", "X-Trace": "t-1" });
    let hopped =
        run(json!({ "url": format!("{first}/hop"), "headers": headers, "return_headers": true }))
            .await;
    assert!(!hopped.is_error, "{:?}", hopped.output);
    assert_eq!(hopped.output["body"], "second origin");
    assert_eq!(hopped.output["redirected"], true);
    assert_eq!(hopped.output["redirect_count"], 1);
    assert_eq!(
        hopped.output["redirect_chain"],
        json!([format!("{first}/hop")])
    );
    assert_eq!(hopped.output["status_text"], "OK");
    assert_eq!(hopped.output["content_type"], "text/plain; charset=utf-8");
    assert!(hopped.output["response_time"].as_u64().is_some());
    assert_eq!(hopped.output["headers"]["x-served-by"], "second");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen[0],
            (
                "/hop".into(),
                Some("Bearer secret-token".into()),
                Some("t-1".into())
            )
        );
        assert_eq!(
            seen[1],
            ("/seen".into(), None, Some("t-1".into())),
            "credentials stay with their origin"
        );
    }

    let stopped = run(json!({ "url": format!("{first}/hop"), "follow_redirects": false })).await;
    assert!(!stopped.is_error, "{:?}", stopped.output);
    assert_eq!(stopped.output["status"], 302);
    assert!(stopped.output.get("headers").is_none());

    let head = run(json!({ "url": format!("{first}/page"), "method": "HEAD" })).await;
    assert_eq!(head.output["status"], 200);
    assert_eq!(head.output["body"], "");

    let count = seen.lock().unwrap().len();
    for (input, why) in [
        (
            json!({ "url": format!("{first}/x"), "method": "POST", "body": "{}" }),
            "method POST is not allowed",
        ),
        (
            json!({ "url": format!("{first}/x"), "headers": { "Host": "evil.example" } }),
            "cannot be set",
        ),
    ] {
        let refused = run(input.clone()).await;
        assert!(refused.is_error, "{input}");
        assert!(
            refused.output["error"].as_str().unwrap().contains(why),
            "{:?}",
            refused.output
        );
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        count,
        "nothing was sent for a refused call"
    );
}

/// A loopback server answering every request with `METHOD body`; `/see-other` answers 303 and
/// `/temporary` 307, both to `/echo`.
async fn echo_server() -> String {
    let app = axum::Router::new().fallback(
        |method: axum::http::Method, uri: axum::http::Uri, headers: HeaderMap, body: String| async move {
            let host = headers["host"].to_str().unwrap().replace("127.0.0.1", "localhost");
            match uri.path() {
                "/cross" => (axum::http::StatusCode::TEMPORARY_REDIRECT, [("location", format!("http://{host}/echo"))], String::new()).into_response(),
                "/see-other" => (
                    axum::http::StatusCode::SEE_OTHER,
                    [("location", "/echo")],
                    String::new(),
                )
                    .into_response(),
                "/temporary" => (
                    axum::http::StatusCode::TEMPORARY_REDIRECT,
                    [("location", "/echo")],
                    String::new(),
                )
                    .into_response(),
                _ => format!("{method} {body}").into_response(),
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

#[tokio::test]
async fn write_methods_run_only_when_the_operator_allows_them_and_are_execute_calls() {
    let base = echo_server().await;
    let tools = ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(vec!["WebFetch".into()]),
        web_fetch: WebFetchConfig {
            allow_private_addresses: true,
            allow_write_methods: true,
            ..WebFetchConfig::default()
        },
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .unwrap();
    let fetch = tools.get("WebFetch").unwrap();
    use agent_runtime_executor::tools::ToolEffect;
    let post = json!({ "url": format!("{base}/echo"), "method": "POST", "body": "{\"a\":1}" });
    assert_eq!(fetch.effect_of(&post), ToolEffect::Execute);
    assert_eq!(
        fetch.effect_of(&json!({ "url": base, "method": "GET" })),
        ToolEffect::Network
    );
    fetch.check(&post).expect("allowed by the operator");
    let posted = fetch.run(post, ToolContext::detached()).await;
    assert_eq!(posted.output["body"], "POST {\"a\":1}");

    let deleted = fetch
        .run(
            json!({ "url": format!("{base}/echo"), "method": "DELETE" }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(deleted.output["body"], "DELETE ");
    // A 303 turns the write into a GET without its body; a 307 repeats both.
    let see_other = fetch
        .run(
            json!({ "url": format!("{base}/see-other"), "method": "POST", "body": "x" }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(see_other.output["body"], "GET ");
    let temporary = fetch
        .run(
            json!({ "url": format!("{base}/temporary"), "method": "PUT", "body": "x" }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(temporary.output["body"], "PUT x");
    // A 307 to another origin would send the write where nobody approved it: refused.
    let cross = fetch
        .run(
            json!({ "url": format!("{base}/cross"), "method": "POST", "body": "secret" }),
            ToolContext::detached(),
        )
        .await;
    assert!(cross.is_error);
    assert!(
        error_text(&cross).contains("redirected a POST to another origin"),
        "{}",
        cross.output
    );
    // A read follows it.
    let read = fetch
        .run(
            json!({ "url": format!("{base}/cross") }),
            ToolContext::detached(),
        )
        .await;
    assert_eq!(read.output["body"], "GET ");
    // A body still goes only with POST or PUT.
    assert!(
        fetch
            .check(&json!({ "url": base, "method": "GET", "body": "x" }))
            .is_err()
    );
}
