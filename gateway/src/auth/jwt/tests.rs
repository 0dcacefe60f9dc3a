use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::ManualClock;
use agent_runtime::protocol::Scope;
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::*;
use crate::auth::testing::{
    RSA_A_PKCS1_PEM, RSA_A_PUBLIC_PEM, TestKey, claims, jwks, unsigned_token,
};

const NOW_SECS: u64 = 1_800_000_000;
const ISSUER: &str = "https://id.example.test/";
const AUDIENCE: &str = "agent-runtime";
const SECRET: &[u8] = b"test-only-hs256-secret-of-at-least-32-bytes";

fn clock() -> Arc<ManualClock> {
    ManualClock::new(NOW_SECS * 1000)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    // Atomic replace, as the README recommends for key rotation.
    let temporary = dir.join(format!(".{name}.tmp"));
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, &path).unwrap();
    path
}

fn checked(mut config: JwtConfig) -> JwtConfig {
    config.issuer = Some(ISSUER.to_owned());
    config.audience = Some(AUDIENCE.to_owned());
    config
}

fn hs256(dir: &Path, clock: Arc<ManualClock>) -> JwtAuthenticator {
    let secret = write(
        dir,
        "secret",
        &format!("{}\n", std::str::from_utf8(SECRET).unwrap()),
    );
    let config = checked(JwtConfig::new(
        JwtAlgorithm::Hs256,
        JwtKeySource::Secret(SecretSource::File(secret)),
    ));
    JwtAuthenticator::new(config, clock).unwrap()
}

fn with_file(
    algorithm: JwtAlgorithm,
    source: fn(PathBuf) -> JwtKeySource,
    path: PathBuf,
    clock: Arc<ManualClock>,
) -> JwtAuthenticator {
    JwtAuthenticator::new(checked(JwtConfig::new(algorithm, source(path))), clock).unwrap()
}

fn rs256_pem(dir: &Path, clock: Arc<ManualClock>) -> JwtAuthenticator {
    let path = write(dir, "key.pem", RSA_A_PUBLIC_PEM);
    with_file(JwtAlgorithm::Rs256, JwtKeySource::PemFile, path, clock)
}

fn good_claims() -> Value {
    claims(NOW_SECS, ISSUER, AUDIENCE, "acme", "alice@example.com")
}

fn with(mut claims: Value, name: &str, value: Value) -> Value {
    claims[name] = value;
    claims
}

fn without(mut claims: Value, name: &str) -> Value {
    claims.as_object_mut().unwrap().remove(name);
    claims
}

const ALL_BUT_ADMIN: [Scope; 4] = [
    Scope::SessionCreate,
    Scope::SessionRead,
    Scope::SessionWrite,
    Scope::PermissionResolve,
];

#[test]
fn a_valid_hs256_token_gives_its_principal() {
    let dir = tempfile::tempdir().unwrap();
    let auth = hs256(dir.path(), clock());
    let token = TestKey::hmac(SECRET).token(None, &good_claims());
    let principal = auth.verify(&token).unwrap();
    assert_eq!(principal.tenant_id, "acme");
    assert_eq!(principal.subject, "alice@example.com");
    assert_eq!(principal.scopes, ALL_BUT_ADMIN.to_vec());

    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
    headers.insert(AUTHORIZATION, value);
    assert_eq!(auth.authenticate(&headers).unwrap(), Some(principal));
    assert_eq!(auth.authenticate(&HeaderMap::new()).unwrap(), None);
}

#[test]
fn valid_rs256_tokens_verify_with_spki_and_pkcs1_pem_keys() {
    let dir = tempfile::tempdir().unwrap();
    let token = TestKey::rsa_a().token(Some("any-kid"), &good_claims());
    assert_eq!(
        rs256_pem(dir.path(), clock())
            .verify(&token)
            .unwrap()
            .tenant_id,
        "acme"
    );
    let pkcs1 = write(dir.path(), "pkcs1.pem", RSA_A_PKCS1_PEM);
    let auth = with_file(JwtAlgorithm::Rs256, JwtKeySource::PemFile, pkcs1, clock());
    assert_eq!(auth.verify(&token).unwrap().subject, "alice@example.com");
}

