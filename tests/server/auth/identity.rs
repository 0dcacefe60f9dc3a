//! Identity and the audit log over real HTTP: JWT authentication (every bad token is the same
//! 401 and executes nothing), trusted proxy headers, and one audit record per command.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::support::{TOKEN_A, TestServer, test_config};
use agent_runtime_cli::config::{ServeConfig, StoreKind};
use agent_runtime_gateway::auth::testing::{
    RSA_A_PUBLIC_PEM, TestKey, claims, jwks, unsigned_token,
};
use agent_runtime_gateway::auth::{
    JwtAlgorithm, JwtConfig, JwtKeySource, SecretSource, TrustedHeadersConfig,
};
use agent_runtime_gateway::{AuditConfig, AuditTarget, AuthMode};
use serde_json::{Value, json};

use super::{AUDIENCE, ISSUER, generic_401, jwt_config};

const HS_SECRET: &str = "test-only-hs256-secret-of-at-least-32-bytes";

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Opens the session's event stream with `token`.
async fn open_stream(server: &TestServer, session: &str, token: String) -> reqwest::Response {
    server
        .client
        .get(format!("{}/sessions/{session}/events", server.base))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap()
}

async fn session_count(server: &TestServer, token: &str) -> usize {
    let data = server.ok(token, "session.list", json!({})).await;
    data["sessions"].as_array().expect("a session list").len()
}

#[tokio::test]
async fn every_bad_jwt_gets_the_same_401_and_executes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let key = TestKey::rsa_a();
    let jwks_path = dir.path().join("jwks.json");
    std::fs::write(&jwks_path, jwks(&[("key-a", &key)])).unwrap();
    let config = jwt_config(
        dir.path(),
        JwtConfig::new(JwtAlgorithm::Rs256, JwtKeySource::JwksFile(jwks_path)),
    );
    let server = TestServer::start(config).await;

    let now = now_secs();
    let good = || claims(now, ISSUER, AUDIENCE, "acme", "alice@example.test");
    let with = |name: &str, value: Value| {
        let mut claims = good();
        claims[name] = value;
        claims
    };
    let mut missing_tenant = good();
    missing_tenant.as_object_mut().unwrap().remove("tenant");
    let mut expired = with("exp", json!(now - 3600));
    expired["iat"] = json!(now - 7200);
    expired["nbf"] = json!(now - 7200);
    let bad_tokens = [
        ("expired", key.token(Some("key-a"), &expired)),
        (
            "wrong-audience",
            key.token(Some("key-a"), &with("aud", json!("another-api"))),
        ),
        (
            "wrong-issuer",
            key.token(Some("key-a"), &with("iss", json!("https://evil.test/"))),
        ),
        (
            "bad-signature",
            TestKey::rsa_b().token(Some("key-a"), &good()),
        ),
        ("alg-none", unsigned_token(&good())),
        (
            "hs-rs-confusion",
            TestKey::hmac(RSA_A_PUBLIC_PEM.as_bytes()).token(Some("key-a"), &good()),
        ),
        ("missing-tenant", key.token(Some("key-a"), &missing_tenant)),
        (
            "invalid-tenant",
            key.token(Some("key-a"), &with("tenant", json!("../acme"))),
        ),
        ("unknown-kid", key.token(Some("key-z"), &good())),
        ("not-a-jwt", "opaque-token".to_owned()),
    ];
    for (name, token) in &bad_tokens {
        let (status, body) = server
            .command(token, &format!("bad-{name}"), "session.create", json!({}))
            .await;
        assert_eq!(status, 401, "{name}: {body}");
        assert_eq!(body, generic_401(), "{name}");
        let events = server.events(token, "some-session", "", None).await;
        assert_eq!(events.status().as_u16(), 401, "{name} on the SSE route");
    }

    // Nothing ran: the tenant has no session, and the refused command ids were never claimed.
    let valid = key.token(Some("key-a"), &good());
    assert_eq!(session_count(&server, &valid).await, 0);
    let (status, body) = server
        .command(&valid, "bad-expired", "session.create", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ok"], true);
    assert_eq!(session_count(&server, &valid).await, 1);
    server.stop().await;
}

