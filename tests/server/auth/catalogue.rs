//! P0 catalogue entries of docs/reliability.md (AUTH: authentication, tenancy and BOLA) over real
//! HTTP and SSE: AUTH-01, AUTH-03, AUTH-04, AUTH-05, AUTH-06, AUTH-07, AUTH-09 and AUTH-14.
//! (AUTH-11 is in tests/cluster/authority.rs: it needs the gRPC cluster.)
//!
//! Like everything under `tests/server/`, this runs twice in CI: on the memory store and again on
//! PostgreSQL (`AGENT_RUNTIME_TEST_STORE=postgres`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{AUDIENCE, ISSUER, generic_401, jwt_config};
use crate::support::*;
use agent_runtime::protocol::Scope;
use agent_runtime::protocol::command::COMMAND_TYPES;
use agent_runtime_cli::config::{ServeConfig, StoreKind};
use agent_runtime_gateway::auth::testing::{
    RSA_A_PUBLIC_PEM, TestKey, claims, jwks, unsigned_token,
};
use agent_runtime_gateway::auth::{JwtAlgorithm, JwtConfig, JwtKeySource};
use agent_runtime_gateway::{AuditConfig, AuditTarget, TokenGrant};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// A token of tenant-a with only `permission:resolve`, and one with no scope at all (AUTH-03).
const TOKEN_RESOLVE_ONLY: &str = "token-resolve-only";
const TOKEN_NO_SCOPES: &str = "token-no-scopes";

fn config_with_extra_tokens(dir: &Path) -> ServeConfig {
    let mut config = test_config(StoreKind::Memory, dir);
    config.tokens.push(TokenGrant::for_token(
        TOKEN_RESOLVE_ONLY,
        "tenant-a",
        "resolver",
        &[Scope::PermissionResolve],
    ));
    config.tokens.push(TokenGrant::for_token(
        TOKEN_NO_SCOPES,
        "tenant-a",
        "nobody",
        &[],
    ));
    config
}

/// `body` as text with every `(needle, placeholder)` substituted, to compare two answers whose
/// only legitimate difference is the ids the caller sent.
fn normalized(body: &Value, substitutions: &[(&str, &str)]) -> String {
    let mut text = body.to_string();
    for (needle, placeholder) in substitutions {
        if !needle.is_empty() {
            text = text.replace(needle, placeholder);
        }
    }
    text
}

/// Waits for a `permission.requested` event on `session`; returns its data.
async fn pending_approval(server: &TestServer, token: &str, session: &str) -> Value {
    let events = server
        .collect_events(token, session, 0, |e| e["type"] == "permission.requested")
        .await;
    let last = events.last().expect("a permission.requested event");
    assert_eq!(last["type"], "permission.requested", "{last}");
    last["data"].clone()
}

/// `recovery.lastEventSequence` of a session (its event head), read by `token`.
async fn event_head(server: &TestServer, token: &str, session: &str) -> Value {
    let data = server.read(token, session).await;
    data["recovery"]["lastEventSequence"].clone()
}

async fn session_ids(server: &TestServer, token: &str) -> Vec<String> {
    let data = server.ok(token, "session.list", json!({})).await;
    data["sessions"]
        .as_array()
        .expect("a session list")
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap().to_owned())
        .collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

// ---------------------------------------------------------------------------------------------
// AUTH-01
// ---------------------------------------------------------------------------------------------

/// The HTTP routes of gateway/src/http/mod.rs, read from the source at build time: a new route
/// must be classified here (and get a BOLA entry if it takes an object id) or this test fails.
const ROUTER_SOURCE: &str = include_str!("../../../gateway/src/http/mod.rs");
const ROUTES_WITHOUT_OBJECT_ID: [&str; 3] = ["healthz", "readyz", "commands"];
const ROUTES_WITH_OBJECT_ID: [&str; 1] = ["sessions/{{session_id}}/events"];

