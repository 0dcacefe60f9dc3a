//! Static bearer tokens, configured as SHA-256 hashes: a leaked configuration file does not leak
//! usable tokens, and tokens never appear in logs or errors.

use std::collections::HashMap;

use agent_runtime::protocol::{Principal, ProtocolError, Scope};
use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

use super::{Authenticator, bearer_token};

/// One configured bearer token, stored as the hex SHA-256 of the token.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenGrant {
    pub token_sha256: String,
    pub tenant_id: String,
    pub subject: String,
    pub scopes: Vec<Scope>,
}

/// The hash stays out of `Debug` (a short hash is still a way to test guesses offline).
impl std::fmt::Debug for TokenGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenGrant")
            .field("tenant_id", &self.tenant_id)
            .field("subject", &self.subject)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl TokenGrant {
    /// A grant for a plain-text token (hashed here; the plain text is not kept).
    pub fn for_token(token: &str, tenant_id: &str, subject: &str, scopes: &[Scope]) -> Self {
        Self {
            token_sha256: token_sha256(token),
            tenant_id: tenant_id.to_owned(),
            subject: subject.to_owned(),
            scopes: scopes.to_vec(),
        }
    }
}

/// Lower-case hex SHA-256 of a token.
pub fn token_sha256(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Static bearer tokens from configuration.
#[derive(Clone, Default)]
pub struct StaticTokens {
    by_hash: HashMap<String, Principal>,
}

impl std::fmt::Debug for StaticTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticTokens")
            .field("tokens", &self.by_hash.len())
            .finish()
    }
}

impl StaticTokens {
    pub fn new(grants: impl IntoIterator<Item = TokenGrant>) -> Self {
        let by_hash = grants
            .into_iter()
            .map(|grant| {
                let principal = Principal {
                    tenant_id: grant.tenant_id,
                    subject: grant.subject,
                    scopes: grant.scopes,
                };
                (grant.token_sha256.to_ascii_lowercase(), principal)
            })
            .collect();
        Self { by_hash }
    }
}

impl Authenticator for StaticTokens {
    fn cheap_to_verify(&self) -> bool {
        true
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<Option<Principal>, ProtocolError> {
        let Some(token) = bearer_token(headers) else {
            return Ok(None);
        };
        Ok(self.by_hash.get(&token_sha256(token)).cloned())
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use axum::http::header::AUTHORIZATION;

    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_configured_token_maps_to_its_principal() {
        let tokens = StaticTokens::new([TokenGrant::for_token(
            "secret-a",
            "tenant-a",
            "user-a",
            &[Scope::SessionRead],
        )]);
        let principal = tokens
            .authenticate(&headers("Bearer secret-a"))
            .unwrap()
            .unwrap();
        assert_eq!(principal.tenant_id, "tenant-a");
        assert_eq!(principal.subject, "user-a");
        assert_eq!(principal.scopes, vec![Scope::SessionRead]);
        assert!(
            tokens
                .authenticate(&headers("bearer secret-a"))
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn unknown_missing_or_malformed_tokens_are_not_authenticated() {
        let tokens = StaticTokens::new([TokenGrant::for_token("secret-a", "t", "u", &[])]);
        assert!(
            tokens
                .authenticate(&headers("Bearer other"))
                .unwrap()
                .is_none()
        );
        assert!(
            tokens
                .authenticate(&headers("Basic secret-a"))
                .unwrap()
                .is_none()
        );
        assert!(tokens.authenticate(&headers("Bearer ")).unwrap().is_none());
        assert!(tokens.authenticate(&HeaderMap::new()).unwrap().is_none());
    }

    #[test]
    fn debug_output_never_shows_tokens_or_hashes() {
        let tokens = StaticTokens::new([TokenGrant::for_token("secret-a", "t", "u", &[])]);
        let shown = format!("{tokens:?}");
        assert!(!shown.contains("secret-a"));
        assert!(!shown.contains(&token_sha256("secret-a")));
        let grant = TokenGrant::for_token("secret-a", "t", "u", &[]);
        let shown = format!("{grant:?}");
        assert!(shown.contains("tenant_id"));
        assert!(!shown.contains(&token_sha256("secret-a")));
    }
}