#[tokio::test]
async fn an_hs256_server_takes_its_own_tokens_and_refuses_rs256_ones() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("jwt-secret");
    std::fs::write(&secret_file, format!("{HS_SECRET}\n")).unwrap();
    let mut jwt = JwtConfig::new(
        JwtAlgorithm::Hs256,
        JwtKeySource::Secret(SecretSource::File(secret_file)),
    );
    jwt.scopes_claim = "scp".to_owned();
    let server = TestServer::start(jwt_config(dir.path(), jwt)).await;

    let mut good = claims(now_secs(), ISSUER, AUDIENCE, "acme", "bob@example.test");
    good["scp"] = json!(["openid", "session:create", "session:read"]);
    let valid = TestKey::hmac(HS_SECRET.as_bytes()).token(None, &good);
    let session = server.create_session(&valid).await;
    assert!(!session.is_empty());
    assert_eq!(session_count(&server, &valid).await, 1);
    // The token's scopes are the principal's: no session:write, so input.submit is forbidden.
    let (status, body) = server
        .command(
            &valid,
            "submit-without-scope",
            "input.submit",
            json!({"sessionId": session, "input": "hello"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (403, json!("FORBIDDEN"))
    );

    let rs = TestKey::rsa_a().token(None, &good);
    let (status, body) = server
        .command(&rs, "rs-on-hs", "session.create", json!({}))
        .await;
    assert_eq!((status, body), (401, generic_401()));
    assert_eq!(session_count(&server, &valid).await, 1);
    server.stop().await;
}

#[tokio::test]
async fn trusted_proxy_headers_identify_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServeConfig {
        tokens: Vec::new(),
        auth_mode: AuthMode::TrustedHeaders(TrustedHeadersConfig::default()),
        ..test_config(StoreKind::Memory, dir.path())
    };
    let server = TestServer::start(config).await;
    let post = |headers: &'static [(&'static str, &'static str)], command_id: &str| {
        let mut request = server
            .client
            .post(format!("{}/commands", server.base))
            .body(
                json!({"protocolVersion": 1, "commandId": command_id, "type": "session.list", "data": {}})
                    .to_string(),
            );
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = post(
        &[
            ("x-auth-tenant", "acme"),
            ("x-auth-subject", "carol"),
            ("x-auth-scopes", "session:read"),
        ],
        "list-1",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["sessions"], json!([]));
    let (status, body) = post(&[("x-auth-subject", "carol")], "list-2").await;
    assert_eq!((status, body), (401, generic_401()));
    let (status, body) = post(
        &[("x-auth-tenant", "a/b"), ("x-auth-subject", "carol")],
        "list-3",
    )
    .await;
    assert_eq!((status, body), (401, generic_401()));
    // A bearer token means nothing in this mode.
    let (status, _) = server
        .command(TOKEN_A, "list-4", "session.list", json!({}))
        .await;
    assert_eq!(status, 401);
    server.stop().await;
}