#[test]
fn valid_es256_tokens_verify_with_a_pem_key_and_a_jwks() {
    let dir = tempfile::tempdir().unwrap();
    let key = TestKey::generate_ec();
    let pem = write(dir.path(), "ec.pem", &key.public_pem());
    let auth = with_file(JwtAlgorithm::Es256, JwtKeySource::PemFile, pem, clock());
    assert!(auth.verify(&key.token(None, &good_claims())).is_ok());

    let set = write(dir.path(), "jwks.json", &jwks(&[("ec-1", &key)]));
    let auth = with_file(JwtAlgorithm::Es256, JwtKeySource::JwksFile, set, clock());
    assert!(
        auth.verify(&key.token(Some("ec-1"), &good_claims()))
            .is_ok()
    );
}

#[test]
fn expired_tokens_are_refused_after_the_leeway() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let auth = hs256(dir.path(), clock.clone());
    let key = TestKey::hmac(SECRET);
    let token = key.token(None, &with(good_claims(), "exp", json!(NOW_SECS - 30)));
    assert!(auth.verify(&token).is_ok(), "within the 60 s leeway");
    clock.advance(31_000);
    assert_eq!(auth.verify(&token), Err(Rejection::Expired));
    let missing = key.token(None, &without(good_claims(), "exp"));
    assert_eq!(auth.verify(&missing), Err(Rejection::MissingExpiry));
    let text = key.token(None, &with(good_claims(), "exp", json!("tomorrow")));
    assert_eq!(auth.verify(&text), Err(Rejection::MissingExpiry));
}

#[test]
fn tokens_from_the_future_are_refused_beyond_the_leeway() {
    let dir = tempfile::tempdir().unwrap();
    let auth = hs256(dir.path(), clock());
    let key = TestKey::hmac(SECRET);
    let nbf = key.token(None, &with(good_claims(), "nbf", json!(NOW_SECS + 61)));
    assert_eq!(auth.verify(&nbf), Err(Rejection::NotYetValid));
    let near = key.token(None, &with(good_claims(), "nbf", json!(NOW_SECS + 59)));
    assert!(auth.verify(&near).is_ok());
    let iat = key.token(None, &with(good_claims(), "iat", json!(NOW_SECS + 61)));
    assert_eq!(auth.verify(&iat), Err(Rejection::IssuedInTheFuture));
}

#[test]
fn wrong_or_missing_audience_and_issuer_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let auth = hs256(dir.path(), clock());
    let key = TestKey::hmac(SECRET);
    let verify = |claims: Value| auth.verify(&key.token(None, &claims));
    assert_eq!(
        verify(with(good_claims(), "aud", json!("other-api"))),
        Err(Rejection::WrongAudience)
    );
    assert_eq!(
        verify(with(good_claims(), "aud", json!(["a", "b"]))),
        Err(Rejection::WrongAudience)
    );
    assert_eq!(
        verify(without(good_claims(), "aud")),
        Err(Rejection::WrongAudience)
    );
    assert!(verify(with(good_claims(), "aud", json!(["other", AUDIENCE]))).is_ok());
    assert_eq!(
        verify(with(good_claims(), "iss", json!("https://evil.test/"))),
        Err(Rejection::WrongIssuer)
    );
    assert_eq!(
        verify(without(good_claims(), "iss")),
        Err(Rejection::WrongIssuer)
    );
}

