//! Authentication, scopes and principals.

mod catalogue;
mod identity;