#[tokio::test]
async fn the_audit_log_has_one_record_per_command_and_no_input() {
    let dir = tempfile::tempdir().unwrap();
    let audit_path = dir.path().join("audit.jsonl");
    let config = ServeConfig {
        audit: Some(AuditConfig::new(AuditTarget::File(audit_path.clone()))),
        ..test_config(StoreKind::Memory, dir.path())
    };
    let server = TestServer::start(config).await;
    let canary = "audit-canary-input-7f3a";

    let (status, created) = server
        .command(
            TOKEN_A,
            "audit-create",
            "session.create",
            json!({"metadata": {"note": canary}}),
        )
        .await;
    assert_eq!(status, 200, "{created}");
    let session = created["data"]["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let submit = json!({"sessionId": session, "input": format!("please echo {canary}")});
    let (status, _) = server
        .command(TOKEN_A, "audit-submit", "input.submit", submit)
        .await;
    assert_eq!(status, 200);
    let (status, _) = server
        .command(
            TOKEN_A,
            "audit-read",
            "session.read",
            json!({"sessionId": session}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = server
        .command(TOKEN_A, "audit-list", "session.list", json!({}))
        .await;
    assert_eq!(status, 200);
    let (status, _) = server
        .command(
            TOKEN_A,
            "audit-missing",
            "session.read",
            json!({"sessionId": "no-such-session"}),
        )
        .await;
    assert_eq!(status, 404);
    // Neither a replay nor an unauthenticated request is a new command.
    let (status, _) = server
        .command(
            TOKEN_A,
            "audit-create",
            "session.create",
            json!({"metadata": {"note": canary}}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = server
        .command("not-a-token", "audit-anonymous", "session.list", json!({}))
        .await;
    assert_eq!(status, 401);
    // Stopping writes out whatever the audit queue still holds.
    server.stop().await;

    let text = std::fs::read_to_string(&audit_path).unwrap();
    assert!(
        !text.contains(canary),
        "no input or metadata in the audit log"
    );
    let records: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r["commandId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "audit-create",
            "audit-submit",
            "audit-read",
            "audit-list",
            "audit-missing"
        ]
    );
    let expected = [
        ("session.create", None, "success", None),
        ("input.submit", Some(session.as_str()), "success", None),
        ("session.read", Some(session.as_str()), "success", None),
        ("session.list", None, "success", None),
        (
            "session.read",
            Some("no-such-session"),
            "error",
            Some("SESSION_NOT_FOUND"),
        ),
    ];
    for (record, (kind, session_id, outcome, code)) in records.iter().zip(expected) {
        let fields: Vec<&str> = record
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for field in fields {
            assert!(
                [
                    "occurredAt",
                    "tenantId",
                    "subject",
                    "commandId",
                    "commandType",
                    "sessionId",
                    "outcome",
                    "errorCode"
                ]
                .contains(&field),
                "unexpected field {field} in {record}"
            );
        }
        assert_eq!(record["tenantId"], "tenant-a");
        assert_eq!(record["subject"], "user-a");
        assert_eq!(record["commandType"], kind, "{record}");
        assert_eq!(record["sessionId"].as_str(), session_id, "{record}");
        assert_eq!(record["outcome"], outcome, "{record}");
        assert_eq!(record["errorCode"].as_str(), code, "{record}");
        let at = record["occurredAt"].as_str().unwrap();
        assert!(
            at.len() == 24 && at.ends_with('Z'),
            "ISO time with milliseconds: {at}"
        );
    }
}

/// SSE-15: a stream opened with a JWT ends when the token expires (plus the leeway), and the
/// reconnection with the expired token is refused; a stream under a long-lived token goes on.
#[tokio::test]
async fn sse_15_a_stream_ends_when_its_token_expires() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("jwt-secret");
    std::fs::write(&secret_file, HS_SECRET).unwrap();
    let mut jwt = JwtConfig::new(
        JwtAlgorithm::Hs256,
        JwtKeySource::Secret(SecretSource::File(secret_file)),
    );
    jwt.leeway_secs = 0;
    let server = TestServer::start(jwt_config(dir.path(), jwt)).await;
    let key = TestKey::hmac(HS_SECRET.as_bytes());
    let lasting = key.token(
        None,
        &claims(now_secs(), ISSUER, AUDIENCE, "acme", "bob@example.test"),
    );
    let session = server.create_session(&lasting).await;
    // Minted just before it is used, so that a slow machine still opens the stream in time.
    let mut short_claims = claims(now_secs(), ISSUER, AUDIENCE, "acme", "bob@example.test");
    short_claims["exp"] = json!(now_secs() + 4);
    let short = key.token(None, &short_claims);

    let open = |token: String| open_stream(&server, &session, token);
    let expiring = open(short.clone()).await;
    assert_eq!(expiring.status().as_u16(), 200);
    let mut staying = open(lasting.clone()).await;
    assert_eq!(staying.status().as_u16(), 200);
    // The whole body arrives and ends: the server closed the stream at the expiry.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), expiring.bytes())
        .await
        .expect("the stream ends once its token has expired");
    assert!(ended.is_ok(), "a clean end, not an abort: {ended:?}");
    let again = open(short).await;
    assert_eq!(again.status().as_u16(), 401);
    // The other stream still gets what happens next.
    server
        .ok(
            &lasting,
            "input.submit",
            json!({ "sessionId": session, "input": "hello" }),
        )
        .await;
    let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), staying.chunk())
        .await
        .expect("the long-lived stream is still served")
        .unwrap();
    assert!(chunk.is_some());
    server.stop().await;
}

/// AUTH-12: a client that keeps presenting bad credentials is braked. Past its budget it gets
/// `429 RATE_LIMITED` with a delay instead of `401`, on every route, and its JWTs are no longer
/// verified (a signature check is what an attacker would make us burn CPU on); a caller whose
/// token authenticated before keeps working from the same address.
#[tokio::test]
async fn auth_12_a_client_that_keeps_failing_is_braked_and_known_callers_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let key = TestKey::rsa_a();
    let jwks_path = dir.path().join("jwks.json");
    std::fs::write(&jwks_path, jwks(&[("key-a", &key)])).unwrap();
    let mut config = jwt_config(
        dir.path(),
        JwtConfig::new(JwtAlgorithm::Rs256, JwtKeySource::JwksFile(jwks_path)),
    );
    config.gateway.auth_failures_per_minute = 5;
    let server = TestServer::start(config).await;

    let now = now_secs();
    let valid = key.token(
        Some("key-a"),
        &claims(now, ISSUER, AUDIENCE, "acme", "alice@example.test"),
    );
    assert_eq!(session_count(&server, &valid).await, 0);
    let forged = TestKey::rsa_b().token(
        Some("key-a"),
        &claims(now, ISSUER, AUDIENCE, "acme", "mallory@example.test"),
    );
    let list = || {
        serde_json::to_vec(&json!({"protocolVersion": 1, "commandId": "guess", "type": "session.list", "data": {}})).unwrap()
    };
    for attempt in 0..5 {
        let (status, _, body) = server.post_raw(&forged, list()).await;
        assert_eq!((status, body), (401, generic_401()), "attempt {attempt}");
    }
    let (status, _, body) = server.post_raw(&forged, list()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["commandId"], "authentication");
    assert_eq!(body["error"]["code"], "RATE_LIMITED");
    assert_eq!(
        body["error"]["message"],
        "Too many failed authentication attempts"
    );
    assert_eq!(body["error"]["retryable"], true);
    let wait = body["error"]["retryAfterMs"].as_u64().unwrap();
    assert!((1..=12_000).contains(&wait), "one attempt a 12 s: {wait}");
    let stream = server.events(&forged, "any-session", "", None).await;
    assert_eq!(stream.status().as_u16(), 429, "the event route too");

    // The caller that authenticated before goes on from the same address; a JWT never seen
    // before waits for the budget like the attacker (it is not verified meanwhile).
    assert_eq!(session_count(&server, &valid).await, 0);
    let unseen = key.token(
        Some("key-a"),
        &claims(now, ISSUER, AUDIENCE, "acme", "bob@example.test"),
    );
    let (status, _, _) = server.post_raw(&unseen, list()).await;
    assert_eq!(status, 429);
    server.stop().await;
}

