//! Tenant isolation (architecture invariant 3) and CORS (decision P10) over real HTTP.

use crate::support::*;
use agent_runtime_cli::config::StoreKind;
use serde_json::{Value, json};

#[tokio::test]
async fn another_tenant_cannot_touch_a_session_or_its_approvals() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "needs approval").await;
    let permission_id = server.permission_request(TOKEN_A, &session, 0).await;

    let attempts: Vec<(&str, Value, &str)> = vec![
        (
            "session.read",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "session.resume",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "session.fork",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "session.close",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "input.submit",
            json!({ "sessionId": session, "input": "x" }),
            "SESSION_NOT_FOUND",
        ),
        (
            "request.abort",
            json!({ "sessionId": session }),
            "SESSION_NOT_FOUND",
        ),
        (
            "permission.resolve",
            json!({ "sessionId": session, "permissionRequestId": permission_id, "approved": true }),
            "PERMISSION_NOT_FOUND",
        ),
    ];
    for (kind, data, code) in attempts {
        let (status, body) = server
            .command(TOKEN_B, &format!("b-{kind}"), kind, data.clone())
            .await;
        assert_eq!(status, 404, "{kind}: {body}");
        assert_eq!(body["error"]["code"], code, "{kind}");
        // Indistinguishable from a session that does not exist.
        let mut missing = data.clone();
        missing["sessionId"] = json!("does-not-exist");
        let (missing_status, missing_body) = server
            .command(TOKEN_B, &format!("m-{kind}"), kind, missing)
            .await;
        assert_eq!(missing_status, status, "{kind}");
        assert_eq!(
            missing_body["error"]["code"], body["error"]["code"],
            "{kind}"
        );
    }
    let list = server.ok(TOKEN_B, "session.list", json!({})).await;
    assert_eq!(list["sessions"], json!([]));
    let response = server.events(TOKEN_B, &session, "", None).await;
    assert_eq!(response.status().as_u16(), 404);

    // Another subject of the same tenant cannot answer the owner's approval either.
    let (status, body) = server
        .command(
            TOKEN_A2,
            "a2-resolve",
            "permission.resolve",
            json!({ "sessionId": session, "permissionRequestId": permission_id, "approved": true }),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("PERMISSION_NOT_FOUND"))
    );

    // Tenant-a's session is untouched: the owner resolves and the request completes.
    server
        .resolve(TOKEN_A, &session, &permission_id, true)
        .await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    server.stop().await;
}

#[tokio::test]
async fn command_ids_are_scoped_per_tenant() {
    let server = TestServer::memory().await;
    let (_, a) = server
        .command(TOKEN_A, "same-id", "session.create", json!({}))
        .await;
    let (status, b) = server
        .command(TOKEN_B, "same-id", "session.create", json!({}))
        .await;
    assert_eq!(status, 200);
    assert_ne!(
        a["data"]["session"]["sessionId"],
        b["data"]["session"]["sessionId"]
    );
    server.stop().await;
}

#[tokio::test]
async fn cors_preflight_is_answered_before_authentication_for_allowed_origins() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.gateway.cors_allowed_origins = vec!["https://app.example.com".to_owned()];
    let server = TestServer::start(config).await;
    let preflight = server
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/commands", server.base),
        )
        .header("origin", "https://app.example.com")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status().as_u16(), 200);
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );

    let other = server
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/commands", server.base),
        )
        .header("origin", "https://evil.example.com")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());

    let (status, _) = server
        .command(
            TOKEN_A,
            "cors-init",
            "initialize",
            json!({ "client": { "name": "c", "version": "1" } }),
        )
        .await;
    assert_eq!(status, 200);
    server.stop().await;
}

/// The nanoid alphabet (src/ids.rs): 64 URL-safe symbols, so 21 of them carry 126 random bits.
const ID_ALPHABET: &str = "useandom-26T198340PX75pxJACKVERYMINDBUSHWOLF_GQZbfghjklqvwyzrict";

/// `id` with its character at `at` replaced by the next symbol of the alphabet.
fn neighbour(id: &str, at: usize) -> String {
    let mut chars: Vec<char> = id.chars().collect();
    let position = ID_ALPHABET.find(chars[at]).unwrap();
    chars[at] = ID_ALPHABET.as_bytes()[(position + 1) % 64] as char;
    chars.into_iter().collect()
}

