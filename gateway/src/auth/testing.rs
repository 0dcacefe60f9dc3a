//! Test support (feature `testing`): signing keys and a token minter for JWT tests. The RSA keys
//! are the committed TEST KEYS of `tests/fixtures/jwt/` (ring cannot generate RSA keys); EC keys
//! are generated per test. Nothing here is used by the server.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, RSA_PKCS1_SHA256, RsaKeyPair,
    RsaPublicKeyComponents,
};
use serde_json::{Value, json};

/// TEST KEY A (PKCS#8 PEM): not secret, never for production.
pub const RSA_A_PRIVATE_PEM: &str = include_str!("../../tests/fixtures/jwt/rsa-a.pkcs8.pem");
/// The public half of test key A as `PUBLIC KEY` (SubjectPublicKeyInfo).
pub const RSA_A_PUBLIC_PEM: &str = include_str!("../../tests/fixtures/jwt/rsa-a.spki.pem");
/// The public half of test key A as `RSA PUBLIC KEY` (PKCS#1).
pub const RSA_A_PKCS1_PEM: &str = include_str!("../../tests/fixtures/jwt/rsa-a.pkcs1.pem");
/// TEST KEY B (PKCS#8 PEM): the "other" RSA key.
pub const RSA_B_PRIVATE_PEM: &str = include_str!("../../tests/fixtures/jwt/rsa-b.pkcs8.pem");

/// DER prefix of a P-256 `SubjectPublicKeyInfo`, followed by the 65-byte point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A,
    0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A key that signs test tokens with its own algorithm, whatever header it is given (so tests
/// can also lie about `alg`).
pub enum TestKey {
    Hmac(Vec<u8>),
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

impl TestKey {
    pub fn hmac(secret: &[u8]) -> TestKey {
        TestKey::Hmac(secret.to_vec())
    }

    pub fn rsa_a() -> TestKey {
        TestKey::Rsa(rsa_from_pem(RSA_A_PRIVATE_PEM))
    }

    pub fn rsa_b() -> TestKey {
        TestKey::Rsa(rsa_from_pem(RSA_B_PRIVATE_PEM))
    }

    /// A fresh P-256 key.
    pub fn generate_ec() -> TestKey {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("P-256 key generation");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("the generated P-256 key");
        TestKey::Ec(pair)
    }

    /// The algorithm this key signs with.
    pub fn alg(&self) -> &'static str {
        match self {
            TestKey::Hmac(_) => "HS256",
            TestKey::Rsa(_) => "RS256",
            TestKey::Ec(_) => "ES256",
        }
    }

    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        match self {
            TestKey::Hmac(secret) => {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
                ring::hmac::sign(&key, message).as_ref().to_vec()
            }
            TestKey::Rsa(pair) => {
                let mut signature = vec![0; pair.public().modulus_len()];
                pair.sign(&RSA_PKCS1_SHA256, &rng, message, &mut signature)
                    .expect("RSA signing");
                signature
            }
            TestKey::Ec(pair) => pair
                .sign(&rng, message)
                .expect("ECDSA signing")
                .as_ref()
                .to_vec(),
        }
    }

    /// A token with header `{"alg": <this key's alg>, "typ": "JWT", "kid"?}` and `claims`.
    pub fn token(&self, kid: Option<&str>, claims: &Value) -> String {
        let mut header = json!({"alg": self.alg(), "typ": "JWT"});
        if let Some(kid) = kid {
            header["kid"] = json!(kid);
        }
        self.token_with_header(&header, claims)
    }

    /// A token with exactly `header` and `claims`, signed by this key.
    pub fn token_with_header(&self, header: &Value, claims: &Value) -> String {
        let signing_input = format!("{}.{}", encode_json(header), encode_json(claims));
        let signature = URL_SAFE_NO_PAD.encode(self.sign(signing_input.as_bytes()));
        format!("{signing_input}.{signature}")
    }

    /// The public JWK of this key (RSA or EC).
    pub fn public_jwk(&self, kid: &str) -> Value {
        match self {
            TestKey::Rsa(pair) => {
                let components: RsaPublicKeyComponents<Vec<u8>> = pair.public().into();
                json!({
                    "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                    "n": URL_SAFE_NO_PAD.encode(&components.n),
                    "e": URL_SAFE_NO_PAD.encode(&components.e),
                })
            }
            TestKey::Ec(pair) => {
                let point = pair.public_key().as_ref();
                json!({
                    "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
                    "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                    "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
                })
            }
            TestKey::Hmac(_) => panic!("an HMAC secret has no public JWK"),
        }
    }

    /// The public key as a `PUBLIC KEY` PEM (EC keys; RSA key A uses its fixture).
    pub fn public_pem(&self) -> String {
        let TestKey::Ec(pair) = self else {
            panic!("public_pem is for EC test keys; use RSA_A_PUBLIC_PEM for RSA");
        };
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(pair.public_key().as_ref());
        let body = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n")
    }
}

/// A JWKS document of `keys` (`(kid, key)` pairs).
pub fn jwks(keys: &[(&str, &TestKey)]) -> String {
    let keys: Vec<Value> = keys.iter().map(|(kid, key)| key.public_jwk(kid)).collect();
    json!({ "keys": keys }).to_string()
}

/// An unsigned token (`alg: none`, empty signature).
pub fn unsigned_token(claims: &Value) -> String {
    format!(
        "{}.{}.",
        encode_json(&json!({"alg": "none", "typ": "JWT"})),
        encode_json(claims)
    )
}

/// Claims valid for an hour from `now_secs`: `iss`, `aud`, `tenant`, `sub`, `scope`.
pub fn claims(now_secs: u64, issuer: &str, audience: &str, tenant: &str, subject: &str) -> Value {
    json!({
        "iss": issuer,
        "aud": audience,
        "tenant": tenant,
        "sub": subject,
        "scope": "session:create session:read session:write permission:resolve",
        "iat": now_secs,
        "nbf": now_secs,
        "exp": now_secs + 3600,
    })
}

fn encode_json(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

fn rsa_from_pem(pem: &str) -> RsaKeyPair {
    let der = pem::parse(pem).expect("the test key PEM").into_contents();
    RsaKeyPair::from_pkcs8(&der).expect("the test key is PKCS#8 RSA")
}