/// AUTH-12 with static tokens: checking one is a hash lookup, so a braked address still gets its
/// valid tokens checked and accepted; only its failures turn into `429`.
#[tokio::test]
async fn auth_12_static_tokens_stay_usable_from_a_braked_address() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.gateway.auth_failures_per_minute = 3;
    let server = TestServer::start(config).await;
    for attempt in 0..3 {
        let (status, _, _) = server.post_raw("not-a-token", b"{}".to_vec()).await;
        assert_eq!(status, 401, "attempt {attempt}");
    }
    let (status, _, body) = server.post_raw("not-a-token", b"{}".to_vec()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "RATE_LIMITED");
    assert_eq!(
        session_count(&server, TOKEN_A).await,
        0,
        "never seen before, still valid"
    );
    server.stop().await;
}

/// ATK-08: the `429` of the authentication brake carries `retry-after` on the command route, in
/// whole seconds rounded up from `retryAfterMs`, like every other `429` of that route; the event
/// route sends none (docs/protocol.md §4.2: never on SSE-route errors).
#[tokio::test]
async fn atk_08_the_authentication_brake_429_has_retry_after_on_the_command_route() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.gateway.auth_failures_per_minute = 2;
    let server = TestServer::start(config).await;
    for attempt in 0..2 {
        let (status, retry_after, _) = server.post_raw("not-a-token", b"{}".to_vec()).await;
        assert_eq!((status, retry_after), (401, None), "attempt {attempt}");
    }
    let (status, retry_after, body) = server.post_raw("not-a-token", b"{}".to_vec()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["commandId"], "authentication");
    assert_eq!(body["error"]["code"], "RATE_LIMITED");
    let wait_ms = body["error"]["retryAfterMs"].as_u64().unwrap();
    assert!(wait_ms > 0);
    let seconds: u64 = retry_after
        .expect("a retry-after header on the brake's 429")
        .parse()
        .unwrap();
    assert_eq!(seconds, wait_ms.div_ceil(1000), "{wait_ms} ms");

    let stream = server.events("not-a-token", "any-session", "", None).await;
    assert_eq!(stream.status().as_u16(), 429);
    assert!(stream.headers().get("retry-after").is_none());
    server.stop().await;
}

