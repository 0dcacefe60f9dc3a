//! The crypto backend of `jsonwebtoken`: verification on `ring`, which the TLS stack already
//! builds, so no second crypto library (and no C build of aws-lc) enters the tree. Only HS256,
//! RS256 (2048 to 8192 bits) and ES256 verify; every other algorithm, and all signing, is refused:
//! the server never signs a token.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::signature::{self, Verifier};
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::hmac;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents, UnparsedPublicKey,
};

/// The provider every verification uses (installed once per process, see [`install`]).
static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: no_signer,
    verifier_factory: verifier,
    // Thumbprints and private-key helpers: nothing here calls them.
    key_utils: KeyUtils::new_unimplemented(),
};

/// Makes [`PROVIDER`] the process's `jsonwebtoken` backend. Idempotent; fails only if another
/// backend was installed first, which this build never does (no crypto feature is enabled).
pub(super) fn install() -> Result<(), &'static str> {
    match CryptoProvider::install_default(&PROVIDER) {
        Ok(()) => Ok(()),
        Err(installed) if std::ptr::eq(installed, &PROVIDER) => Ok(()),
        Err(_) => Err("another jsonwebtoken crypto provider is installed"),
    }
}

fn no_signer(_: &Algorithm, _: &EncodingKey) -> Result<Box<dyn JwtSigner>, Error> {
    Err(ErrorKind::UnsupportedAlgorithm.into())
}

fn verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    let algorithm = *algorithm;
    if !matches!(
        algorithm,
        Algorithm::HS256 | Algorithm::RS256 | Algorithm::ES256
    ) {
        return Err(ErrorKind::UnsupportedAlgorithm.into());
    }
    if key.family() != algorithm.family() {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    Ok(Box::new(RingVerifier {
        algorithm,
        key: key.clone(),
    }))
}

struct RingVerifier {
    algorithm: Algorithm,
    key: DecodingKey,
}

impl Verifier<Vec<u8>> for RingVerifier {
    fn verify(&self, message: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        let verified = match (self.algorithm, self.key.kind()) {
            // Constant-time comparison of the MAC.
            (Algorithm::HS256, DecodingKeyKind::SecretOrDer(secret)) => hmac::verify(
                &hmac::Key::new(hmac::HMAC_SHA256, secret),
                message,
                signature,
            )
            .is_ok(),
            (Algorithm::RS256, DecodingKeyKind::SecretOrDer(pkcs1)) => {
                UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, pkcs1)
                    .verify(message, signature)
                    .is_ok()
            }
            (Algorithm::RS256, DecodingKeyKind::RsaModulusExponent { n, e }) => {
                RsaPublicKeyComponents { n, e }
                    .verify(&RSA_PKCS1_2048_8192_SHA256, message, signature)
                    .is_ok()
            }
            // The uncompressed point; the signature is the fixed-size `r || s` of RFC 7518 §3.4.
            (Algorithm::ES256, DecodingKeyKind::SecretOrDer(point)) => {
                UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
            _ => false,
        };
        if verified {
            Ok(())
        } else {
            Err(signature::Error::new())
        }
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}
