//! A JWKS document (RFC 7517 §5): `{"keys": [...]}`. Only keys that fit the configured
//! algorithm are kept: `kty` (and `crv`) must match it, and `alg`, `use` and `key_ops` must not
//! contradict it. Symmetric (`oct`) keys are never taken from a JWKS. A key of the right type
//! that cannot be read is skipped with a warning, so one odd entry does not block a rotation.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

use super::JwtAlgorithm;
use super::key_error::KeyError;
use super::keys::{KeySet, VerifyingKey};

pub(super) fn parse(text: &str, algorithm: JwtAlgorithm) -> Result<KeySet, KeyError> {
    let Ok(Value::Object(document)) = serde_json::from_str::<Value>(text) else {
        return Err(KeyError::Malformed("JWKS (not a JSON object)"));
    };
    let Some(Value::Array(entries)) = document.get("keys") else {
        return Err(KeyError::Malformed("JWKS (no \"keys\" array)"));
    };
    let mut keys: Vec<(Option<String>, VerifyingKey)> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let Value::Object(jwk) = entry else {
            tracing::warn!(index, "JWKS entry is not an object; skipped");
            continue;
        };
        if !fits(jwk, algorithm) {
            continue;
        }
        let kid = match jwk.get("kid") {
            None => None,
            Some(Value::String(kid)) => Some(kid.clone()),
            Some(_) => {
                tracing::warn!(index, "JWKS entry has a non-string kid; skipped");
                continue;
            }
        };
        let key = match algorithm {
            JwtAlgorithm::Rs256 => rsa_key(jwk),
            JwtAlgorithm::Es256 => p256_key(jwk),
            JwtAlgorithm::Hs256 => Err(KeyError::Unsupported("symmetric keys in a JWKS")),
        };
        match key {
            Ok(key) => {
                if kid.is_some() && keys.iter().any(|(other, _)| *other == kid) {
                    return Err(KeyError::DuplicateKid);
                }
                keys.push((kid, key));
            }
            Err(error) => {
                tracing::warn!(index, kid = kid.as_deref(), %error, "JWKS key skipped");
            }
        }
    }
    if keys.is_empty() {
        return Err(KeyError::NoUsableKey(algorithm.as_str()));
    }
    Ok(KeySet::Jwks(keys))
}

/// Whether a JWK is meant for verifying `algorithm` signatures.
fn fits(jwk: &Map<String, Value>, algorithm: JwtAlgorithm) -> bool {
    let text = |name: &str| jwk.get(name).and_then(Value::as_str);
    let kty_fits = match algorithm {
        JwtAlgorithm::Rs256 => text("kty") == Some("RSA"),
        JwtAlgorithm::Es256 => text("kty") == Some("EC") && text("crv") == Some("P-256"),
        JwtAlgorithm::Hs256 => false,
    };
    let alg_fits = jwk
        .get("alg")
        .is_none_or(|alg| alg.as_str() == Some(algorithm.as_str()));
    let use_fits = jwk
        .get("use")
        .is_none_or(|usage| usage.as_str() == Some("sig"));
    let ops_fit = match jwk.get("key_ops") {
        None => true,
        Some(Value::Array(ops)) => ops.iter().any(|op| op.as_str() == Some("verify")),
        Some(_) => false,
    };
    kty_fits && alg_fits && use_fits && ops_fit
}

fn member(jwk: &Map<String, Value>, name: &'static str) -> Result<Vec<u8>, KeyError> {
    let Some(Value::String(encoded)) = jwk.get(name) else {
        return Err(KeyError::Malformed(name));
    };
    URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| KeyError::Malformed(name))
}

fn rsa_key(jwk: &Map<String, Value>) -> Result<VerifyingKey, KeyError> {
    VerifyingKey::rsa(&member(jwk, "n")?, &member(jwk, "e")?)
}

fn p256_key(jwk: &Map<String, Value>) -> Result<VerifyingKey, KeyError> {
    let x = member(jwk, "x")?;
    let y = member(jwk, "y")?;
    if x.len() != 32 || y.len() != 32 {
        return Err(KeyError::Malformed("P-256 coordinates (32 bytes each)"));
    }
    let mut point = Vec::with_capacity(65);
    point.push(0x04);
    point.extend_from_slice(&x);
    point.extend_from_slice(&y);
    VerifyingKey::p256(point)
}