/// AUTH-13: keys rotate without a restart, and removing a key revokes its tokens everywhere. While
/// the JWKS holds two keys, tokens of both work; once it is replaced by one holding only the new
/// key, a token of the old key is refused (401) within the key refresh, and the event stream it
/// had opened ends cleanly (so its reconnection must authenticate again), while the stream of a
/// token of the kept key goes on. Tokens have no revocation list: a single token is revoked by
/// its expiry (SSE-15) or by removing its key.
#[tokio::test]
async fn auth_13_removing_a_signing_key_revokes_its_tokens_and_ends_their_streams() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (TestKey::rsa_a(), TestKey::rsa_b());
    let jwks_path = dir.path().join("jwks.json");
    std::fs::write(&jwks_path, jwks(&[("old", &old), ("new", &new)])).unwrap();
    let mut jwt = JwtConfig::new(
        JwtAlgorithm::Rs256,
        JwtKeySource::JwksFile(jwks_path.clone()),
    );
    jwt.key_refresh = std::time::Duration::from_millis(100);
    let server = TestServer::start(jwt_config(dir.path(), jwt)).await;
    let identity = claims(now_secs(), ISSUER, AUDIENCE, "acme", "bob@example.test");
    let old_token = old.token(Some("old"), &identity);
    let new_token = new.token(Some("new"), &identity);
    let session = server.create_session(&old_token).await;
    assert_eq!(
        session_count(&server, &new_token).await,
        1,
        "both keys work"
    );

    let open = |token: String| open_stream(&server, &session, token);
    let revoked = open(old_token.clone()).await;
    assert_eq!(revoked.status().as_u16(), 200);
    let mut kept = open(new_token.clone()).await;
    assert_eq!(kept.status().as_u16(), 200);

    // The old key is removed: the file is replaced atomically, as operators should.
    let staged = dir.path().join("jwks.json.new");
    std::fs::write(&staged, jwks(&[("new", &new)])).unwrap();
    std::fs::rename(&staged, &jwks_path).unwrap();

    let ended = tokio::time::timeout(std::time::Duration::from_secs(30), revoked.bytes())
        .await
        .expect("the stream of the removed key's token ends");
    assert!(ended.is_ok(), "a clean end, not an abort: {ended:?}");
    let (status, body) = server
        .command(&old_token, "after-removal", "session.list", json!({}))
        .await;
    assert_eq!((status, body), (401, generic_401()));
    assert_eq!(open(old_token).await.status().as_u16(), 401);

    // The kept key's stream still gets what happens next.
    server
        .ok(
            &new_token,
            "input.submit",
            json!({ "sessionId": session, "input": "hello" }),
        )
        .await;
    let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), kept.chunk())
        .await
        .expect("the kept key's stream is still served")
        .unwrap();
    assert!(chunk.is_some());
    server.stop().await;
}