fn router_routes() -> Vec<String> {
    ROUTER_SOURCE
        .split("format!(\"{base}/")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

/// AUTH-01: every command type that `initialize` lists, and every HTTP route taking an object id,
/// called by tenant B with tenant A's ids answers exactly like a missing object (same status,
/// code and whole body once the ids are substituted) and changes nothing of A's. Approvals are
/// also bound to the subject (docs/protocol.md §9): another subject of tenant A gets the same
/// answer as for a missing approval. Sessions are tenant objects, not subject objects (§2.1), so
/// the subject dimension applies to approvals only.
#[tokio::test]
async fn auth_01_bola_matrix_from_the_route_table() {
    // The route table: every route is classified, and the only object-id route is covered below.
    let routes = router_routes();
    assert!(!routes.is_empty(), "routes found in the router source");
    for route in &routes {
        assert!(
            ROUTES_WITHOUT_OBJECT_ID.contains(&route.as_str())
                || ROUTES_WITH_OBJECT_ID.contains(&route.as_str()),
            "new HTTP route {route:?}: add it to the AUTH-01 BOLA matrix"
        );
    }

    let server = TestServer::memory().await;
    // Tenant A's objects: a session with a running request, and one with a pending approval.
    let busy = server.create_session(TOKEN_A).await;
    let started = server.submit(TOKEN_A, &busy, "demo:slow").await;
    assert_eq!(started["status"], "started", "{started}");
    let approving = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &approving, "needs approval").await;
    let permission = pending_approval(&server, TOKEN_A, &approving).await;
    let permission_id = permission["permissionRequestId"].as_str().unwrap();

    let init = server
        .ok(
            TOKEN_B,
            "initialize",
            json!({ "client": { "name": "bola", "version": "1" } }),
        )
        .await;
    let listed: Vec<&str> = init["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(listed, COMMAND_TYPES, "initialize lists every command type");

    const MISSING_SESSION: &str = "bola-missing-session";
    const MISSING_PERMISSION: &str = "bola-missing-permission";
    let marker = "bola-marker-of-tenant-b";
    let mut checked = 0;
    for (index, kind) in listed.iter().enumerate() {
        // (data with A's ids, data with missing ids). Types without an object id are listed
        // explicitly; a new type fails here until it gets an entry.
        let (foreign, missing) = match *kind {
            "initialize" | "session.create" | "session.list" => continue,
            "session.read" | "session.resume" | "session.fork" | "session.close"
            | "request.abort" => (
                json!({ "sessionId": busy }),
                json!({ "sessionId": MISSING_SESSION }),
            ),
            "input.submit" => (
                json!({ "sessionId": busy, "input": marker }),
                json!({ "sessionId": MISSING_SESSION, "input": marker }),
            ),
            "permission.resolve" => (
                json!({ "sessionId": approving, "permissionRequestId": permission_id, "approved": true }),
                json!({ "sessionId": MISSING_SESSION, "permissionRequestId": MISSING_PERMISSION, "approved": true }),
            ),
            other => panic!("command type {other} has no AUTH-01 BOLA entry"),
        };
        let foreign_id = format!("bola-foreign-{index}");
        let missing_id = format!("bola-missing-{index}");
        let (status, body) = server.command(TOKEN_B, &foreign_id, kind, foreign).await;
        let (missing_status, missing_body) =
            server.command(TOKEN_B, &missing_id, kind, missing).await;
        assert_eq!(status, 404, "{kind}: {body}");
        assert_eq!(status, missing_status, "{kind}");
        let code = body["error"]["code"].as_str().unwrap();
        assert!(
            ["SESSION_NOT_FOUND", "PERMISSION_NOT_FOUND"].contains(&code),
            "{kind}: {body}"
        );
        assert_eq!(
            normalized(
                &body,
                &[
                    (&foreign_id, "<command>"),
                    (&busy, "<session>"),
                    (&approving, "<session>"),
                    (permission_id, "<permission>")
                ]
            ),
            normalized(
                &missing_body,
                &[
                    (&missing_id, "<command>"),
                    (MISSING_SESSION, "<session>"),
                    (MISSING_PERMISSION, "<permission>")
                ]
            ),
            "{kind}: someone else's object answers like a missing one"
        );
        checked += 1;
    }
    assert_eq!(checked, 7, "every object-id command type was exercised");

    // The SSE route, with and without a cursor.
    for query in ["", "?after=0"] {
        let foreign = server.events(TOKEN_B, &busy, query, None).await;
        let missing = server.events(TOKEN_B, MISSING_SESSION, query, None).await;
        let (status, missing_status) = (foreign.status().as_u16(), missing.status().as_u16());
        let foreign = foreign.text().await.unwrap().replace(&busy, "<session>");
        let missing = missing
            .text()
            .await
            .unwrap()
            .replace(MISSING_SESSION, "<session>");
        assert_eq!((status, &foreign), (404, &missing), "events{query}");
        assert_eq!(missing_status, 404, "events{query}");
    }
    // With a real event id of A's stream as Last-Event-ID.
    let mut own = SseReader::new(server.events(TOKEN_A, &busy, "?after=0", None).await);
    let first_id = own.next_event().await.unwrap().id.expect("an event id");
    drop(own);
    let foreign = server.events(TOKEN_B, &busy, "", Some(&first_id)).await;
    assert_eq!(foreign.status().as_u16(), 404, "events with Last-Event-ID");

    // Another subject of tenant A cannot see A's approval: same answer as a missing one.
    let (status, body) = server
        .command(
            TOKEN_A2,
            "bola-subject-foreign",
            "permission.resolve",
            json!({ "sessionId": approving, "permissionRequestId": permission_id, "approved": true }),
        )
        .await;
    let (missing_status, missing_body) = server
        .command(
            TOKEN_A2,
            "bola-subject-missing",
            "permission.resolve",
            json!({ "sessionId": approving, "permissionRequestId": MISSING_PERMISSION, "approved": true }),
        )
        .await;
    assert_eq!((status, missing_status), (404, 404), "{body}");
    assert_eq!(
        normalized(
            &body,
            &[
                ("bola-subject-foreign", "<c>"),
                (permission_id, "<permission>")
            ]
        ),
        normalized(
            &missing_body,
            &[
                ("bola-subject-missing", "<c>"),
                (MISSING_PERMISSION, "<permission>")
            ]
        )
    );

    // No side effects: B sees no session (its fork created nothing), A's busy session is still
    // active and its request (B's abort and close notwithstanding) ends in success without B's
    // input, and A's approval is still pending and resolvable by A.
    assert!(session_ids(&server, TOKEN_B).await.is_empty());
    let read = server.read(TOKEN_A, &busy).await;
    assert_eq!(read["session"]["status"], "active");
    let events = server.collect_events(TOKEN_A, &busy, 0, is_result).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    let all = serde_json::to_string(&events).unwrap();
    assert!(!all.contains(marker), "B's input never reached A's session");
    assert!(!all.contains("session.closed"));
    server
        .resolve(TOKEN_A, &approving, permission_id, true)
        .await;
    let events = server
        .collect_events(TOKEN_A, &approving, 0, is_result)
        .await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// AUTH-03
// ---------------------------------------------------------------------------------------------

/// docs/protocol.md §2.1, written out here (not taken from the product's table) so the test is an
/// independent check of it.
fn required_scopes(kind: &str) -> &'static [&'static str] {
    match kind {
        "initialize" => &[],
        "session.create" => &["session:create"],
        "session.read" | "session.list" => &["session:read"],
        "session.fork" => &["session:read", "session:create"],
        "session.resume" | "session.close" | "input.submit" | "request.abort" => &["session:write"],
        "permission.resolve" => &["permission:resolve"],
        other => panic!("command type {other} has no AUTH-03 scope entry"),
    }
}

/// AUTH-03: every command sent with a token lacking one of its scopes is 403 `FORBIDDEN` naming a
/// missing scope (our code for the catalogue's INSUFFICIENT_SCOPE, docs/protocol.md §3), has no
/// side effect, and does not consume its commandId (a full token then executes the same body).
/// There are no admin endpoints (`/metrics` is deliberately token-free, README "Telemetry"); the
/// executor credential on the gateway is covered by tests/cluster/authority.rs (AUTH-11).
#[tokio::test]
async fn auth_03_function_level_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config_with_extra_tokens(dir.path())).await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "needs approval").await;
    let permission = pending_approval(&server, TOKEN_A, &session).await;
    let permission_id = permission["permissionRequestId"].as_str().unwrap();
    let head = event_head(&server, TOKEN_A, &session).await;

    let data_for = |kind: &str| -> Value {
        match kind {
            "initialize" => json!({ "client": { "name": "scopes", "version": "1" } }),
            "session.create" | "session.list" => json!({}),
            "input.submit" => json!({ "sessionId": session, "input": "scope-marker" }),
            "permission.resolve" => {
                json!({ "sessionId": session, "permissionRequestId": permission_id, "approved": true })
            }
            _ => json!({ "sessionId": session }),
        }
    };
    let tokens: [(&str, &[&str]); 4] = [
        (TOKEN_READ_ONLY, &["session:read"]),
        (TOKEN_NO_READ, &["session:create", "session:write"]),
        (TOKEN_RESOLVE_ONLY, &["permission:resolve"]),
        (TOKEN_NO_SCOPES, &[]),
    ];
    let mut refused = Vec::new();
    for (token, granted) in tokens {
        for kind in COMMAND_TYPES {
            let missing: Vec<&str> = required_scopes(kind)
                .iter()
                .copied()
                .filter(|scope| !granted.contains(scope))
                .collect();
            if missing.is_empty() {
                continue;
            }
            let command_id = format!("scope-{}-{kind}", refused.len());
            let (status, body) = server
                .command(token, &command_id, kind, data_for(kind))
                .await;
            assert_eq!(status, 403, "{token} {kind}: {body}");
            assert_eq!(body["error"]["code"], "FORBIDDEN", "{token} {kind}");
            assert_eq!(body["commandId"], command_id.as_str());
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                missing
                    .iter()
                    .any(|scope| message == format!("Missing required scope: {scope}")),
                "{token} {kind}: {message} names one of {missing:?}"
            );
            refused.push((command_id, kind));
        }
    }
    assert_eq!(refused.len(), 28, "the whole matrix: {refused:?}");

    // No side effects: one session, the same event head, the approval still pending.
    assert_eq!(session_ids(&server, TOKEN_A).await, vec![session.clone()]);
    assert_eq!(event_head(&server, TOKEN_A, &session).await, head);

    // The refused ids were never claimed: the same bodies with a full token execute, in an order
    // in which each is valid (resolve the approval first, close last).
    let order = [
        "permission.resolve",
        "session.read",
        "session.list",
        "session.resume",
        "input.submit",
        "request.abort",
        "session.fork",
        "session.create",
        "session.close",
    ];
    for kind in order {
        let (command_id, _) = refused
            .iter()
            .find(|(_, k)| *k == kind)
            .unwrap_or_else(|| panic!("{kind} was refused at least once"));
        if kind == "input.submit" {
            // The approved request must have ended before new input starts a request.
            server.collect_events(TOKEN_A, &session, 0, is_result).await;
        }
        let (status, body) = server
            .command(TOKEN_A, command_id, kind, data_for(kind))
            .await;
        assert_eq!(
            status, 200,
            "{kind} with the refused id {command_id}: {body}"
        );
        assert_eq!(body["ok"], true);
    }
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// AUTH-04 and AUTH-05 (JWT)
// ---------------------------------------------------------------------------------------------

