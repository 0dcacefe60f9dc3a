//! JWT bearer tokens (RFC 7519, compact JWS), read and verified by `jsonwebtoken` on a `ring`
//! backend ([`crypto`]); this module holds the policy around it.
//!
//! The rules, after RFC 8725:
//! - the algorithm is fixed by configuration: the token's `alg` must equal it, so `none` and
//!   HS/RS confusion are refused before any signature check; a token with `crit` is refused;
//! - HS256 uses a shared secret read from an environment variable or a file at start-up;
//!   RS256 / ES256 use a public key from a PEM file or a JWKS file (keys matched by `kid`, their
//!   `kty`, `crv`, `alg` and `use` must fit). The key file is re-read when it changes; a broken new
//!   file keeps the last good keys. `jku`, `x5u`, `jwk` and `x5c` headers are never used;
//! - `exp` is required; `nbf` and `iat` are honoured; all three with a leeway (default 60 s);
//!   `iss` and `aud` are checked when configured (`aud` may be a string or an array);
//! - the tenant, subject and scopes come from configurable claims, then go through the principal
//!   validation of docs/protocol.md §4.3. Unknown scope names are ignored (see
//!   [`super::known_scopes`]).
//!
//! Every failure answers the generic 401; the reason goes to a debug log line, never the token.

mod claims;
mod crypto;
mod key_error;
mod key_file;
mod keys;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::clock::SharedClock;
use agent_runtime::protocol::{Principal, ProtocolError};
use axum::http::HeaderMap;

pub use self::key_error::KeyError;
use self::key_file::KeyFile;
use self::keys::{KeyFormat, KeySet, VerifyingKey};
use super::{Authenticator, bearer_token};

/// The signature algorithm every token must use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JwtAlgorithm {
    /// HMAC with SHA-256 and a shared secret.
    Hs256,
    /// RSASSA-PKCS1-v1_5 with SHA-256 (keys of 2048 to 8192 bits).
    Rs256,
    /// ECDSA on P-256 with SHA-256.
    Es256,
}

impl JwtAlgorithm {
    fn library_algorithm(self) -> jsonwebtoken::Algorithm {
        match self {
            JwtAlgorithm::Hs256 => jsonwebtoken::Algorithm::HS256,
            JwtAlgorithm::Rs256 => jsonwebtoken::Algorithm::RS256,
            JwtAlgorithm::Es256 => jsonwebtoken::Algorithm::ES256,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JwtAlgorithm::Hs256 => "HS256",
            JwtAlgorithm::Rs256 => "RS256",
            JwtAlgorithm::Es256 => "ES256",
        }
    }

    /// `HS256`, `RS256` or `ES256` (exactly; `none` is not an algorithm here).
    pub fn parse(value: &str) -> Option<JwtAlgorithm> {
        [
            JwtAlgorithm::Hs256,
            JwtAlgorithm::Rs256,
            JwtAlgorithm::Es256,
        ]
        .into_iter()
        .find(|algorithm| algorithm.as_str() == value)
    }
}

/// Where the HS256 secret comes from: names only, the secret itself is read at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// The name of an environment variable holding the secret.
    Env(String),
    /// A file holding the secret (trailing line breaks are ignored).
    File(PathBuf),
}

/// Where the verification keys come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwtKeySource {
    /// HS256: the shared secret.
    Secret(SecretSource),
    /// RS256 / ES256: one public key (`PUBLIC KEY`, or `RSA PUBLIC KEY` for RS256) in a PEM file.
    PemFile(PathBuf),
    /// RS256 / ES256: a JWKS document; a token's `kid` selects the key.
    JwksFile(PathBuf),
}

