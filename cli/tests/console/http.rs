//! The console's routes over real HTTP: the files are public and carry strict headers, the page
//! points at the configured API base path, every other path still authenticates first, and the
//! console can be switched off.

use agent_runtime_cli::config::StoreKind;
use agent_runtime_cli::{RunningServer, ServeConfig, start};
use reqwest::{Client, Method, StatusCode};

async fn server(configure: impl FnOnce(&mut ServeConfig)) -> (RunningServer, String) {
    let mut config = ServeConfig {
        store: StoreKind::Memory,
        ..ServeConfig::default()
    };
    configure(&mut config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = start(config, listener).await.unwrap();
    let url = format!("http://{}", server.address);
    (server, url)
}

async fn stop(server: RunningServer) {
    server.shutdown();
    server.wait().await.unwrap();
}

fn client() -> Client {
    agent_runtime_executor::provider::client_builder()
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_console_is_public_with_strict_headers_and_finds_the_api() {
    let (server, url) = server(|config| config.gateway.base_path = "/api/agent/".to_owned()).await;
    let http = client();

    let page = http.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["cache-control"], "no-cache");
    let policy = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'self'",
        "connect-src 'self'",
        "script-src 'self'",
    ] {
        assert!(policy.contains(directive), "{policy}");
    }
    let html = page.text().await.unwrap();
    assert!(
        html.contains(r#"<meta name="agent-runtime-api-base" content="/api/agent">"#),
        "the page is told the normalised base path"
    );

    let etag = headers["etag"].to_str().unwrap().to_owned();
    let again = http
        .get(format!("{url}/"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);

    for (path, content_type) in [
        ("/console/console.js", "text/javascript; charset=utf-8"),
        ("/console/agent-client.js", "text/javascript; charset=utf-8"),
        ("/console/console.css", "text/css; charset=utf-8"),
    ] {
        let response = http.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(response.headers()["content-type"], content_type, "{path}");
    }
    let head = http
        .request(Method::HEAD, format!("{url}/console/console.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert!(head.bytes().await.unwrap().is_empty());

    // The API is where the page is told it is, and still needs a token.
    let health = http
        .get(format!("{url}/api/agent/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let token = server.dev_token.clone().unwrap();
    let init = http
        .post(format!("{url}/api/agent/commands"))
        .header("authorization", format!("Bearer {token}"))
        .body(r#"{"protocolVersion":1,"commandId":"c1","type":"initialize","data":{"client":{"name":"t","version":"1"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(init.status(), StatusCode::OK);
    stop(server).await;
}

#[tokio::test]
async fn other_paths_and_methods_still_authenticate_before_anything() {
    let (server, url) = server(|_| {}).await;
    let http = client();
    for (method, path) in [
        (Method::GET, "/console/"),
        (Method::GET, "/console/missing.js"),
        (Method::GET, "/index.html"),
        (Method::POST, "/"),
        (Method::DELETE, "/console/console.js"),
    ] {
        let response = http
            .request(method.clone(), format!("{url}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "{method} {path}"
        );
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["commandId"], "authentication", "{method} {path}");
    }
    let token = server.dev_token.clone().unwrap();
    let response = http
        .get(format!("{url}/console/missing.js"))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    stop(server).await;
}

#[tokio::test]
async fn the_console_can_be_switched_off() {
    let (server, url) = server(|config| config.gateway.console = false).await;
    let http = client();
    for path in ["/", "/console/console.js", "/console/agent-client.js"] {
        let response = http.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    stop(server).await;
}
