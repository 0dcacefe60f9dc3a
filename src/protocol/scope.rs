//! The authorisation scopes commands require (docs/protocol.md §2.1). A module of its own so that
//! error messages can name a scope without depending on the principal.

use serde::{Deserialize, Serialize};

/// An authorisation scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Scope {
    #[serde(rename = "session:create")]
    SessionCreate,
    #[serde(rename = "session:read")]
    SessionRead,
    #[serde(rename = "session:write")]
    SessionWrite,
    #[serde(rename = "permission:resolve")]
    PermissionResolve,
    /// Satisfies every scope.
    #[serde(rename = "session:admin")]
    SessionAdmin,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::SessionCreate,
        Scope::SessionRead,
        Scope::SessionWrite,
        Scope::PermissionResolve,
        Scope::SessionAdmin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::SessionCreate => "session:create",
            Scope::SessionRead => "session:read",
            Scope::SessionWrite => "session:write",
            Scope::PermissionResolve => "permission:resolve",
            Scope::SessionAdmin => "session:admin",
        }
    }

    pub fn parse(value: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == value)
    }
}