#[test]
fn bad_signatures_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let auth = rs256_pem(dir.path(), clock());
    let token = TestKey::rsa_a().token(None, &good_claims());
    // Flip one character of the signature.
    let mut tampered = token.clone().into_bytes();
    let last = tampered.len() - 5;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert_eq!(auth.verify(&tampered), Err(Rejection::BadSignature));
    // A valid signature by another key.
    let other = TestKey::rsa_b().token(None, &good_claims());
    assert_eq!(auth.verify(&other), Err(Rejection::BadSignature));
    // Claims changed after signing.
    let parts: Vec<&str> = token.split('.').collect();
    let forged_claims =
        TestKey::rsa_a().token(None, &with(good_claims(), "tenant", json!("victim")));
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        forged_claims.split('.').nth(1).unwrap(),
        parts[2]
    );
    assert_eq!(auth.verify(&forged), Err(Rejection::BadSignature));

    let hs = hs256(dir.path(), clock());
    let wrong_secret = TestKey::hmac(b"another-secret-another-secret-another");
    assert_eq!(
        hs.verify(&wrong_secret.token(None, &good_claims())),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn an_all_zero_es256_signature_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = TestKey::generate_ec();
    let pem = write(dir.path(), "ec.pem", &key.public_pem());
    let auth = with_file(JwtAlgorithm::Es256, JwtKeySource::PemFile, pem, clock());
    let token = key.token(None, &good_claims());
    let signing_input = &token[..token.rfind('.').unwrap()];
    let zeros = format!("{signing_input}.{}", "A".repeat(86));
    assert_eq!(auth.verify(&zeros), Err(Rejection::BadSignature));
}

#[test]
fn alg_none_is_refused_whatever_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    // `none` is no algorithm of the library's: the header is unreadable, refused before any key.
    let token = unsigned_token(&good_claims());
    assert_eq!(
        hs256(dir.path(), clock()).verify(&token),
        Err(Rejection::Malformed)
    );
    assert_eq!(
        rs256_pem(dir.path(), clock()).verify(&token),
        Err(Rejection::Malformed)
    );
    // Even when the header says RS256 but the signature is empty.
    let header = json!({"alg": "RS256"});
    let empty = TestKey::rsa_a().token_with_header(&header, &good_claims());
    let stripped = format!("{}.", &empty[..empty.rfind('.').unwrap()]);
    assert_eq!(
        rs256_pem(dir.path(), clock()).verify(&stripped),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn hs_rs_confusion_is_refused_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    // The classic attack: HS256 keyed with the RSA public key the server trusts.
    let confused = TestKey::hmac(RSA_A_PUBLIC_PEM.as_bytes()).token(None, &good_claims());
    assert_eq!(
        rs256_pem(dir.path(), clock()).verify(&confused),
        Err(Rejection::AlgorithmNotAllowed)
    );
    // An RS256 token (valid for key A) presented to an HS256 verifier.
    let rs = TestKey::rsa_a().token(None, &good_claims());
    assert_eq!(
        hs256(dir.path(), clock()).verify(&rs),
        Err(Rejection::AlgorithmNotAllowed)
    );
    // An HS256 signature under an `alg: RS256` header does not verify as RSA.
    let lying = TestKey::hmac(SECRET).token_with_header(&json!({"alg": "RS256"}), &good_claims());
    assert_eq!(
        rs256_pem(dir.path(), clock()).verify(&lying),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn missing_or_invalid_identity_claims_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let auth = hs256(dir.path(), clock());
    let key = TestKey::hmac(SECRET);
    let verify = |claims: Value| auth.verify(&key.token(None, &claims));
    assert_eq!(
        verify(without(good_claims(), "tenant")),
        Err(Rejection::MissingTenant)
    );
    assert_eq!(
        verify(with(good_claims(), "tenant", json!(42))),
        Err(Rejection::MissingTenant)
    );
    for tenant in ["../etc", "-leading-dash", "has space", "", "ténant"] {
        assert_eq!(
            verify(with(good_claims(), "tenant", json!(tenant))),
            Err(Rejection::InvalidPrincipal),
            "{tenant:?}"
        );
    }
    assert_eq!(
        verify(without(good_claims(), "sub")),
        Err(Rejection::MissingSubject)
    );
    assert_eq!(
        verify(with(good_claims(), "sub", json!(" padded "))),
        Err(Rejection::InvalidPrincipal)
    );
    assert_eq!(
        verify(with(good_claims(), "scope", json!(7))),
        Err(Rejection::BadScopes)
    );
    assert_eq!(
        verify(with(good_claims(), "scope", json!(["session:read", 7]))),
        Err(Rejection::BadScopes)
    );
}

#[test]
fn claim_names_are_configurable_and_unknown_scopes_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let secret = write(dir.path(), "secret", std::str::from_utf8(SECRET).unwrap());
    let mut config = JwtConfig::new(
        JwtAlgorithm::Hs256,
        JwtKeySource::Secret(SecretSource::File(secret)),
    );
    config.tenant_claim = "https://example.test/org".to_owned();
    config.subject_claim = "email".to_owned();
    config.scopes_claim = "scp".to_owned();
    let auth = JwtAuthenticator::new(config, clock()).unwrap();
    let claims = json!({
        "https://example.test/org": "org-7",
        "email": "bob@example.test",
        "scp": ["openid", "session:read", "session:admin", "session:read"],
        "exp": NOW_SECS + 60,
    });
    let principal = auth
        .verify(&TestKey::hmac(SECRET).token(None, &claims))
        .unwrap();
    assert_eq!(principal.tenant_id, "org-7");
    assert_eq!(principal.subject, "bob@example.test");
    assert_eq!(
        principal.scopes,
        vec![Scope::SessionRead, Scope::SessionAdmin]
    );
    let no_scopes = without(claims, "scp");
    let principal = auth
        .verify(&TestKey::hmac(SECRET).token(None, &no_scopes))
        .unwrap();
    assert!(
        principal.scopes.is_empty(),
        "no scope claim: authenticated, but no scope"
    );
}

