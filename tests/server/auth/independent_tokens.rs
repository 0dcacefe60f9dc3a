//! Tokens minted by an independent library: PyJWT on `cryptography` (tests/jwt/mint.py) makes the
//! keys and the tokens, the server verifies them over real HTTP. HS256 (secret file, required
//! `typ`), RS256 (a JWKS file rotated while the server runs) and ES256 (a PEM file), each with
//! every refusal: claims, signature, algorithm, `none`, key confusion, `crit`, `typ`, `kid`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{TestServer, python_with, test_config};
use agent_runtime_cli::config::{ServeConfig, StoreKind};
use agent_runtime_gateway::AuthMode;
use agent_runtime_gateway::auth::{JwtAlgorithm, JwtConfig, JwtKeySource, SecretSource};
use serde_json::{Map, Value, json};

const ISSUER: &str = "https://id.example.test/";
const AUDIENCE: &str = "agent-runtime";

/// Runs the minter into `dir`: the tokens by algorithm, then by name.
fn mint(dir: &Path) -> Map<String, Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/jwt/mint.py");
    let output = Command::new(python_with("jwt, cryptography"))
        .arg(script)
        .arg(dir)
        .args([ISSUER, AUDIENCE])
        .output()
        .expect("run tests/jwt/mint.py");
    assert!(
        output.status.success(),
        "mint.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    match serde_json::from_slice(&output.stdout).expect("mint.py prints JSON") {
        Value::Object(tokens) => tokens,
        other => panic!("mint.py printed {other}"),
    }
}

async fn server(dir: &Path, mut jwt: JwtConfig) -> TestServer {
    jwt.issuer = Some(ISSUER.to_owned());
    jwt.audience = Some(AUDIENCE.to_owned());
    jwt.key_refresh = Duration::from_millis(100);
    TestServer::start(ServeConfig {
        tokens: Vec::new(),
        auth_mode: AuthMode::Jwt(jwt),
        ..test_config(StoreKind::Memory, dir)
    })
    .await
}

async fn status(server: &TestServer, token: &str) -> u16 {
    let (status, _) = server
        .command(token, "independent-token", "session.list", json!({}))
        .await;
    status
}

/// Every `ok-` token of `tokens` but those in `later` is accepted, every other one refused.
async fn check_all(server: &TestServer, tokens: &Value, later: &[&str]) {
    for (name, token) in tokens.as_object().unwrap() {
        if later.contains(&name.as_str()) {
            continue;
        }
        let expected = if name.starts_with("ok-") { 200 } else { 401 };
        assert_eq!(
            status(server, token.as_str().unwrap()).await,
            expected,
            "{name}"
        );
    }
}

/// Waits (up to 10 s) until `token` gets `expected`: the key file is re-read every 100 ms.
async fn eventually(server: &TestServer, token: &Value, expected: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = status(server, token.as_str().unwrap()).await;
        if got == expected {
            return;
        }
        assert!(Instant::now() < deadline, "still {got}, not {expected}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Mints, starts a server with the configuration `jwt` makes of the minted files, and checks
/// every token minted for `algorithm`.
async fn every_token_of(algorithm: &str, jwt: impl FnOnce(&Path) -> JwtConfig) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = mint(dir.path());
    let server = server(dir.path(), jwt(dir.path())).await;
    check_all(&server, &tokens[algorithm], &[]).await;
    server.stop().await;
}

#[tokio::test]
async fn hs256_tokens_of_pyjwt_are_accepted_and_every_bad_one_refused() {
    every_token_of("hs256", |dir| {
        let secret = SecretSource::File(dir.join("hs256.secret"));
        let mut jwt = JwtConfig::new(JwtAlgorithm::Hs256, JwtKeySource::Secret(secret));
        jwt.required_typ = Some("at+jwt".to_owned());
        jwt
    })
    .await;
}

#[tokio::test]
async fn es256_tokens_of_pyjwt_verify_with_a_pem_key_and_every_bad_one_is_refused() {
    every_token_of("es256", |dir| {
        let pem = JwtKeySource::PemFile(dir.join("es256.pem"));
        JwtConfig::new(JwtAlgorithm::Es256, pem)
    })
    .await;
}

#[tokio::test]
async fn rs256_jwks_of_pyjwt_rotates_without_a_restart_and_every_bad_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = mint(dir.path());
    let live = dir.path().join("live.jwks");
    let rotate = |name: &str| {
        // Atomic replace, as the README asks of a key rotation.
        let temporary = dir.path().join(".live.jwks.tmp");
        std::fs::copy(dir.path().join(name), &temporary).unwrap();
        std::fs::rename(&temporary, &live).unwrap();
    };
    rotate("rs256-old.jwks");
    let jwt = JwtConfig::new(JwtAlgorithm::Rs256, JwtKeySource::JwksFile(live.clone()));
    let server = server(dir.path(), jwt).await;
    let rs = &tokens["rs256"];
    check_all(&server, rs, &["ok-new"]).await;
    assert_eq!(status(&server, rs["ok-new"].as_str().unwrap()).await, 401);

    // Both keys during the overlap (a 3072-bit key beside the 2048-bit one), then the new one only.
    rotate("rs256-both.jwks");
    eventually(&server, &rs["ok-new"], 200).await;
    assert_eq!(status(&server, rs["ok-old"].as_str().unwrap()).await, 200);
    rotate("rs256-new.jwks");
    eventually(&server, &rs["ok-old"], 401).await;
    assert_eq!(status(&server, rs["ok-new"].as_str().unwrap()).await, 200);
    server.stop().await;
}
