//! Identity headers set by a trusted reverse proxy (`[auth] mode = "trusted_headers"`).
//!
//! Nothing is verified here: whoever can reach the server directly can claim any tenant. That is
//! why it is off by default and logs a warning at start-up. The proxy must authenticate the caller
//! and overwrite (not append to) these headers on every request; a header that arrives twice is
//! refused, since it usually means a client-supplied value slipped through. The principal then
//! goes through the same §4.3 validation as every other adapter; unknown scopes are ignored.

use agent_runtime::protocol::{Principal, ProtocolError};
use axum::http::{HeaderMap, HeaderName};

use super::{Authenticator, known_scopes};

/// The header names. Defaults: `x-auth-tenant`, `x-auth-subject`, `x-auth-scopes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedHeadersConfig {
    pub tenant_header: String,
    pub subject_header: String,
    /// Scopes separated by spaces or commas; a missing header means no scope.
    pub scopes_header: String,
}

impl Default for TrustedHeadersConfig {
    fn default() -> Self {
        Self {
            tenant_header: "x-auth-tenant".to_owned(),
            subject_header: "x-auth-subject".to_owned(),
            scopes_header: "x-auth-scopes".to_owned(),
        }
    }
}

#[derive(Debug)]
pub struct TrustedHeaders {
    tenant: HeaderName,
    subject: HeaderName,
    scopes: HeaderName,
}

impl TrustedHeaders {
    /// Checks the header names and warns that identity is not verified by this process.
    pub fn new(config: &TrustedHeadersConfig) -> Result<Self, String> {
        let name = |setting: &str, value: &str| {
            HeaderName::from_bytes(value.to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("{setting} {value:?} is not a valid header name"))
        };
        let tenant = name("tenant_header", &config.tenant_header)?;
        let subject = name("subject_header", &config.subject_header)?;
        let scopes = name("scopes_header", &config.scopes_header)?;
        if tenant == subject || tenant == scopes || subject == scopes {
            return Err("the three header names must differ".to_owned());
        }
        if [&tenant, &subject, &scopes].contains(&&axum::http::header::AUTHORIZATION) {
            return Err("authorization cannot carry an identity field".to_owned());
        }
        tracing::warn!(
            tenant_header = %tenant,
            subject_header = %subject,
            scopes_header = %scopes,
            "AUTHENTICATION IS DELEGATED: [auth] mode = \"trusted_headers\" takes the tenant, \
             subject and scopes from request headers WITHOUT VERIFYING THEM. Only run this \
             behind a reverse proxy that authenticates every request and overwrites these \
             headers, and never expose this port to anything else"
        );
        Ok(Self {
            tenant,
            subject,
            scopes,
        })
    }
}

impl Authenticator for TrustedHeaders {
    fn cheap_to_verify(&self) -> bool {
        true
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<Option<Principal>, ProtocolError> {
        let (Some(tenant), Some(subject)) = (
            single(headers, &self.tenant),
            single(headers, &self.subject),
        ) else {
            tracing::debug!("trusted identity headers missing, repeated or not UTF-8");
            return Ok(None);
        };
        let scopes = match headers.get_all(&self.scopes).iter().count() {
            0 => Vec::new(),
            1 => match single(headers, &self.scopes) {
                Some(list) => known_scopes(
                    list.split(|c: char| c == ',' || c.is_ascii_whitespace())
                        .filter(|name| !name.is_empty()),
                ),
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        let principal = Principal {
            tenant_id: tenant.to_owned(),
            subject: subject.to_owned(),
            scopes,
        };
        if principal.validate().is_err() {
            tracing::debug!("trusted identity headers fail the principal rules");
            return Ok(None);
        }
        Ok(Some(principal))
    }
}

/// The value of a header that is present exactly once, as UTF-8.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    std::str::from_utf8(value.as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use agent_runtime::protocol::Scope;
    use axum::http::HeaderValue;

    use super::*;

    fn adapter() -> TrustedHeaders {
        TrustedHeaders::new(&TrustedHeadersConfig::default()).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        headers
    }

    #[test]
    fn headers_become_the_principal_and_unknown_scopes_are_ignored() {
        let principal = adapter()
            .authenticate(&headers(&[
                ("x-auth-tenant", "acme"),
                ("x-auth-subject", "alice@example.com"),
                ("x-auth-scopes", "session:read, openid session:create"),
            ]))
            .unwrap()
            .unwrap();
        assert_eq!(principal.tenant_id, "acme");
        assert_eq!(principal.subject, "alice@example.com");
        assert_eq!(
            principal.scopes,
            vec![Scope::SessionCreate, Scope::SessionRead]
        );
    }

    #[test]
    fn missing_repeated_or_invalid_identity_headers_are_not_authenticated() {
        let cases: [&[(&str, &str)]; 5] = [
            &[("x-auth-subject", "alice")],
            &[("x-auth-tenant", "acme")],
            &[
                ("x-auth-tenant", "acme"),
                ("x-auth-tenant", "other"),
                ("x-auth-subject", "alice"),
            ],
            &[("x-auth-tenant", "../etc"), ("x-auth-subject", "alice")],
            &[
                ("x-auth-tenant", "acme"),
                ("x-auth-subject", "alice"),
                ("x-auth-scopes", "session:read"),
                ("x-auth-scopes", "session:admin"),
            ],
        ];
        for case in cases {
            assert_eq!(
                adapter().authenticate(&headers(case)).unwrap(),
                None,
                "{case:?}"
            );
        }
    }

    #[test]
    fn header_names_are_configurable_and_checked() {
        let config = TrustedHeadersConfig {
            tenant_header: "X-Org".to_owned(),
            ..TrustedHeadersConfig::default()
        };
        let principal = TrustedHeaders::new(&config)
            .unwrap()
            .authenticate(&headers(&[("x-org", "acme"), ("x-auth-subject", "bob")]))
            .unwrap()
            .unwrap();
        assert_eq!(principal.tenant_id, "acme");
        assert!(principal.scopes.is_empty());
        let clash = TrustedHeadersConfig {
            subject_header: "x-auth-tenant".to_owned(),
            ..TrustedHeadersConfig::default()
        };
        assert!(TrustedHeaders::new(&clash).is_err());
        let invalid = TrustedHeadersConfig {
            scopes_header: "bad header".to_owned(),
            ..TrustedHeadersConfig::default()
        };
        assert!(TrustedHeaders::new(&invalid).is_err());
    }
}
