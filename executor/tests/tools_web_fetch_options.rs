//! `WebFetch`'s reference inputs on loopback (through the `allow_private_addresses` test seam):
//! `headers` sent (credentials dropped on a redirect to another origin), `return_headers`,
//! `follow_redirects: false`, `HEAD`, and a write method refused before anything is sent.

use std::sync::{Arc, Mutex};

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
    assert_eq!(hopped.output["content"], "second origin");
    assert_eq!(hopped.output["redirected"], true);
    assert_eq!(hopped.output["redirect_count"], 1);
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
    assert_eq!(head.output["content"], "");

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