#[test]
fn crit_headers_and_wrong_types_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = TestKey::hmac(SECRET);
    let crit = key.token_with_header(&json!({"alg": "HS256", "crit": ["exp"]}), &good_claims());
    assert_eq!(
        hs256(dir.path(), clock()).verify(&crit),
        Err(Rejection::CriticalHeader)
    );

    let secret = write(dir.path(), "secret", std::str::from_utf8(SECRET).unwrap());
    let mut config = JwtConfig::new(
        JwtAlgorithm::Hs256,
        JwtKeySource::Secret(SecretSource::File(secret)),
    );
    config.required_typ = Some("at+jwt".to_owned());
    let auth = JwtAuthenticator::new(config, clock()).unwrap();
    let typed =
        |typ: &str| key.token_with_header(&json!({"alg": "HS256", "typ": typ}), &good_claims());
    assert!(auth.verify(&typed("application/at+JWT")).is_ok());
    assert_eq!(auth.verify(&typed("JWT")), Err(Rejection::WrongType));
    assert_eq!(
        auth.verify(&key.token_with_header(&json!({"alg": "HS256"}), &good_claims())),
        Err(Rejection::WrongType)
    );
}

#[test]
fn jwks_keys_are_matched_by_kid_and_must_fit_the_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let a = TestKey::rsa_a();
    let b = TestKey::rsa_b();
    let ec = TestKey::generate_ec();
    let mut document: Value =
        serde_json::from_str(&jwks(&[("a", &a), ("b", &b), ("ec", &ec)])).unwrap();
    // Key b is declared for another algorithm: it must not be used for RS256.
    document["keys"][1]["alg"] = json!("RS512");
    let path = write(dir.path(), "jwks.json", &document.to_string());
    let auth = with_file(JwtAlgorithm::Rs256, JwtKeySource::JwksFile, path, clock());
    assert!(auth.verify(&a.token(Some("a"), &good_claims())).is_ok());
    assert_eq!(
        auth.verify(&a.token(Some("b"), &good_claims())),
        Err(Rejection::UnknownKey)
    );
    assert_eq!(
        auth.verify(&b.token(Some("b"), &good_claims())),
        Err(Rejection::UnknownKey)
    );
    assert_eq!(
        auth.verify(&a.token(Some("../../etc/passwd"), &good_claims())),
        Err(Rejection::UnknownKey)
    );
    // The EC key is not an RS256 key, and a kid naming it does not change the algorithm.
    assert_eq!(
        auth.verify(&ec.token(Some("ec"), &good_claims())),
        Err(Rejection::AlgorithmNotAllowed)
    );
    // Key a alone: a token without kid may use the only key.
    assert!(auth.verify(&a.token(None, &good_claims())).is_ok());

    let two = write(dir.path(), "two.json", &jwks(&[("a", &a), ("b", &b)]));
    let auth = with_file(JwtAlgorithm::Rs256, JwtKeySource::JwksFile, two, clock());
    assert_eq!(
        auth.verify(&a.token(None, &good_claims())),
        Err(Rejection::UnknownKey)
    );
    assert!(auth.verify(&b.token(Some("b"), &good_claims())).is_ok());
}