/// The JWT adapter's configuration. It holds no secret (only where to find one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtConfig {
    pub algorithm: JwtAlgorithm,
    pub keys: JwtKeySource,
    /// Required `iss` value. Default: not checked.
    pub issuer: Option<String>,
    /// Required entry of `aud`. Default: not checked.
    pub audience: Option<String>,
    /// Tolerated clock skew for `exp`, `nbf` and `iat`, at most [`MAX_LEEWAY_SECS`]. Default 60 s.
    pub leeway_secs: u64,
    /// Required `typ` header (e.g. `at+jwt`; compared case-insensitively, `application/` prefix
    /// optional). Default: not checked.
    pub required_typ: Option<String>,
    /// Claim holding the tenant id. Default `tenant`.
    pub tenant_claim: String,
    /// Claim holding the subject. Default `sub`.
    pub subject_claim: String,
    /// Claim holding the scopes: a space-separated string or an array. Default `scope`.
    pub scopes_claim: String,
    /// How often a key file is checked for changes (mtime, size, inode). Default 5 s.
    pub key_refresh: Duration,
}

/// Longer bearer values are refused before any decoding (a cheap bound on the work an
/// unauthenticated caller can cause).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The largest accepted leeway (RFC 8725 advice: keep clock-skew tolerance small).
pub const MAX_LEEWAY_SECS: u64 = 60;

/// Shortest accepted HS256 secret: the hash size (RFC 7518 §3.2).
pub const MIN_SECRET_BYTES: usize = 32;

impl JwtConfig {
    /// A configuration with the defaults of every optional setting.
    pub fn new(algorithm: JwtAlgorithm, keys: JwtKeySource) -> Self {
        Self {
            algorithm,
            keys,
            issuer: None,
            audience: None,
            leeway_secs: MAX_LEEWAY_SECS,
            required_typ: None,
            tenant_claim: "tenant".to_owned(),
            subject_claim: "sub".to_owned(),
            scopes_claim: "scope".to_owned(),
            key_refresh: Duration::from_secs(5),
        }
    }
}

/// Why the JWT adapter could not start. Never contains a secret or key material.
#[derive(Debug, thiserror::Error)]
pub enum JwtSetupError {
    #[error(
        "{algorithm} needs {needs} (HS256: secret_env or secret_file; RS256/ES256: public_key_pem_file or jwks_file)"
    )]
    KeySourceMismatch {
        algorithm: &'static str,
        needs: &'static str,
    },
    #[error("the HS256 secret is unavailable: {0}")]
    SecretUnavailable(String),
    #[error("the HS256 secret must be at least {MIN_SECRET_BYTES} bytes")]
    SecretTooShort,
    #[error("jwt.leeway_secs must be at most {MAX_LEEWAY_SECS}")]
    LeewayTooLarge,
    #[error("jwt.{0} must not be empty")]
    EmptySetting(&'static str),
    #[error("{0}")]
    Keys(#[from] KeyError),
    #[error("{0}")]
    Crypto(&'static str),
}

/// Why a token was refused: for the debug log only (the caller always gets the generic 401).
/// Deliberately carries no value taken from the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    TooLong,
    Malformed,
    AlgorithmNotAllowed,
    CriticalHeader,
    WrongType,
    UnknownKey,
    BadSignature,
    MissingExpiry,
    Expired,
    NotYetValid,
    IssuedInTheFuture,
    WrongIssuer,
    WrongAudience,
    MissingTenant,
    MissingSubject,
    BadScopes,
    InvalidPrincipal,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Rejection::TooLong => "token too long",
            Rejection::Malformed => "not a well-formed compact JWS with a known alg",
            Rejection::AlgorithmNotAllowed => "alg is not the configured algorithm",
            Rejection::CriticalHeader => "crit header (no extension is understood)",
            Rejection::WrongType => "typ is not the required type",
            Rejection::UnknownKey => "no configured key matches the kid",
            Rejection::BadSignature => "signature does not verify",
            Rejection::MissingExpiry => "exp missing or not a number",
            Rejection::Expired => "expired",
            Rejection::NotYetValid => "nbf is in the future",
            Rejection::IssuedInTheFuture => "iat is in the future",
            Rejection::WrongIssuer => "iss missing or not the configured issuer",
            Rejection::WrongAudience => "aud missing or without the configured audience",
            Rejection::MissingTenant => "tenant claim missing or not a string",
            Rejection::MissingSubject => "subject claim missing or not a string",
            Rejection::BadScopes => "scopes claim neither a string nor an array of strings",
            Rejection::InvalidPrincipal => "tenant or subject fails the principal rules",
        };
        f.write_str(text)
    }
}