/// An error answer with the probed id blanked, so answers for different ids compare equal.
fn error_shape(status: u16, body: &Value, id: &str) -> (u16, String, String) {
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or("")
        .replace(id, "<id>");
    (status, body["error"]["code"].to_string(), message)
}

/// AUTH-02: every id the server makes (sessions, inputs, requests, permission requests, events)
/// is a 21-symbol nanoid over 64 symbols (126 bits from the thread's CSPRNG), distinct and with
/// evenly spread symbols; probing an id's nearest neighbours finds nothing and answers exactly as
/// an id that never existed.
#[tokio::test]
async fn auth_02_server_ids_are_random_and_their_neighbours_find_nothing() {
    let server = TestServer::memory().await;
    let mut ids: Vec<String> = Vec::new();
    for _ in 0..250 {
        let session = server.create_session(TOKEN_A).await;
        server
            .ok(TOKEN_A, "session.close", json!({ "sessionId": session }))
            .await;
        ids.push(session);
    }
    let session = server.create_session(TOKEN_A).await;
    let submitted = server.submit(TOKEN_A, &session, "needs approval").await;
    let events = server
        .collect_events(TOKEN_A, &session, 0, |e| {
            e["type"] == "permission.requested"
        })
        .await;
    let permission = events.last().unwrap()["data"]["permissionRequestId"]
        .as_str()
        .unwrap()
        .to_owned();
    ids.push(session.clone());
    ids.push(permission.clone());
    for field in ["inputId", "requestId"] {
        ids.push(submitted[field].as_str().unwrap().to_owned());
    }
    ids.extend(
        events
            .iter()
            .map(|e| e["eventId"].as_str().unwrap().to_owned()),
    );

    let mut counts = std::collections::HashMap::new();
    for id in &ids {
        assert_eq!(id.chars().count(), 21, "{id}");
        for symbol in id.chars() {
            assert!(ID_ALPHABET.contains(symbol), "{id}");
            *counts.entry(symbol).or_insert(0usize) += 1;
        }
    }
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "every id is new");
    // About 5,600 symbols, 88 expected per symbol: a generator that favours or skips symbols
    // (a counter, a timestamp, a biased modulo) falls outside these bounds.
    let expected = ids.len() * 21 / 64;
    assert_eq!(counts.len(), 64, "every symbol occurs");
    for (symbol, count) in &counts {
        assert!(
            *count > expected * 2 / 5 && *count < expected * 9 / 5,
            "symbol {symbol:?} occurs {count} times, {expected} expected"
        );
    }

    // Neighbours of a live session and of a pending permission request find nothing.
    let read = |id: String| {
        let server = &server;
        async move {
            let (status, body) = server
                .command(
                    TOKEN_A,
                    &agent_runtime::ids::nanoid(),
                    "session.read",
                    json!({ "sessionId": id }),
                )
                .await;
            (status, body, id)
        }
    };
    let (status, body, id) = read("never-existed-aaaaaaaa".to_owned()).await;
    let missing = error_shape(status, &body, &id);
    assert_eq!(missing.0, 404);
    for at in [0, 10, 20] {
        let (status, body, id) = read(neighbour(&session, at)).await;
        assert_eq!(error_shape(status, &body, &id), missing, "neighbour {id}");
        let response = server.events(TOKEN_A, &id, "", None).await;
        assert_eq!(response.status().as_u16(), 404, "stream of neighbour {id}");

        let probe = neighbour(&permission, at);
        let (status, body) = server
            .command(
                TOKEN_A,
                &agent_runtime::ids::nanoid(),
                "permission.resolve",
                json!({ "sessionId": session, "permissionRequestId": probe, "approved": true }),
            )
            .await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"]["code"], "PERMISSION_NOT_FOUND");
    }
    // The probes resolved nothing: the real request is still pending and resolves once.
    server.resolve(TOKEN_A, &session, &permission, true).await;
    server.stop().await;
}