#[test]
fn jwks_rotation_accepts_the_new_kid_and_drops_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let old = TestKey::rsa_a();
    let new = TestKey::rsa_b();
    let path = write(dir.path(), "jwks.json", &jwks(&[("old", &old)]));
    let auth = with_file(
        JwtAlgorithm::Rs256,
        JwtKeySource::JwksFile,
        path,
        clock.clone(),
    );
    let old_token = old.token(Some("old"), &good_claims());
    let new_token = new.token(Some("new"), &good_claims());
    assert!(auth.verify(&old_token).is_ok());
    assert_eq!(auth.verify(&new_token), Err(Rejection::UnknownKey));

    // Both keys during the overlap, then only the new one.
    write(
        dir.path(),
        "jwks.json",
        &jwks(&[("old", &old), ("new", &new)]),
    );
    clock.advance(5_000);
    assert!(auth.verify(&new_token).is_ok());
    assert!(auth.verify(&old_token).is_ok());
    write(dir.path(), "jwks.json", &jwks(&[("new", &new)]));
    clock.advance(5_000);
    assert!(auth.verify(&new_token).is_ok());
    assert_eq!(auth.verify(&old_token), Err(Rejection::UnknownKey));
}

#[test]
fn a_key_file_is_checked_at_most_once_per_refresh_interval() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let a = TestKey::rsa_a();
    let b = TestKey::rsa_b();
    let path = write(dir.path(), "jwks.json", &jwks(&[("a", &a)]));
    let mut config = checked(JwtConfig::new(
        JwtAlgorithm::Rs256,
        JwtKeySource::JwksFile(path),
    ));
    config.key_refresh = Duration::from_secs(30);
    let auth = JwtAuthenticator::new(config, clock.clone()).unwrap();
    write(dir.path(), "jwks.json", &jwks(&[("b", &b)]));
    clock.advance(29_000);
    assert!(
        auth.verify(&a.token(Some("a"), &good_claims())).is_ok(),
        "not yet re-read"
    );
    clock.advance(1_000);
    assert_eq!(
        auth.verify(&a.token(Some("a"), &good_claims())),
        Err(Rejection::UnknownKey)
    );
    assert!(auth.verify(&b.token(Some("b"), &good_claims())).is_ok());
}

#[test]
fn a_broken_or_missing_key_file_keeps_the_last_good_keys() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let a = TestKey::rsa_a();
    let path = write(dir.path(), "jwks.json", &jwks(&[("a", &a)]));
    let auth = with_file(
        JwtAlgorithm::Rs256,
        JwtKeySource::JwksFile,
        path.clone(),
        clock.clone(),
    );
    let token = a.token(Some("a"), &good_claims());
    for broken in [
        "{\"keys\": [",
        "{\"keys\": []}",
        "-----BEGIN PUBLIC KEY-----",
    ] {
        write(dir.path(), "jwks.json", broken);
        clock.advance(5_000);
        assert!(auth.verify(&token).is_ok(), "after {broken:?}");
    }
    std::fs::remove_file(&path).unwrap();
    clock.advance(5_000);
    assert!(auth.verify(&token).is_ok(), "after removal");
}