/// Verifies JWT bearer tokens.
pub struct JwtAuthenticator {
    config: JwtConfig,
    keys: Keys,
    clock: SharedClock,
    /// What the library checks: the algorithm and the signature. The claims are checked by
    /// [`claims`] against the server's clock, with their own refusal reasons.
    validation: jsonwebtoken::Validation,
}

enum Keys {
    /// The HS256 secret, read once at start-up.
    Fixed(Arc<KeySet>),
    /// A PEM or JWKS file, re-read when it changes.
    File(KeyFile),
}

impl std::fmt::Debug for JwtAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuthenticator")
            .field("algorithm", &self.config.algorithm)
            .field("issuer", &self.config.issuer)
            .field("audience", &self.config.audience)
            .finish_non_exhaustive()
    }
}

impl JwtAuthenticator {
    /// Reads the secret or the key file; start-up fails if they cannot be used.
    pub fn new(config: JwtConfig, clock: SharedClock) -> Result<Self, JwtSetupError> {
        validate(&config)?;
        crypto::install().map_err(JwtSetupError::Crypto)?;
        let keys = match (&config.keys, config.algorithm) {
            (JwtKeySource::Secret(source), JwtAlgorithm::Hs256) => {
                let secret = read_secret(source)?;
                if secret.len() < MIN_SECRET_BYTES {
                    return Err(JwtSetupError::SecretTooShort);
                }
                Keys::Fixed(Arc::new(KeySet::Single(VerifyingKey::hmac(&secret)?)))
            }
            (JwtKeySource::PemFile(path), JwtAlgorithm::Rs256 | JwtAlgorithm::Es256) => {
                Keys::File(KeyFile::open(
                    path.clone(),
                    KeyFormat::Pem,
                    config.algorithm,
                    config.key_refresh,
                    clock.clone(),
                )?)
            }
            (JwtKeySource::JwksFile(path), JwtAlgorithm::Rs256 | JwtAlgorithm::Es256) => {
                Keys::File(KeyFile::open(
                    path.clone(),
                    KeyFormat::Jwks,
                    config.algorithm,
                    config.key_refresh,
                    clock.clone(),
                )?)
            }
            (JwtKeySource::Secret(_), algorithm) => {
                return Err(JwtSetupError::KeySourceMismatch {
                    algorithm: algorithm.as_str(),
                    needs: "a public key",
                });
            }
            (JwtKeySource::PemFile(_) | JwtKeySource::JwksFile(_), algorithm) => {
                return Err(JwtSetupError::KeySourceMismatch {
                    algorithm: algorithm.as_str(),
                    needs: "a shared secret",
                });
            }
        };
        if config.issuer.is_none() || config.audience.is_none() {
            tracing::warn!(
                issuer_checked = config.issuer.is_some(),
                audience_checked = config.audience.is_some(),
                "JWT issuer or audience is not configured: tokens minted for other services by \
                 the same key holder will be accepted"
            );
        }
        let mut validation = jsonwebtoken::Validation::new(config.algorithm.library_algorithm());
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.leeway = 0;
        Ok(Self {
            config,
            keys,
            clock,
            validation,
        })
    }

    /// Verifies one token: signature, then claims, then the principal rules.
    pub fn verify(&self, token: &str) -> Result<Principal, Rejection> {
        self.verify_claims(token).map(|(principal, _)| principal)
    }

