//! Authentication: turns a request's headers into a validated principal (docs/protocol.md §4.3).
//!
//! Three adapters, one selected by configuration ([`AuthMode`]):
//! - [`StaticTokens`]: bearer tokens configured as SHA-256 hashes;
//! - [`JwtAuthenticator`]: signed JWTs (HS256, or RS256 / ES256 with keys from a PEM or JWKS file);
//! - [`TrustedHeaders`]: identity headers set by a trusted reverse proxy (off by default).
//!
//! Every failure is the same `401 UNAUTHENTICATED "Authentication required"` for the caller; why
//! a credential was refused goes to a debug log line, and the credential itself never appears in a
//! log, an error or a `Debug` output.

pub mod failures;
pub mod jwt;
mod passthrough;
mod static_tokens;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::sync::Arc;

use agent_runtime::clock::SharedClock;
use agent_runtime::protocol::{Principal, ProtocolError, Scope};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;

pub use jwt::{JwtAlgorithm, JwtAuthenticator, JwtConfig, JwtKeySource, SecretSource};
pub use passthrough::{TrustedHeaders, TrustedHeadersConfig};
pub use static_tokens::{StaticTokens, TokenGrant, token_sha256};

/// Decides who is calling. `Ok(None)` means "not authenticated" (401).
pub trait Authenticator: Send + Sync + std::fmt::Debug {
    fn authenticate(&self, headers: &HeaderMap) -> Result<Option<Principal>, ProtocolError>;

    /// When the credential in `headers` stops being valid (Unix milliseconds), for credentials
    /// that expire (a JWT's `exp`): an SSE stream opened with it ends then, so a stream never
    /// outlives its token (reliability SSE-15). `None`: it does not expire by itself.
    fn credential_expiry_ms(&self, _headers: &HeaderMap) -> Option<u64> {
        None
    }

    /// The version of the keys credentials are verified with, for keys that change while the
    /// server runs (a JWKS or PEM file that is re-read): an SSE stream re-checks its credential
    /// when it changes, so removing a signing key ends the streams its tokens opened (catalogue
    /// AUTH-13). `None`: the keys never change at run time.
    fn key_generation(&self) -> Option<u64> {
        None
    }

    /// Whether checking a credential costs next to nothing (a hash lookup), so that a client
    /// whose failure budget is spent may still have its credentials checked
    /// ([`failures::FailureLimiter`]). A signature check is not cheap.
    fn cheap_to_verify(&self) -> bool {
        false
    }
}

/// Which adapter authenticates requests. The default is static bearer tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AuthMode {
    /// `[[auth.tokens]]`: bearer tokens stored as SHA-256 hashes.
    #[default]
    Static,
    /// Signed JWTs.
    Jwt(JwtConfig),
    /// Identity headers from a trusted reverse proxy; nothing is verified here.
    TrustedHeaders(TrustedHeadersConfig),
}

impl AuthMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            AuthMode::Static => "static",
            AuthMode::Jwt(_) => "jwt",
            AuthMode::TrustedHeaders(_) => "trusted_headers",
        }
    }
}

/// Why an authenticator could not be built (at start-up). Never contains key material.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("auth: {0}")]
    Jwt(#[from] jwt::JwtSetupError),
    #[error("auth.trusted_headers: {0}")]
    TrustedHeaders(String),
}

/// Builds the authenticator of `mode`; `tokens` are the static grants (used by `Static` only).
pub fn build_authenticator(
    mode: &AuthMode,
    tokens: Vec<TokenGrant>,
    clock: SharedClock,
) -> Result<Arc<dyn Authenticator>, AuthSetupError> {
    match mode {
        AuthMode::Static => Ok(Arc::new(StaticTokens::new(tokens))),
        AuthMode::Jwt(config) => Ok(Arc::new(JwtAuthenticator::new(config.clone(), clock)?)),
        AuthMode::TrustedHeaders(config) => Ok(Arc::new(
            TrustedHeaders::new(config).map_err(AuthSetupError::TrustedHeaders)?,
        )),
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive). A request
/// with two `Authorization` headers has none: a proxy in front may have checked the other one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let value = value.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

/// The protocol scopes among `names`, each once, in the protocol's order.
///
/// Unknown names are **ignored**, not refused: identity providers put scopes of other APIs
/// (`openid`, `profile`, …) into the same claim, and ignoring a name can never grant more.
pub(crate) fn known_scopes<'a>(names: impl Iterator<Item = &'a str>) -> Vec<Scope> {
    let mut found = [false; Scope::ALL.len()];
    let mut unknown = 0usize;
    for name in names {
        match Scope::ALL.iter().position(|scope| scope.as_str() == name) {
            Some(index) => found[index] = true,
            None => unknown += 1,
        }
    }
    if unknown > 0 {
        tracing::debug!(unknown, "ignored scope names that are not protocol scopes");
    }
    Scope::ALL
        .into_iter()
        .zip(found)
        .filter_map(|(scope, found)| found.then_some(scope))
        .collect()
}