/// Sends `GET`/`POST` to `path` (under the server's origin) with `host` as the `Host` header.
async fn with_host(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    host: &str,
) -> (u16, Value) {
    let origin = server.base.trim_end_matches("/v1/agent");
    let mut request = server
        .client
        .request(method.clone(), format!("{origin}{path}"))
        .header("host", host)
        .header("authorization", format!("Bearer {TOKEN_A}"));
    if method == reqwest::Method::POST {
        request = request.header("content-type", "application/json").body(
            r#"{"protocolVersion":1,"commandId":"rebind","type":"session.create","data":{}}"#,
        );
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// AUTH-15: a server on loopback answers only requests that name a loopback host (or a listed
/// one): a DNS-rebinding page, whose requests carry its own domain in `Host`, gets `421` on every
/// route and runs nothing, even with a valid token. A foreign `Origin` gets no CORS grant, and the
/// default configuration listens on loopback and still requires a token.
#[tokio::test]
async fn auth_15_a_rebinding_host_is_refused_on_loopback_and_dev_mode_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.gateway.allowed_hosts = vec!["agents.example.com".to_owned()];
    let server = TestServer::start(config).await;
    let port = server
        .base
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let session = server.create_session(TOKEN_A).await;
    let routes = [
        (reqwest::Method::POST, "/v1/agent/commands".to_owned()),
        (
            reqwest::Method::GET,
            format!("/v1/agent/sessions/{session}/events?after=0"),
        ),
        (reqwest::Method::GET, "/v1/agent/healthz".to_owned()),
        (reqwest::Method::GET, "/".to_owned()),
        (reqwest::Method::GET, "/v1/agent/nowhere".to_owned()),
    ];
    for host in [
        format!("evil.example:{port}"),
        "localhost.evil.example".to_owned(),
        "10.0.0.1".to_owned(),
    ] {
        for (method, path) in &routes {
            let (status, body) = with_host(&server, method.clone(), path, &host).await;
            assert_eq!(status, 421, "{method} {path} with Host {host}: {body}");
            assert_eq!(body["error"]["code"], "INVALID_COMMAND");
            assert_eq!(body["commandId"], "routing");
        }
    }
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(
        list["sessions"].as_array().unwrap().len(),
        1,
        "the refused create ran nothing"
    );

    // Loopback names and the listed host are served.
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "agents.example.com".to_owned(),
    ] {
        let (status, body) =
            with_host(&server, reqwest::Method::GET, "/v1/agent/healthz", &host).await;
        assert_eq!(status, 200, "Host {host}: {body}");
    }
    let (status, body) = with_host(
        &server,
        reqwest::Method::POST,
        "/v1/agent/commands",
        &format!("localhost:{port}"),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // A foreign origin gets no CORS grant (none is configured here).
    let preflight = server
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/commands", server.base),
        )
        .header("origin", "http://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(
        preflight
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );

    // Dev mode: loopback by default, and a request without a token is refused.
    assert!(
        agent_runtime_cli::config::ServeConfig::default()
            .listen
            .ip()
            .is_loopback()
    );
    let unauthenticated = server
        .client
        .post(format!("{}/commands", server.base))
        .header("content-type", "application/json")
        .body(r#"{"protocolVersion":1,"commandId":"c","type":"session.list","data":{}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status().as_u16(), 401);
    server.stop().await;
}

/// Every JSON field path in `value` (`a.b[].c`), except inside opaque user data (`metadata`, a
/// tool call's `input`, `providerOptions`), whose keys are the caller's or the model's own.
fn field_paths(prefix: &str, value: &Value, out: &mut std::collections::BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                out.insert(path.clone());
                if !matches!(key.as_str(), "metadata" | "input" | "providerOptions") {
                    field_paths(&path, child, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                field_paths(&format!("{prefix}[]"), item, out);
            }
        }
        _ => {}
    }
}