fn jwt_server_config(dir: &Path, key: &TestKey, edit: impl FnOnce(&mut JwtConfig)) -> ServeConfig {
    let jwks_path = dir.join("jwks.json");
    std::fs::write(&jwks_path, jwks(&[("key-a", key)])).unwrap();
    let mut jwt = JwtConfig::new(JwtAlgorithm::Rs256, JwtKeySource::JwksFile(jwks_path));
    edit(&mut jwt);
    jwt_config(dir, jwt)
}

/// Asserts every token gets the generic 401 on the command route and the SSE route.
async fn assert_all_refused(server: &TestServer, tokens: &[(&str, String)]) {
    for (name, token) in tokens {
        let (status, body) = server
            .command(token, &format!("bad-{name}"), "session.create", json!({}))
            .await;
        assert_eq!((status, &body), (401, &generic_401()), "{name}");
        let events = server.events(token, "some-session", "", None).await;
        assert_eq!(events.status().as_u16(), 401, "{name} on the SSE route");
    }
}

/// A loopback listener that counts every connection made to it (an attacker's key server).
async fn connection_sink() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((_stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    (url, count)
}

/// AUTH-04: alg none, HS/RS confusion, an unknown kid, kids carrying a path or SQL, a mutated
/// signature, and attacker keys announced through `jku`, `x5u`, `jwk` and `x5c` are all the same
/// 401; no outbound fetch is made to the announced URLs (the sink sees no connection), even for
/// a correctly signed token that carries them (keys are pinned: they come only from the
/// configured JWKS file, gateway/src/auth/jwt/mod.rs).
#[tokio::test]
async fn auth_04_jwt_algorithm_attacks() {
    let dir = tempfile::tempdir().unwrap();
    let key = TestKey::rsa_a();
    let attacker = TestKey::rsa_b();
    let server = TestServer::start(jwt_server_config(dir.path(), &key, |_| {})).await;
    let (sink, connections) = connection_sink().await;
    let good = claims(now_secs(), ISSUER, AUDIENCE, "acme", "alice@example.test");
    let header = |extra: Value| {
        let mut header = json!({"alg": "RS256", "typ": "JWT"});
        for (name, value) in extra.as_object().unwrap() {
            header[name] = value.clone();
        }
        header
    };
    let valid = key.token(Some("key-a"), &good);
    let mut mutated = valid.clone().into_bytes();
    let last = mutated.len() - 2;
    mutated[last] = if mutated[last] == b'A' { b'B' } else { b'A' };
    let mutated = String::from_utf8(mutated).unwrap();

    let bad = [
        ("alg-none", unsigned_token(&good)),
        (
            "hs-rs-confusion",
            TestKey::hmac(RSA_A_PUBLIC_PEM.as_bytes()).token(Some("key-a"), &good),
        ),
        ("unknown-kid", key.token(Some("key-z"), &good)),
        ("kid-path", key.token(Some("../../../../etc/passwd"), &good)),
        ("kid-file-url", key.token(Some("file:///etc/passwd"), &good)),
        ("kid-sql", key.token(Some("' OR 1=1 --"), &good)),
        ("mutated-signature", mutated),
        ("attacker-key", attacker.token(Some("key-a"), &good)),
        (
            "jku",
            attacker.token_with_header(
                &header(json!({"kid": "key-a", "jku": format!("{sink}/jwks.json")})),
                &good,
            ),
        ),
        (
            "x5u",
            attacker.token_with_header(
                &header(json!({"kid": "key-a", "x5u": format!("{sink}/cert.pem")})),
                &good,
            ),
        ),
        (
            "embedded-jwk",
            attacker
                .token_with_header(&header(json!({"jwk": attacker.public_jwk("key-a")})), &good),
        ),
        (
            "x5c",
            attacker.token_with_header(&header(json!({"kid": "key-a", "x5c": ["MIIB"]})), &good),
        ),
    ];
    assert_all_refused(&server, &bad).await;

    // A correctly signed token that also names a key URL is verified with the pinned key only.
    let pinned_with_jku = key.token_with_header(
        &header(json!({"kid": "key-a", "jku": format!("{sink}/jwks.json"), "x5u": sink})),
        &good,
    );
    let (status, body) = server
        .command(&pinned_with_jku, "pinned", "session.list", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");

    // Nothing was executed for the refused tokens.
    assert!(session_ids(&server, &valid).await.is_empty());
    // Verification is synchronous in the request, so any fetch would have happened by now; a
    // short grace covers a (hypothetical) background fetch.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "no outbound fetch to jku/x5u"
    );
    server.stop().await;
}

/// AUTH-05: expired, `nbf` and `iat` just past the 60 s leeway, wrong `iss`, wrong or missing
/// `aud`, a missing or invalid tenant claim and a token of another type (`typ: JWT`, an ID token,
/// when `at+jwt` is required) are all the same 401 UNAUTHENTICATED and execute nothing; a skew
/// inside the leeway passes; a leeway over 60 s is refused at start-up.
#[tokio::test]
async fn auth_05_jwt_claim_validation() {
    let dir = tempfile::tempdir().unwrap();
    let key = TestKey::rsa_a();
    let server = TestServer::start(jwt_server_config(dir.path(), &key, |jwt| {
        jwt.required_typ = Some("at+jwt".to_owned());
    }))
    .await;
    let now = now_secs();
    let good = || claims(now, ISSUER, AUDIENCE, "acme", "alice@example.test");
    let sign = |claims: &Value| {
        key.token_with_header(
            &json!({"alg": "RS256", "typ": "at+jwt", "kid": "key-a"}),
            claims,
        )
    };
    let with = |edits: &[(&str, Value)]| {
        let mut claims = good();
        for (name, value) in edits {
            if value.is_null() {
                claims.as_object_mut().unwrap().remove(*name);
            } else {
                claims[*name] = value.clone();
            }
        }
        sign(&claims)
    };
    let bad = [
        ("expired", with(&[("exp", json!(now - 3600))])),
        // Just past the 60 s leeway; 65 rather than 61 so a second ticking between signing
        // and checking cannot move the token back inside it.
        ("expired-past-leeway", with(&[("exp", json!(now - 65))])),
        ("nbf-past-leeway", with(&[("nbf", json!(now + 65))])),
        ("iat-in-the-future", with(&[("iat", json!(now + 3600))])),
        (
            "wrong-issuer",
            with(&[("iss", json!("https://evil.test/"))]),
        ),
        ("wrong-audience", with(&[("aud", json!("another-api"))])),
        ("missing-audience", with(&[("aud", Value::Null)])),
        ("missing-tenant", with(&[("tenant", Value::Null)])),
        ("invalid-tenant", with(&[("tenant", json!("a/../b"))])),
        ("missing-subject", with(&[("sub", Value::Null)])),
        ("id-token-typ", key.token(Some("key-a"), &good())),
    ];
    assert_all_refused(&server, &bad).await;

    // A skew inside the leeway is accepted, and only then does anything execute.
    let skewed = with(&[("exp", json!(now - 20)), ("nbf", json!(now + 20))]);
    assert!(session_ids(&server, &skewed).await.is_empty());
    server.create_session(&skewed).await;
    assert_eq!(session_ids(&server, &skewed).await.len(), 1);
    server.stop().await;

    // The leeway is bounded: 61 s is a start-up error.
    let config = jwt_server_config(dir.path(), &key, |jwt| jwt.leeway_secs = 61);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let started =
        agent_runtime_cli::start_with(config, listener, agent_runtime_cli::Overrides::default())
            .await;
    assert!(started.is_err(), "a leeway over 60 s is refused");
}

// ---------------------------------------------------------------------------------------------
// AUTH-06 and AUTH-07
// ---------------------------------------------------------------------------------------------

/// AUTH-06: the tenant comes only from the token. A `tenantId`/`tenant_id` in the envelope or in
/// `data` is an unknown key (400, docs/protocol.md §2.0 strict schemas); the same in the query
/// string and tenant or identity headers next to a bearer token are ignored (the answer is tenant
/// B's: A's session stays invisible). A tenant id inside `metadata` is opaque data. (In the
/// `trusted-headers` auth mode the tenant comes from the proxy's header by design; that mode
/// accepts no bearer token, tests/server/auth/identity.rs.)
#[tokio::test]
async fn auth_06_tenant_comes_only_from_the_token() {
    let server = TestServer::memory().await;
    let a_session = server.create_session(TOKEN_A).await;

    // 1. In the body: refused, and nothing created.
    for (name, body) in [
        (
            "envelope",
            json!({"protocolVersion": 1, "commandId": "t-env", "type": "session.list", "data": {}, "tenantId": "tenant-a"}),
        ),
        (
            "envelope-snake",
            json!({"protocolVersion": 1, "commandId": "t-env2", "type": "session.create", "data": {}, "tenant_id": "tenant-a"}),
        ),
        (
            "data",
            json!({"protocolVersion": 1, "commandId": "t-data", "type": "session.read", "data": {"sessionId": a_session, "tenantId": "tenant-a"}}),
        ),
        (
            "data-create",
            json!({"protocolVersion": 1, "commandId": "t-data2", "type": "session.create", "data": {"tenant": "tenant-a"}}),
        ),
    ] {
        let (status, _, body) = server
            .post_raw(TOKEN_B, serde_json::to_vec(&body).unwrap())
            .await;
        assert_eq!(status, 400, "{name}: {body}");
        assert_eq!(body["error"]["code"], "INVALID_COMMAND", "{name}");
    }
    assert!(session_ids(&server, TOKEN_B).await.is_empty());

    // 2. and 3. In the query string and in headers: ignored.
    let read_a = json!({"protocolVersion": 1, "commandId": "t-query", "type": "session.read", "data": {"sessionId": a_session}});
    let list =
        json!({"protocolVersion": 1, "commandId": "t-list", "type": "session.list", "data": {}});
    let headers = [
        ("x-tenant-id", "tenant-a"),
        ("x-auth-tenant", "tenant-a"),
        ("x-auth-subject", "user-a"),
        ("x-auth-scopes", "session:admin"),
        ("tenant-id", "tenant-a"),
    ];
    for body in [&read_a, &list] {
        let mut request = server
            .client
            .post(format!(
                "{}/commands?tenantId=tenant-a&tenant_id=tenant-a&tenant=tenant-a",
                server.base
            ))
            .header("authorization", format!("Bearer {TOKEN_B}"))
            .header("content-type", "application/json")
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap();
        if body["type"] == "session.read" {
            assert_eq!(status, 404, "{answer}");
            assert_eq!(answer["error"]["code"], "SESSION_NOT_FOUND");
        } else {
            assert_eq!(status, 200, "{answer}");
            assert_eq!(
                answer["data"]["sessions"],
                json!([]),
                "B's own (empty) list"
            );
        }
    }
    let mut request = server
        .client
        .get(format!(
            "{}/sessions/{a_session}/events?after=0&tenantId=tenant-a&tenant_id=tenant-a",
            server.base
        ))
        .header("authorization", format!("Bearer {TOKEN_B}"));
    for (name, value) in headers {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status().as_u16(), 404);

    // 4. In metadata: opaque, and the session is still the caller's tenant's.
    let created = server
        .ok(
            TOKEN_B,
            "session.create",
            json!({"metadata": {"tenantId": "tenant-a", "tenant_id": "tenant-a"}}),
        )
        .await;
    let b_session = created["session"]["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(
        created["session"]["metadata"],
        json!({"tenantId": "tenant-a", "tenant_id": "tenant-a"})
    );
    assert_eq!(session_ids(&server, TOKEN_A).await, vec![a_session.clone()]);
    assert_eq!(session_ids(&server, TOKEN_B).await, vec![b_session.clone()]);
    let (status, _) = server
        .command(
            TOKEN_A,
            "a-reads-b",
            "session.read",
            json!({"sessionId": b_session}),
        )
        .await;
    assert_eq!(status, 404);
    server.stop().await;
}

/// Server-owned fields of the catalogue's AUTH-07 list.
const SERVER_OWNED: [(&str, &str); 10] = [
    ("tenant_id", r#""tenant-b""#),
    ("status", r#""closed""#),
    ("lease_owner", r#""executor-x""#),
    ("fencing_token", "99"),
    ("approved", "true"),
    ("sandbox", "false"),
    ("allowed_roots", r#"["/"]"#),
    ("permission_rules", r#"{"allow":["Bash"]}"#),
    ("provider_base_url", r#""https://attacker.test""#),
    ("model_api_key", r#""sk-attacker""#),
];

/// AUTH-07: server-owned fields in a command's `data` or envelope are unknown keys: 400
/// INVALID_COMMAND "Command validation failed" (our code for the catalogue's VALIDATION_FAILED,
/// docs/protocol.md §2.0) and nothing is created or changed. Inside `metadata`, which is a free
/// JSON object by protocol (§2.1), the same names are opaque data: accepted, echoed back, and they
/// change nothing (status stays `active`, an approval is still required). There is no "patch
/// session" command, so that half of the entry has no route to test.
#[tokio::test]
async fn auth_07_mass_assignment_is_refused() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let before = server
        .ok(TOKEN_A, "session.read", json!({"sessionId": session}))
        .await;
    let refused = |status: u16, body: &Value, what: &str| {
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body["error"]["code"], "INVALID_COMMAND", "{what}");
        assert_eq!(
            body["error"]["message"], "Command validation failed",
            "{what}"
        );
    };
    for (index, (field, value)) in SERVER_OWNED.iter().enumerate() {
        let value: Value = serde_json::from_str(value).unwrap();
        let mut data = serde_json::Map::new();
        data.insert((*field).to_owned(), value.clone());
        let (status, body) = server
            .command(
                TOKEN_A,
                &format!("mass-create-{index}"),
                "session.create",
                Value::Object(data.clone()),
            )
            .await;
        refused(status, &body, &format!("session.create data.{field}"));
        for (kind, mut base) in [
            ("input.submit", json!({"sessionId": session, "input": "hi"})),
            ("session.resume", json!({"sessionId": session})),
            ("session.fork", json!({"sessionId": session})),
            (
                "permission.resolve",
                json!({"sessionId": session, "permissionRequestId": "p", "approved": true}),
            ),
        ] {
            if base.get(*field).is_some() {
                // `approved` is a real field of permission.resolve.
                continue;
            }
            base[*field] = value.clone();
            let (status, body) = server
                .command(TOKEN_A, &format!("mass-{kind}-{index}"), kind, base)
                .await;
            refused(status, &body, &format!("{kind} data.{field}"));
        }
        let mut envelope = json!({"protocolVersion": 1, "commandId": format!("mass-env-{index}"), "type": "session.create", "data": {}});
        envelope[*field] = value;
        let (status, _, body) = server
            .post_raw(TOKEN_A, serde_json::to_vec(&envelope).unwrap())
            .await;
        refused(status, &body, &format!("envelope {field}"));
    }
    // Nothing changed.
    assert_eq!(session_ids(&server, TOKEN_A).await, vec![session.clone()]);
    let after = server
        .ok(TOKEN_A, "session.read", json!({"sessionId": session}))
        .await;
    assert_eq!(after["session"], before["session"]);
    assert_eq!(
        after["recovery"]["lastEventSequence"],
        before["recovery"]["lastEventSequence"]
    );

    // Inside metadata: opaque.
    let mut metadata = serde_json::Map::new();
    for (field, value) in SERVER_OWNED {
        metadata.insert(field.to_owned(), serde_json::from_str(value).unwrap());
    }
    let created = server
        .ok(
            TOKEN_A,
            "session.create",
            json!({"metadata": metadata.clone()}),
        )
        .await;
    let descriptor = &created["session"];
    assert_eq!(descriptor["status"], "active", "status: closed in metadata");
    assert_eq!(descriptor["metadata"], Value::Object(metadata));
    let mut keys: Vec<&str> = descriptor
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["createdAt", "metadata", "sessionId", "status", "updatedAt"]
    );
    let opaque = descriptor["sessionId"].as_str().unwrap();
    // `approved: true` and `permission_rules` in metadata grant nothing: the tool still asks.
    server.submit(TOKEN_A, opaque, "needs approval").await;
    let permission = pending_approval(&server, TOKEN_A, opaque).await;
    assert_eq!(permission["toolName"], "demo_approval");
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// AUTH-09
// ---------------------------------------------------------------------------------------------

/// AUTH-09: an approval is bound to one pending tool call of one (tenant, session, subject).
/// Without `permission:resolve` → 403; tenant B and another subject of A → 404; the owner's
/// approval runs exactly that call (name and input of `permission.requested` = the `tool_use`
/// that ran) exactly once; replaying the approval's commandId replays the same answer and runs
/// nothing; a new commandId → 404; after the approval timeout → 404 (our PERMISSION_NOT_FOUND
/// covers the catalogue's APPROVAL_EXPIRED, docs/protocol.md §2.1). APPROVAL_MISMATCH cannot be
/// built: `permission.resolve` carries no tool arguments, it answers the in-memory waiter of the
/// one call that asked (docs/protocol.md §9). The audit log records the resolving principal; it
/// does not record an arguments hash.
#[tokio::test]
async fn auth_09_approvals_are_bound_to_the_exact_tool_call() {
    let dir = tempfile::tempdir().unwrap();
    let audit_path = dir.path().join("audit.jsonl");
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.audit = Some(AuditConfig::new(AuditTarget::File(audit_path.clone())));
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "needs approval").await;
    let permission = pending_approval(&server, TOKEN_A, &session).await;
    let id = permission["permissionRequestId"].as_str().unwrap();
    let resolve = json!({"sessionId": session, "permissionRequestId": id, "approved": true});

    let (status, body) = server
        .command(
            TOKEN_NO_READ,
            "ap-no-scope",
            "permission.resolve",
            resolve.clone(),
        )
        .await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("FORBIDDEN")));
    assert_eq!(
        body["error"]["message"],
        "Missing required scope: permission:resolve"
    );
    for (token, name) in [(TOKEN_B, "ap-tenant-b"), (TOKEN_A2, "ap-subject-a2")] {
        let (status, body) = server
            .command(token, name, "permission.resolve", resolve.clone())
            .await;
        assert_eq!(status, 404, "{name}: {body}");
        assert_eq!(body["error"]["code"], "PERMISSION_NOT_FOUND");
    }

    let body = serde_json::to_vec(&json!({
        "protocolVersion": 1, "commandId": "ap-owner", "type": "permission.resolve", "data": resolve,
    }))
    .unwrap();
    let (status, _, first) = server.post_raw(TOKEN_A, body.clone()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        first["data"],
        json!({"sessionId": session, "permissionRequestId": id, "resolved": true})
    );
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    let (status, _, replay) = server.post_raw(TOKEN_A, body).await;
    assert_eq!(
        (status, &replay),
        (200, &first),
        "the replay is the stored answer"
    );
    let (status, again) = server
        .command(
            TOKEN_A,
            "ap-owner-again",
            "permission.resolve",
            resolve.clone(),
        )
        .await;
    assert_eq!(status, 404, "{again}");
    assert_eq!(again["error"]["code"], "PERMISSION_NOT_FOUND");

    // Exactly the asked-for call ran, once.
    let after = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let uses: Vec<&Value> = after
        .iter()
        .filter(|e| stream_type(e) == Some("tool_use"))
        .collect();
    let results: Vec<&Value> = after
        .iter()
        .filter(|e| stream_type(e) == Some("tool_result"))
        .collect();
    assert_eq!((uses.len(), results.len()), (1, 1), "{after:?}");
    assert_eq!(uses[0]["data"]["name"], permission["toolName"]);
    assert_eq!(uses[0]["data"]["input"], permission["input"]);
    assert_eq!(results[0]["data"]["id"], uses[0]["data"]["id"]);
    assert_ne!(results[0]["data"]["isError"], true, "{}", results[0]);
    assert_eq!(
        after
            .iter()
            .filter(|e| e["type"] == "permission.requested")
            .count(),
        1
    );
    server.stop().await;

    // The audit log names the principal that resolved (and only the owner's resolve succeeded).
    let audit = std::fs::read_to_string(&audit_path).unwrap();
    let resolves: Vec<Value> = audit
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|r| r["commandType"] == "permission.resolve")
        .collect();
    let succeeded: Vec<&Value> = resolves
        .iter()
        .filter(|r| r["outcome"] == "success")
        .collect();
    assert_eq!(succeeded.len(), 1, "{resolves:?}");
    assert_eq!(succeeded[0]["subject"], "user-a");
    assert_eq!(succeeded[0]["commandId"], "ap-owner");

    // Expiry: an approval answered after its timeout is gone.
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.executor.approval_timeout = Duration::from_millis(300);
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    server.submit(TOKEN_A, &session, "needs approval").await;
    let permission = pending_approval(&server, TOKEN_A, &session).await;
    // The request ends once the approval timed out; only then is the answer late for sure.
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    let result = events
        .iter()
        .find(|e| stream_type(e) == Some("tool_result"))
        .unwrap();
    assert_eq!(result["data"]["isError"], true, "timed out: {result}");
    let (status, body) = server
        .command(
            TOKEN_A,
            "ap-late",
            "permission.resolve",
            json!({"sessionId": session, "permissionRequestId": permission["permissionRequestId"], "approved": true}),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("PERMISSION_NOT_FOUND"))
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// AUTH-14
// ---------------------------------------------------------------------------------------------

/// One tenant's run of the shared script; returns (session id, every answer, every event).
async fn tenant_script(server: &TestServer, token: &str) -> (String, Vec<Value>, Vec<Value>) {
    let mut answers = Vec::new();
    let create = |id: &'static str| async move {
        server
            .command(
                token,
                id,
                "session.create",
                json!({"metadata": {"name": "same-name", "file": "notes.txt"}}),
            )
            .await
    };
    let (status, created) = create("c1").await;
    assert_eq!(status, 200, "{created}");
    let session = created["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    answers.push(created);
    let submit = json!({"sessionId": session, "input": "demo:deltas=5"});
    let (status, submitted) = server
        .command(token, "s1", "input.submit", submit.clone())
        .await;
    assert_eq!(status, 200, "{submitted}");
    answers.push(submitted);
    let events = server.collect_events(token, &session, 0, is_result).await;
    // Replays of the same ids, and reads of the shared names.
    for (id, kind, data) in [
        (
            "c1",
            "session.create",
            json!({"metadata": {"name": "same-name", "file": "notes.txt"}}),
        ),
        ("s1", "input.submit", submit),
        ("r1", "session.read", json!({"sessionId": session})),
        ("l1", "session.list", json!({})),
    ] {
        let (status, answer) = server.command(token, id, kind, data).await;
        assert_eq!(status, 200, "{kind}: {answer}");
        answers.push(answer);
    }
    (session, answers, events)
}

/// AUTH-14: two tenants run the same script concurrently (the same commandIds, metadata names
/// and inputs). Each tenant's responses, replays (the idempotency table), reads, lists (caches),
/// SSE streams (broadcast channels), audit records and metrics carry only its own data. The
/// catalogue's workspace clause (per-tenant, per-session executor workspaces) is TOOL-23, handled
/// with the executor's tool tests.
#[tokio::test]
async fn auth_14_no_cross_tenant_mixing() {
    let dir = tempfile::tempdir().unwrap();
    let audit_path = dir.path().join("audit.jsonl");
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.audit = Some(AuditConfig::new(AuditTarget::File(audit_path.clone())));
    config.telemetry.include_tenant_attributes = true;
    let server = TestServer::start(config).await;

    let (a, b) = tokio::join!(
        tenant_script(&server, TOKEN_A),
        tenant_script(&server, TOKEN_B)
    );
    let (a_session, a_answers, a_events) = a;
    let (b_session, b_answers, b_events) = b;
    assert_ne!(a_session, b_session);
    for (own, other, answers, events) in [
        (&a_session, &b_session, &a_answers, &a_events),
        (&b_session, &a_session, &b_answers, &b_events),
    ] {
        let text = serde_json::to_string(answers).unwrap();
        assert!(text.contains(own.as_str()));
        assert!(!text.contains(other.as_str()), "answers: {text}");
        assert!(!text.contains("tenant-"), "no tenant ids in answers");
        // The replayed create is the tenant's own session, the list holds only it.
        assert_eq!(answers[2]["data"]["session"]["sessionId"], own.as_str());
        assert_eq!(answers[1]["data"], answers[3]["data"], "s1 replays its own");
        let listed = &answers[5]["data"]["sessions"];
        assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
        assert_eq!(listed[0]["sessionId"], own.as_str());
        assert!(!events.is_empty());
        for event in events {
            assert_eq!(event["sessionId"], own.as_str(), "{event}");
            if event["type"] == "session.stream" {
                assert_eq!(event["data"]["sessionId"], own.as_str(), "{event}");
            }
        }
        let deltas = events
            .iter()
            .filter(|e| stream_type(e) == Some("content"))
            .count();
        assert_eq!(deltas, 5, "exactly its own deltas");
    }

    // Metrics: one series per tenant, each counting only its own commands.
    let metrics = server.metrics_text().await;
    for tenant in ["tenant-a", "tenant-b"] {
        let series = format!(
            "agent_runtime_commands_total{{type=\"session.create\",outcome=\"success\",tenant=\"{tenant}\"}} 1"
        );
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} in\n{metrics}"
        );
    }
    assert!(!metrics.contains(&a_session) && !metrics.contains(&b_session));
    server.stop().await;

    // Audit: every record of a tenant names only that tenant's session.
    let audit = std::fs::read_to_string(&audit_path).unwrap();
    let records: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (tenant, own, other) in [
        ("tenant-a", &a_session, &b_session),
        ("tenant-b", &b_session, &a_session),
    ] {
        let mine: Vec<&Value> = records.iter().filter(|r| r["tenantId"] == tenant).collect();
        // create, submit, read, list (replays are not audited, docs/protocol.md §10).
        assert_eq!(mine.len(), 4, "{tenant}: {mine:?}");
        for record in mine {
            let text = record.to_string();
            assert!(!text.contains(other.as_str()), "{text}");
            if let Some(session) = record["sessionId"].as_str() {
                assert_eq!(session, own.as_str());
            }
        }
    }
}

/// ATK-04: a `session.resume` of a loaded session by another subject of the tenant must not move
/// the approver role to that subject (the submitter would get `PERMISSION_NOT_FOUND` for approvals
/// of its own request, and the resumer could answer them). The approver of a request is the subject
/// that submitted its input; a `session:admin` principal of the tenant may answer any approval; a
/// resume changes neither.
#[tokio::test]
async fn atk_04_a_resume_by_another_subject_does_not_move_the_approver() {
    const TOKEN_ADMIN: &str = "token-tenant-a-admin";
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.tokens.push(TokenGrant::for_token(
        TOKEN_ADMIN,
        "tenant-a",
        "admin",
        &[Scope::SessionAdmin],
    ));
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    let resolve = |permission: &Value| json!({ "sessionId": session, "permissionRequestId": permission, "approved": true });

    // A's request asks; B (another subject of tenant A) resumes the loaded session.
    server.submit(TOKEN_A, &session, "demo:approval").await;
    let asked = pending_approval(&server, TOKEN_A, &session).await;
    let first = &asked["permissionRequestId"];
    server
        .ok(TOKEN_A2, "session.resume", json!({ "sessionId": session }))
        .await;
    let (status, body) = server
        .command(
            TOKEN_A2,
            "atk04-b-answers",
            "permission.resolve",
            resolve(first),
        )
        .await;
    assert_eq!(
        status, 404,
        "the resumer cannot answer A's approval: {body}"
    );
    assert_eq!(body["error"]["code"], "PERMISSION_NOT_FOUND");
    server
        .ok(TOKEN_A, "permission.resolve", resolve(first))
        .await;
    let events = server.collect_events(TOKEN_A, &session, 0, is_result).await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");

    // B's own request: B approves it, A cannot, and an admin of the tenant can.
    server.submit(TOKEN_A2, &session, "demo:approval").await;
    let after = events.last().unwrap()["sequence"].as_u64().unwrap();
    let events = server
        .collect_events(TOKEN_A, &session, after, |e| {
            e["type"] == "permission.requested"
        })
        .await;
    let second = &events.last().unwrap()["data"]["permissionRequestId"];
    let (status, body) = server
        .command(
            TOKEN_A,
            "atk04-a-answers-b",
            "permission.resolve",
            resolve(second),
        )
        .await;
    assert_eq!(status, 404, "A cannot answer B's approval: {body}");
    server
        .ok(TOKEN_ADMIN, "permission.resolve", resolve(second))
        .await;
    let events = server
        .collect_events(TOKEN_A, &session, after, is_result)
        .await;
    assert_eq!(events.last().unwrap()["data"]["subtype"], "success");
    server.stop().await;
}
