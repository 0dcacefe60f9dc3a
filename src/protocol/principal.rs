//! Who is calling: the principal `authenticate` returns and the scopes commands require
//! (docs/protocol.md §2.1, §4.3).

use serde::{Deserialize, Serialize};

use super::error::ProtocolError;
pub use super::scope::Scope;
use crate::ids::is_valid_tenant_id;

/// An authenticated caller. Commands and events are isolated by `tenant_id`; approvals also by
/// `subject`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Principal {
    pub tenant_id: String,
    pub subject: String,
    pub scopes: Vec<Scope>,
}

impl Principal {
    pub fn new(tenant_id: impl Into<String>, subject: impl Into<String>, scopes: &[Scope]) -> Self {
        Principal {
            tenant_id: tenant_id.into(),
            subject: subject.into(),
            scopes: scopes.to_vec(),
        }
    }

    /// Builds a principal from the raw strings an authenticator produced; an unknown scope is an
    /// invalid principal.
    pub fn from_parts(
        tenant_id: impl Into<String>,
        subject: impl Into<String>,
        scopes: &[&str],
    ) -> Result<Principal, ProtocolError> {
        let scopes = scopes
            .iter()
            .map(|scope| Scope::parse(scope).ok_or_else(ProtocolError::invalid_principal))
            .collect::<Result<Vec<_>, _>>()?;
        let principal = Principal {
            tenant_id: tenant_id.into(),
            subject: subject.into(),
            scopes,
        };
        principal.validate()?;
        Ok(principal)
    }

    /// The §4.3 checks; failing any is `UNAUTHENTICATED` "Principal tenantId, subject, or scopes
    /// are invalid". Scopes are valid by construction of [`Scope`].
    pub fn validate(&self) -> Result<(), ProtocolError> {
        if is_valid_tenant_id(&self.tenant_id) && is_valid_subject(&self.subject) {
            Ok(())
        } else {
            Err(ProtocolError::invalid_principal())
        }
    }

    /// Whether the principal holds `scope`, directly or through `session:admin`.
    pub fn has_scope(&self, scope: Scope) -> bool {
        self.scopes
            .iter()
            .any(|&held| held == scope || held == Scope::SessionAdmin)
    }

    /// `FORBIDDEN` naming the first of `required` the principal lacks.
    pub fn require_scopes(&self, required: &[Scope]) -> Result<(), ProtocolError> {
        match required.iter().find(|&&scope| !self.has_scope(scope)) {
            Some(&missing) => Err(ProtocolError::forbidden(missing)),
            None => Ok(()),
        }
    }
}

/// 1..=256 UTF-16 code units, no leading or trailing whitespace, no C0 control and no DEL. C1
/// controls and other Unicode pass, as in the reference.
pub fn is_valid_subject(subject: &str) -> bool {
    let len = subject.encode_utf16().count();
    // JavaScript's `trim()` whitespace is Unicode White_Space plus the BOM.
    let is_js_whitespace = |c: char| c.is_whitespace() || c == '\u{FEFF}';
    (1..=256).contains(&len)
        && !subject.starts_with(is_js_whitespace)
        && !subject.ends_with(is_js_whitespace)
        && subject.chars().all(|c| c >= '\u{20}' && c != '\u{7F}')
}

#[cfg(test)]
mod tests;