/// AUTH-08: every field of every answer (successes and errors of each command, the SSE route's
/// refusals, every event type a session streams) is on the allowlist in
/// `tests/fixtures/response_fields.txt`; a new field fails this test until it is reviewed and
/// listed. Nothing on the list names a tenant, an owner, a lease, a fencing token, an executor,
/// a host, a key or a system prompt.
#[tokio::test]
async fn auth_08_every_response_field_is_on_the_reviewed_allowlist() {
    let server = TestServer::memory().await;
    let mut answers: Vec<(String, Value)> = Vec::new();
    let mut run = |label: &str, body: Value| answers.push((label.to_owned(), body));

    let command = |kind: &'static str, data: Value| (kind, data);
    let init = server
        .command(
            TOKEN_A,
            "init",
            "initialize",
            json!({ "client": { "name": "c", "version": "1" } }),
        )
        .await;
    run("initialize", init.1);
    let created = server
        .command(
            TOKEN_A,
            "create",
            "session.create",
            json!({ "metadata": { "k": "v" } }),
        )
        .await;
    let session = created.1["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    run("session.create", created.1);
    let echo = server.submit(TOKEN_A, &session, "hello").await;
    run("input.submit", json!({ "data": echo }));
    server.submit(TOKEN_A, &session, "needs approval").await;
    let permission = server.permission_request(TOKEN_A, &session, 0).await;
    let later = server
        .command(
            TOKEN_A,
            "later",
            "input.submit",
            json!({ "sessionId": session, "input": "queued", "priority": "later" }),
        )
        .await;
    run("input.submit later", later.1);
    for (kind, data) in [
        command("session.read", json!({ "sessionId": session })),
        command("session.list", json!({ "limit": 1 })),
        command(
            "permission.resolve",
            json!({ "sessionId": session, "permissionRequestId": permission, "approved": true }),
        ),
    ] {
        let answer = server
            .command(TOKEN_A, &agent_runtime::ids::nanoid(), kind, data)
            .await;
        run(kind, answer.1);
    }
    let slow = server.submit(TOKEN_A, &session, "demo:slow").await;
    for (kind, data) in [
        command(
            "request.abort",
            json!({ "sessionId": session, "requestId": slow["requestId"] }),
        ),
        command("session.fork", json!({ "sessionId": session })),
        command("session.close", json!({ "sessionId": session })),
        command("session.resume", json!({ "sessionId": session })),
    ] {
        let answer = server
            .command(TOKEN_A, &agent_runtime::ids::nanoid(), kind, data)
            .await;
        run(kind, answer.1);
    }
    let stream = server
        .collect_events(TOKEN_A, &session, 0, |e| e["type"] == "session.closed")
        .await;
    for event in stream {
        let label = format!("event {}", event["type"]);
        run(&label, event);
    }

    // Refusals: unknown session, bad body, no token, missing scope, reused id, route, cursor.
    let (_, missing) = server
        .command(
            TOKEN_A,
            "missing",
            "session.read",
            json!({ "sessionId": "nope" }),
        )
        .await;
    run("404", missing);
    let (_, _, invalid) = server.post_raw(TOKEN_A, b"{".to_vec()).await;
    run("400", invalid);
    let (_, _, unauthenticated) = server.post_raw("wrong-token", b"{}".to_vec()).await;
    run("401", unauthenticated);
    let (_, forbidden) = server
        .command(TOKEN_READ_ONLY, "ro", "session.create", json!({}))
        .await;
    run("403", forbidden);
    let (_, conflict) = server
        .command(TOKEN_A, "create", "session.create", json!({}))
        .await;
    run("409", conflict);
    let response = server
        .events(TOKEN_A, &session, "?after=999999", None)
        .await;
    run("sse 409", response.json().await.unwrap());
    let nowhere = server
        .client
        .get(format!("{}/nowhere", server.base))
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .send()
        .await
        .unwrap();
    run("route 404", nowhere.json().await.unwrap());
    let (_, health) = server.readyz().await;
    run("readyz", health);

    let mut seen = std::collections::BTreeSet::new();
    for (_, answer) in &answers {
        field_paths("", answer, &mut seen);
    }
    let listed_file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/response_fields.txt");
    let listed: std::collections::BTreeSet<String> = std::fs::read_to_string(&listed_file)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let new: Vec<&String> = seen.difference(&listed).collect();
    assert!(
        new.is_empty(),
        "fields not on the allowlist (review them, then add them to {}): {new:#?}",
        listed_file.display()
    );
    for path in &listed {
        let lower = path.to_ascii_lowercase();
        for forbidden in [
            "tenant",
            "owner",
            "lease",
            "fenc",
            "executor",
            "host",
            "worker",
            "apikey",
            "secret",
            "systemprompt",
        ] {
            assert!(!lower.contains(forbidden), "{path} names {forbidden}");
        }
    }
    // The scenario still reaches most of the list (a shrinking scenario would pass vacuously).
    assert!(
        seen.len() * 10 >= listed.len() * 8,
        "{} of {} listed fields seen",
        seen.len(),
        listed.len()
    );
    server.stop().await;
}

/// Sends `request` byte for byte on a new connection and reads the answer until the server
/// closes it; returns the status and the JSON body (`Null` when there is none).
async fn raw_exchange(server: &TestServer, request: &str) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authority = server
        .base
        .trim_start_matches("http://")
        .trim_end_matches("/v1/agent");
    let mut socket = tokio::net::TcpStream::connect(authority).await.unwrap();
    let _ = socket.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        socket.read_to_end(&mut answer),
    )
    .await
    .expect("the server answers and closes");
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {text}"));
    let body = text
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(Value::Null);
    (status, body)
}

