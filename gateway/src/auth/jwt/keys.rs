//! Verification keys: what a secret, a PEM file or a JWKS document turns into, each pinned to one
//! algorithm. Reading PEM, DER and JWK is left to `jsonwebtoken` (and the `pem` and `simple_asn1`
//! crates it reads them with); this module decides which keys may be used:
//! - a PEM file holds one public key (`PUBLIC KEY`, or `RSA PUBLIC KEY` for RS256), never a
//!   private key or a certificate;
//! - a JWKS keeps only the keys that fit the configured algorithm: `kty` (and `crv`) must match
//!   it, and `alg`, `use` and `key_ops` must not contradict it; symmetric (`oct`) keys are never
//!   taken from a JWKS; a key of the right type that cannot be read is skipped with a warning, so
//!   one odd entry does not block a rotation;
//! - RSA keys have 2048 to 8192 bits, EC keys are uncompressed P-256 points.
//!
//! `Debug` shows the kind and size of a key, never its bytes.

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, KeyOperations, PublicKeyUse,
};
use jsonwebtoken::{DecodingKey, DecodingKeyKind};
use serde_json::Value;

use super::JwtAlgorithm;
pub use super::key_error::KeyError;

/// How a key file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyFormat {
    Pem,
    Jwks,
}

/// One key, usable with exactly one algorithm.
pub(super) struct VerifyingKey {
    algorithm: JwtAlgorithm,
    key: DecodingKey,
}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.algorithm, self.key.kind()) {
            (JwtAlgorithm::Hs256, _) => f.write_str("VerifyingKey::Hmac(<redacted>)"),
            (JwtAlgorithm::Rs256, DecodingKeyKind::RsaModulusExponent { n, .. }) => {
                write!(f, "VerifyingKey::Rsa({} bits)", n.len() * 8)
            }
            (JwtAlgorithm::Rs256, _) => f.write_str("VerifyingKey::Rsa"),
            (JwtAlgorithm::Es256, _) => f.write_str("VerifyingKey::EcP256"),
        }
    }
}

impl VerifyingKey {
    pub fn hmac(secret: &[u8]) -> Result<Self, KeyError> {
        let key = DecodingKey::from_secret(secret)
            .map_err(|_| KeyError::Malformed("HS256 secret (empty)"))?;
        Ok(Self {
            algorithm: JwtAlgorithm::Hs256,
            key,
        })
    }

    /// An RSA key from its modulus and exponent (big-endian).
    fn rsa(n: &[u8], e: &[u8]) -> Result<Self, KeyError> {
        let n = strip_leading_zeros(n);
        if !(256..=1024).contains(&n.len()) {
            return Err(KeyError::RsaKeySize);
        }
        let e = strip_leading_zeros(e);
        if e.is_empty() {
            return Err(KeyError::Malformed("RSA public exponent"));
        }
        Ok(Self {
            algorithm: JwtAlgorithm::Rs256,
            key: DecodingKey::from_rsa_raw_components(n, e),
        })
    }

    /// A P-256 key: `key` must hold the uncompressed point `04 || x || y`.
    fn p256(key: DecodingKey) -> Result<Self, KeyError> {
        match key.kind() {
            DecodingKeyKind::SecretOrDer(point) if point.len() == 65 && point[0] == 0x04 => {
                Ok(Self {
                    algorithm: JwtAlgorithm::Es256,
                    key,
                })
            }
            _ => Err(KeyError::Unsupported(
                "an EC key that is not an uncompressed P-256 point",
            )),
        }
    }

    pub fn algorithm(&self) -> JwtAlgorithm {
        self.algorithm
    }

    pub fn decoding_key(&self) -> &DecodingKey {
        &self.key
    }
}