    /// [`Self::verify`], keeping the verified claims.
    fn verify_claims(
        &self,
        token: &str,
    ) -> Result<(Principal, serde_json::Map<String, serde_json::Value>), Rejection> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Rejection::TooLong);
        }
        // The header is read first, unverified, only to choose: the algorithm must be the
        // configured one and nothing critical may be asked of us before any key is touched.
        let header = jsonwebtoken::decode_header(token).map_err(|_| Rejection::Malformed)?;
        if header.alg != self.config.algorithm.library_algorithm() {
            return Err(Rejection::AlgorithmNotAllowed);
        }
        if header.crit.is_some() {
            return Err(Rejection::CriticalHeader);
        }
        if let Some(required) = &self.config.required_typ
            && !typ_matches(header.typ.as_deref(), required)
        {
            return Err(Rejection::WrongType);
        }
        let keys = match &self.keys {
            Keys::Fixed(keys) => Arc::clone(keys),
            Keys::File(file) => file.keys(),
        };
        let key = keys
            .find(header.kid.as_deref())
            .ok_or(Rejection::UnknownKey)?;
        debug_assert_eq!(key.algorithm(), self.config.algorithm);
        // The payload is parsed only once the signature holds.
        let verified = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            key.decoding_key(),
            &self.validation,
        )
        .map_err(|error| match error.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => Rejection::BadSignature,
            _ => Rejection::Malformed,
        })?;
        let claims = verified.claims;
        let principal = claims::principal(&claims, &self.config, self.clock.now_ms())?;
        Ok((principal, claims))
    }
}

impl Authenticator for JwtAuthenticator {
    fn authenticate(&self, headers: &HeaderMap) -> Result<Option<Principal>, ProtocolError> {
        let Some(token) = bearer_token(headers) else {
            return Ok(None);
        };
        match self.verify(token) {
            Ok(principal) => Ok(Some(principal)),
            Err(reason) => {
                tracing::debug!(%reason, "bearer token refused");
                Ok(None)
            }
        }
    }

    fn credential_expiry_ms(&self, headers: &HeaderMap) -> Option<u64> {
        let (_, claims) = self.verify_claims(bearer_token(headers)?).ok()?;
        claims::expiry_ms(&claims, self.config.leeway_secs)
    }

    fn key_generation(&self) -> Option<u64> {
        match &self.keys {
            Keys::Fixed(_) => None,
            Keys::File(file) => Some(file.generation()),
        }
    }
}

fn validate(config: &JwtConfig) -> Result<(), JwtSetupError> {
    if config.leeway_secs > MAX_LEEWAY_SECS {
        return Err(JwtSetupError::LeewayTooLarge);
    }
    let names = [
        ("tenant_claim", &config.tenant_claim),
        ("subject_claim", &config.subject_claim),
        ("scopes_claim", &config.scopes_claim),
    ];
    for (name, value) in names {
        if value.is_empty() {
            return Err(JwtSetupError::EmptySetting(name));
        }
    }
    Ok(())
}

fn read_secret(source: &SecretSource) -> Result<Vec<u8>, JwtSetupError> {
    let value = match source {
        SecretSource::Env(name) => std::env::var(name).map_err(|_| {
            JwtSetupError::SecretUnavailable(format!(
                "the environment variable {name} is not set (or not UTF-8)"
            ))
        })?,
        SecretSource::File(path) => std::fs::read_to_string(path).map_err(|error| {
            JwtSetupError::SecretUnavailable(format!("reading {}: {error}", path.display()))
        })?,
    };
    Ok(value.trim_end_matches(['\r', '\n']).as_bytes().to_vec())
}

/// `typ` values are media types: `at+jwt` and `application/at+jwt` are the same (RFC 7515 §4.1.9).
fn typ_matches(typ: Option<&str>, required: &str) -> bool {
    let normalize = |value: &str| {
        let lower = value.to_ascii_lowercase();
        match lower.strip_prefix("application/") {
            Some(rest) => rest.to_owned(),
            None => lower,
        }
    };
    typ.is_some_and(|typ| normalize(typ) == normalize(required))
}