fn authority_of(server: &TestServer) -> String {
    server
        .base
        .trim_start_matches("http://")
        .trim_end_matches("/v1/agent")
        .to_owned()
}

/// A `session.create` request with `target` and the given header lines (each ending in CRLF).
fn create_request(target: &str, headers: &str) -> String {
    let body =
        r#"{"protocolVersion":1,"commandId":"atk-08-host","type":"session.create","data":{}}"#;
    format!(
        "POST {target} HTTP/1.1\r\n{headers}authorization: Bearer {TOKEN_A}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn is_bad_host(status: u16, body: &Value) -> bool {
    status == 400 && body["commandId"] == "routing" && body["error"]["code"] == "INVALID_COMMAND"
}

async fn session_count(server: &TestServer) -> usize {
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    list["sessions"].as_array().unwrap().len()
}

/// ATK-08: a request with two `Host` headers is refused with `400` (taking either one would let
/// the DNS-rebinding guard and a proxy disagree about the host), whatever their order and even
/// when both name this server; nothing runs.
#[tokio::test]
async fn atk_08_a_repeated_host_header_is_refused() {
    let server = TestServer::memory().await;
    let authority = authority_of(&server);
    for hosts in [
        format!("host: {authority}\r\nhost: evil.example\r\n"),
        format!("host: evil.example\r\nhost: {authority}\r\n"),
        format!("host: {authority}\r\nhost: {authority}\r\n"),
    ] {
        let (status, body) =
            raw_exchange(&server, &create_request("/v1/agent/commands", &hosts)).await;
        assert!(is_bad_host(status, &body), "{hosts:?}: {status} {body}");
        let healthz = format!("GET /v1/agent/healthz HTTP/1.1\r\n{hosts}connection: close\r\n\r\n");
        let (status, body) = raw_exchange(&server, &healthz).await;
        assert!(is_bad_host(status, &body), "{hosts:?}: {status} {body}");
    }
    assert_eq!(session_count(&server).await, 0, "no refused request ran");
    let one = format!("host: {authority}\r\n");
    let (status, body) = raw_exchange(&server, &create_request("/v1/agent/commands", &one)).await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
}

/// ATK-08: an HTTP/1.1 request without `Host` is refused with `400` (RFC 9112 §3.2); an HTTP/1.0
/// request, which has no `Host` to send, is still served.
#[tokio::test]
async fn atk_08_an_http_1_1_request_without_host_is_refused() {
    let server = TestServer::memory().await;
    let (status, body) = raw_exchange(&server, &create_request("/v1/agent/commands", "")).await;
    assert!(is_bad_host(status, &body), "{status} {body}");
    let (status, body) = raw_exchange(
        &server,
        "GET /v1/agent/healthz HTTP/1.1\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(is_bad_host(status, &body), "{status} {body}");
    assert_eq!(
        session_count(&server).await,
        0,
        "the refused create ran nothing"
    );

    let (status, body) = raw_exchange(&server, "GET /v1/agent/healthz HTTP/1.0\r\n\r\n").await;
    assert_eq!((status, body), (200, json!({ "status": "ok" })));
    server.stop().await;
}

/// ATK-08: the authority of an absolute-form request target counts like `Host` (RFC 9112
/// §3.2.2): one that names another host than `Host` is refused with `400`, one that names a host
/// the DNS-rebinding guard refuses gets its `421` even without a `Host` header, and one that
/// names this server is served: `POST http://evil.example/… HTTP/1.1` with a loopback `Host` is
/// not.
#[tokio::test]
async fn atk_08_an_absolute_form_target_is_checked_like_host() {
    let server = TestServer::memory().await;
    let authority = authority_of(&server);
    let host = format!("host: {authority}\r\n");
    for target in [
        "http://evil.example/v1/agent/commands".to_owned(),
        format!(
            "http://evil.example:{}/v1/agent/commands",
            authority.rsplit(':').next().unwrap()
        ),
        // Another name of this very server still differs from `Host`.
        format!(
            "http://localhost:{}/v1/agent/commands",
            authority.rsplit(':').next().unwrap()
        ),
    ] {
        let (status, body) = raw_exchange(&server, &create_request(&target, &host)).await;
        assert!(is_bad_host(status, &body), "{target}: {status} {body}");
    }
    // Target and Host agree on a foreign name: the guard's 421.
    let (status, body) = raw_exchange(
        &server,
        &create_request(
            "http://evil.example/v1/agent/commands",
            "host: evil.example\r\n",
        ),
    )
    .await;
    assert_eq!(
        (status, &body["commandId"]),
        (421, &json!("routing")),
        "{body}"
    );
    // HTTP/1.0 without Host: the target's authority is what the guard checks.
    let (status, body) = raw_exchange(
        &server,
        "GET http://evil.example/v1/agent/healthz HTTP/1.0\r\n\r\n",
    )
    .await;
    assert_eq!(status, 421, "{body}");
    assert_eq!(session_count(&server).await, 0, "no refused request ran");

    let (status, body) = raw_exchange(
        &server,
        &create_request(&format!("http://{authority}/v1/agent/commands"), &host),
    )
    .await;
    assert_eq!(status, 200, "the target names this server: {body}");
    let (status, body) = raw_exchange(
        &server,
        &format!("GET http://{authority}/v1/agent/healthz HTTP/1.0\r\n\r\n"),
    )
    .await;
    assert_eq!((status, body), (200, json!({ "status": "ok" })));
    server.stop().await;
}

/// ATK-08: the CORS preflight lists the request headers it allows. `*` does not cover
/// `Authorization` (Fetch standard), so a browser would refuse every authenticated request: the
/// headers the browser client and the console send, and the trace context, are listed.
#[tokio::test]
async fn atk_08_the_cors_preflight_lists_authorization_and_the_client_headers() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.gateway.cors_allowed_origins = vec!["https://app.example.com".to_owned()];
    let server = TestServer::start(config).await;
    for (path, method) in [
        ("/commands", "POST"),
        ("/sessions/some-session/events", "GET"),
        ("/ag-ui", "POST"),
        ("/ag-ui/threads/some-thread/events", "GET"),
        ("/a2a", "POST"),
    ] {
        let preflight = server
            .client
            .request(reqwest::Method::OPTIONS, format!("{}{path}", server.base))
            .header("origin", "https://app.example.com")
            .header("access-control-request-method", method)
            .header(
                "access-control-request-headers",
                "authorization,content-type,last-event-id,traceparent,tracestate,accept,a2a-version,a2a-extensions",
            )
            .send()
            .await
            .unwrap();
        assert_eq!(preflight.status().as_u16(), 200);
        let allowed: Vec<String> = preflight
            .headers()
            .get_all("access-control-allow-headers")
            .iter()
            .flat_map(|value| value.to_str().unwrap().split(','))
            .map(|name| name.trim().to_ascii_lowercase())
            .collect();
        for name in [
            "accept",
            "authorization",
            "content-type",
            "last-event-id",
            "traceparent",
            "tracestate",
            "a2a-version",
            "a2a-extensions",
        ] {
            assert!(
                allowed.iter().any(|allowed| allowed == name),
                "{path}: {name} is not in {allowed:?}"
            );
        }
        assert!(!allowed.iter().any(|allowed| allowed == "*"), "{allowed:?}");
    }
    server.stop().await;
}