fn strip_leading_zeros(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

/// The keys a token may be verified with.
#[derive(Debug)]
pub(super) enum KeySet {
    /// One key (a secret or a PEM file): used whatever the token's `kid`.
    Single(VerifyingKey),
    /// JWKS keys with their `kid`.
    Jwks(Vec<(Option<String>, VerifyingKey)>),
}

impl KeySet {
    /// The key for a token's `kid`. Without a `kid`, only a JWKS of exactly one key answers.
    pub fn find(&self, kid: Option<&str>) -> Option<&VerifyingKey> {
        match (self, kid) {
            (KeySet::Single(key), _) => Some(key),
            (KeySet::Jwks(keys), Some(kid)) => keys
                .iter()
                .find(|(id, _)| id.as_deref() == Some(kid))
                .map(|(_, key)| key),
            (KeySet::Jwks(keys), None) => match keys.as_slice() {
                [(_, key)] => Some(key),
                _ => None,
            },
        }
    }

    pub fn len(&self) -> usize {
        match self {
            KeySet::Single(_) => 1,
            KeySet::Jwks(keys) => keys.len(),
        }
    }
}

/// One public key in PEM: `PUBLIC KEY` (RSA or P-256), or `RSA PUBLIC KEY` (PKCS#1).
pub(super) fn parse_pem(text: &str, algorithm: JwtAlgorithm) -> Result<VerifyingKey, KeyError> {
    let block = pem::parse(text).map_err(|_| KeyError::Malformed("PEM (no BEGIN/END block)"))?;
    match block.tag() {
        "PUBLIC KEY" | "RSA PUBLIC KEY" => {}
        label if label.contains("PRIVATE KEY") => {
            return Err(KeyError::Unsupported(
                "a private key: configure the public key only",
            ));
        }
        _ => {
            return Err(KeyError::Unsupported(
                "a PEM block other than PUBLIC KEY or RSA PUBLIC KEY",
            ));
        }
    }
    let wrong_algorithm = |_| KeyError::WrongAlgorithm(algorithm.as_str());
    match algorithm {
        JwtAlgorithm::Rs256 => {
            let key = DecodingKey::from_rsa_pem(text.as_bytes()).map_err(wrong_algorithm)?;
            let DecodingKeyKind::SecretOrDer(pkcs1) = key.kind() else {
                return Err(KeyError::Malformed("RSA public key"));
            };
            let (n, e) = rsa_components(pkcs1)?;
            VerifyingKey::rsa(&n, &e)
        }
        JwtAlgorithm::Es256 => {
            VerifyingKey::p256(DecodingKey::from_ec_pem(text.as_bytes()).map_err(wrong_algorithm)?)
        }
        JwtAlgorithm::Hs256 => Err(KeyError::Unsupported("a PEM file for HS256")),
    }
}

/// The modulus and exponent of a PKCS#1 `RSAPublicKey` (RFC 8017 §A.1.1), big-endian.
fn rsa_components(pkcs1: &[u8]) -> Result<(Vec<u8>, Vec<u8>), KeyError> {
    use simple_asn1::ASN1Block;
    let malformed = || KeyError::Malformed("RSA public key (PKCS#1)");
    let blocks = simple_asn1::from_der(pkcs1).map_err(|_| malformed())?;
    let [ASN1Block::Sequence(_, fields)] = blocks.as_slice() else {
        return Err(malformed());
    };
    let [ASN1Block::Integer(_, n), ASN1Block::Integer(_, e)] = fields.as_slice() else {
        return Err(malformed());
    };
    // A negative integer has no unsigned value: refused.
    let unsigned = |value: &simple_asn1::BigInt| {
        value
            .to_biguint()
            .map(|value| value.to_bytes_be())
            .ok_or_else(malformed)
    };
    let (n, e) = (unsigned(n)?, unsigned(e)?);
    Ok((n, e))
}

/// A JWKS document (RFC 7517 §5): `{"keys": [...]}`.
pub(super) fn parse_jwks(text: &str, algorithm: JwtAlgorithm) -> Result<KeySet, KeyError> {
    let Ok(Value::Object(mut document)) = serde_json::from_str::<Value>(text) else {
        return Err(KeyError::Malformed("JWKS (not a JSON object)"));
    };
    let Some(Value::Array(entries)) = document.remove("keys") else {
        return Err(KeyError::Malformed("JWKS (no \"keys\" array)"));
    };
    let mut keys: Vec<(Option<String>, VerifyingKey)> = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        // Entries are read one by one, so one the library cannot read is skipped alone.
        let jwk = match serde_json::from_value::<Jwk>(entry) {
            Ok(jwk) => jwk,
            Err(_) => {
                tracing::warn!(index, "JWKS entry is not a readable JWK; skipped");
                continue;
            }
        };
        if !fits(&jwk, algorithm) {
            continue;
        }
        let kid = jwk.common.key_id.clone();
        match jwk_key(&jwk, algorithm) {
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
fn fits(jwk: &Jwk, algorithm: JwtAlgorithm) -> bool {
    let (kty_fits, alg) = match (&jwk.algorithm, algorithm) {
        (AlgorithmParameters::RSA(_), JwtAlgorithm::Rs256) => (true, KeyAlgorithm::RS256),
        (AlgorithmParameters::EllipticCurve(ec), JwtAlgorithm::Es256) => {
            (ec.curve == EllipticCurve::P256, KeyAlgorithm::ES256)
        }
        _ => return false,
    };
    let common = &jwk.common;
    let alg_fits = common.key_algorithm.is_none_or(|declared| declared == alg);
    let use_fits = common
        .public_key_use
        .as_ref()
        .is_none_or(|usage| *usage == PublicKeyUse::Signature);
    let ops_fit = common
        .key_operations
        .as_ref()
        .is_none_or(|ops| ops.contains(&KeyOperations::Verify));
    kty_fits && alg_fits && use_fits && ops_fit
}

fn jwk_key(jwk: &Jwk, algorithm: JwtAlgorithm) -> Result<VerifyingKey, KeyError> {
    let key = DecodingKey::from_jwk(jwk).map_err(|_| KeyError::Malformed("JWK members"))?;
    match (algorithm, key.kind()) {
        (JwtAlgorithm::Rs256, DecodingKeyKind::RsaModulusExponent { n, e }) => {
            VerifyingKey::rsa(n, e)
        }
        (JwtAlgorithm::Es256, _) => VerifyingKey::p256(key),
        _ => Err(KeyError::WrongAlgorithm(algorithm.as_str())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::testing::{RSA_A_PKCS1_PEM, RSA_A_PUBLIC_PEM, TestKey};

    #[test]
    fn spki_and_pkcs1_rsa_keys_read_alike_and_odd_der_is_refused() {
        let spki = parse_pem(RSA_A_PUBLIC_PEM, JwtAlgorithm::Rs256).unwrap();
        let pkcs1 = parse_pem(RSA_A_PKCS1_PEM, JwtAlgorithm::Rs256).unwrap();
        assert_eq!(format!("{spki:?}"), format!("{pkcs1:?}"));
        assert_eq!(format!("{spki:?}"), "VerifyingKey::Rsa(2048 bits)");
        let der = pem::parse(RSA_A_PKCS1_PEM).unwrap().into_contents();
        assert!(rsa_components(&der).is_ok());
        assert!(rsa_components(&der[..der.len() - 1]).is_err(), "truncated");
        let mut trailing = der.clone();
        trailing.push(0);
        assert!(rsa_components(&trailing).is_err(), "trailing bytes");
        assert!(rsa_components(&[]).is_err());
        assert!(
            rsa_components(&[0x30, 0x06, 0x02, 0x01, 0x80, 0x02, 0x01, 0x03]).is_err(),
            "negative modulus"
        );
    }

    #[test]
    fn small_rsa_keys_and_bad_points_are_refused() {
        assert!(matches!(
            VerifyingKey::rsa(&[0xC5; 128], &[1, 0, 1]),
            Err(KeyError::RsaKeySize)
        ));
        assert!(VerifyingKey::rsa(&[0xC5; 256], &[1, 0, 1]).is_ok());
        assert!(
            VerifyingKey::rsa(&[0xC5; 256], &[0, 0]).is_err(),
            "no exponent"
        );
        assert!(
            VerifyingKey::p256(DecodingKey::from_ec_der(&[0x02; 33])).is_err(),
            "compressed points are not taken"
        );
        let pem = TestKey::generate_ec().public_pem();
        assert!(parse_pem(&pem, JwtAlgorithm::Es256).is_ok());
        assert!(matches!(
            parse_pem(&pem, JwtAlgorithm::Rs256),
            Err(KeyError::WrongAlgorithm("RS256"))
        ));
        assert!(parse_pem("no pem here", JwtAlgorithm::Rs256).is_err());
        let certificate = "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            parse_pem(certificate, JwtAlgorithm::Rs256),
            Err(KeyError::Unsupported(_))
        ));
    }
}