#[test]
fn start_up_refuses_unusable_secrets_keys_and_settings() {
    let dir = tempfile::tempdir().unwrap();
    let short = write(dir.path(), "short", "too-short");
    let hs = |source| JwtConfig::new(JwtAlgorithm::Hs256, JwtKeySource::Secret(source));
    let error = JwtAuthenticator::new(hs(SecretSource::File(short)), clock()).unwrap_err();
    assert!(matches!(error, JwtSetupError::SecretTooShort));
    let unset = SecretSource::Env("AGENT_RUNTIME_TEST_SURELY_UNSET_JWT_SECRET".to_owned());
    let error = JwtAuthenticator::new(hs(unset), clock()).unwrap_err();
    assert!(matches!(error, JwtSetupError::SecretUnavailable(_)));

    let private = write(
        dir.path(),
        "private.pem",
        crate::auth::testing::RSA_A_PRIVATE_PEM,
    );
    let config = JwtConfig::new(JwtAlgorithm::Rs256, JwtKeySource::PemFile(private));
    let error = JwtAuthenticator::new(config, clock())
        .unwrap_err()
        .to_string();
    assert!(error.contains("private key"), "{error}");
    assert!(!error.contains("MII"), "no key material in errors: {error}");

    let rsa = write(dir.path(), "rsa.pem", RSA_A_PUBLIC_PEM);
    let config = JwtConfig::new(JwtAlgorithm::Es256, JwtKeySource::PemFile(rsa.clone()));
    assert!(
        JwtAuthenticator::new(config, clock()).is_err(),
        "an RSA key for ES256"
    );
    let config = JwtConfig::new(JwtAlgorithm::Hs256, JwtKeySource::PemFile(rsa.clone()));
    assert!(matches!(
        JwtAuthenticator::new(config, clock()).unwrap_err(),
        JwtSetupError::KeySourceMismatch { .. }
    ));
    let mut config = JwtConfig::new(JwtAlgorithm::Rs256, JwtKeySource::PemFile(rsa));
    config.leeway_secs = 61;
    assert!(matches!(
        JwtAuthenticator::new(config, clock()).unwrap_err(),
        JwtSetupError::LeewayTooLarge
    ));
    let oct = write(
        dir.path(),
        "oct.json",
        r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#,
    );
    let config = JwtConfig::new(JwtAlgorithm::Rs256, JwtKeySource::JwksFile(oct));
    assert!(
        JwtAuthenticator::new(config, clock()).is_err(),
        "no usable key"
    );
    assert_eq!(JwtAlgorithm::parse("none"), None);
    assert_eq!(JwtAlgorithm::parse("RS256"), Some(JwtAlgorithm::Rs256));
}

#[test]
fn secrets_and_keys_never_show_in_debug_output() {
    let dir = tempfile::tempdir().unwrap();
    let auth = hs256(dir.path(), clock());
    let shown = format!("{auth:?}");
    assert!(
        !shown.contains(std::str::from_utf8(SECRET).unwrap()),
        "{shown}"
    );
    let key = keys::VerifyingKey::hmac(SECRET).unwrap();
    assert_eq!(format!("{key:?}"), "VerifyingKey::Hmac(<redacted>)");
}

#[test]
fn malformed_and_oversized_tokens_are_refused_before_any_key() {
    let dir = tempfile::tempdir().unwrap();
    let auth = hs256(dir.path(), clock());
    let encode = |value: &str| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value)
    };
    let header = encode(r#"{"alg":"HS256"}"#);
    let payload = encode("{}");
    let cases = [
        "not-a-jwt".to_owned(),
        format!("{header}.{payload}"),
        format!("{header}.{payload}.c2ln.extra"),
        format!("{}.{payload}.c2ln", encode("[]")),
        format!("{}.{payload}.c2ln", encode(r#"{"alg":1}"#)),
        format!("{}.{payload}.c2ln", encode(r#"{"alg":"HS256","kid":3}"#)),
        format!("{}.{payload}.c2ln", encode("not json")),
    ];
    for token in cases {
        assert_eq!(auth.verify(&token), Err(Rejection::Malformed), "{token}");
    }
    let oversized = format!("{header}.{}.c2ln", "A".repeat(MAX_TOKEN_BYTES));
    assert_eq!(auth.verify(&oversized), Err(Rejection::TooLong));
    // A signed payload that is not a JSON object.
    let array = TestKey::hmac(SECRET).token_with_header(&json!({"alg": "HS256"}), &json!([1]));
    assert_eq!(auth.verify(&array), Err(Rejection::Malformed));
}
