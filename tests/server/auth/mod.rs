//! Authentication, scopes and principals.

mod catalogue;
mod identity;
mod independent_tokens;
