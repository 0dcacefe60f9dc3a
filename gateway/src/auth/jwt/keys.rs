//! Verification keys: what a PEM file or a JWKS document turns into, each pinned to one
//! algorithm. `Debug` shows the kind and size of a key, never its bytes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::hmac;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents,
};

use super::JwtAlgorithm;
use super::der::{SpkiKey, parse_rsa_public_key, parse_spki};
pub use super::key_error::KeyError;

/// How a key file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyFormat {
    Pem,
    Jwks,
}

/// One key, usable with exactly one algorithm.
pub(super) enum VerifyingKey {
    Hmac(hmac::Key),
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// The uncompressed point `04 || x || y`.
    EcP256(Vec<u8>),
}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifyingKey::Hmac(_) => f.write_str("VerifyingKey::Hmac(<redacted>)"),
            VerifyingKey::Rsa { n, .. } => write!(f, "VerifyingKey::Rsa({} bits)", n.len() * 8),
            VerifyingKey::EcP256(_) => f.write_str("VerifyingKey::EcP256"),
        }
    }
}

impl VerifyingKey {
    pub fn hmac(secret: &[u8]) -> Self {
        VerifyingKey::Hmac(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// An RSA key from its modulus and exponent (big-endian).
    pub fn rsa(n: &[u8], e: &[u8]) -> Result<Self, KeyError> {
        let n = strip_leading_zeros(n);
        if !(256..=1024).contains(&n.len()) {
            return Err(KeyError::RsaKeySize);
        }
        let e = strip_leading_zeros(e);
        if e.is_empty() {
            return Err(KeyError::Malformed("RSA public exponent"));
        }
        Ok(VerifyingKey::Rsa {
            n: n.to_vec(),
            e: e.to_vec(),
        })
    }

    /// A P-256 key from its uncompressed point.
    pub fn p256(point: Vec<u8>) -> Result<Self, KeyError> {
        if point.len() != 65 || point[0] != 0x04 {
            return Err(KeyError::Malformed("P-256 point (uncompressed, 65 bytes)"));
        }
        Ok(VerifyingKey::EcP256(point))
    }

    pub fn algorithm(&self) -> JwtAlgorithm {
        match self {
            VerifyingKey::Hmac(_) => JwtAlgorithm::Hs256,
            VerifyingKey::Rsa { .. } => JwtAlgorithm::Rs256,
            VerifyingKey::EcP256(_) => JwtAlgorithm::Es256,
        }
    }

    /// Whether `signature` is a valid signature of `message` (constant-time for HMAC).
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match self {
            VerifyingKey::Hmac(key) => hmac::verify(key, message, signature).is_ok(),
            VerifyingKey::Rsa { n, e } => RsaPublicKeyComponents { n, e }
                .verify(&RSA_PKCS1_2048_8192_SHA256, message, signature)
                .is_ok(),
            VerifyingKey::EcP256(point) => {
                ring::signature::UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
        }
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
    let (label, der) = pem_block(text)?;
    let key = match label {
        "PUBLIC KEY" => match parse_spki(&der)? {
            SpkiKey::Rsa(pkcs1) => {
                let (n, e) = parse_rsa_public_key(&pkcs1)?;
                VerifyingKey::rsa(&n, &e)?
            }
            SpkiKey::P256(point) => VerifyingKey::p256(point)?,
        },
        "RSA PUBLIC KEY" => {
            let (n, e) = parse_rsa_public_key(&der)?;
            VerifyingKey::rsa(&n, &e)?
        }
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
    };
    if key.algorithm() != algorithm {
        return Err(KeyError::WrongAlgorithm(algorithm.as_str()));
    }
    Ok(key)
}

/// The label and DER contents of the first PEM block of `text`.
pub(crate) fn pem_block(text: &str) -> Result<(&str, Vec<u8>), KeyError> {
    let malformed = || KeyError::Malformed("PEM (no BEGIN/END block)");
    let begin = text.find("-----BEGIN ").ok_or_else(malformed)?;
    let after_begin = &text[begin + "-----BEGIN ".len()..];
    let label_end = after_begin.find("-----").ok_or_else(malformed)?;
    let label = &after_begin[..label_end];
    let body = &after_begin[label_end + "-----".len()..];
    let end_marker = format!("-----END {label}-----");
    let body_end = body.find(&end_marker).ok_or_else(malformed)?;
    let base64: String = body[..body_end]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let der = STANDARD
        .decode(base64)
        .map_err(|_| KeyError::Malformed("PEM base64"))?;
    Ok((label, der))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::testing::{RSA_A_PUBLIC_PEM, TestKey};

    #[test]
    fn truncated_padded_or_odd_der_is_refused() {
        let (_, der) = pem_block(RSA_A_PUBLIC_PEM).unwrap();
        assert!(matches!(parse_spki(&der), Ok(SpkiKey::Rsa(_))));
        assert!(parse_spki(&der[..der.len() - 1]).is_err(), "truncated");
        let mut trailing = der.clone();
        trailing.push(0);
        assert!(parse_spki(&trailing).is_err(), "trailing bytes");
        let mut indefinite = der.clone();
        indefinite[1] = 0x80;
        assert!(parse_spki(&indefinite).is_err(), "indefinite length");
        assert!(parse_spki(&[]).is_err());
        assert!(
            parse_rsa_public_key(&[0x30, 0x03, 0x02, 0x01, 0x80]).is_err(),
            "negative"
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
            VerifyingKey::p256(vec![0x02; 33]).is_err(),
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
