//! Authentication, scopes and principals.

mod catalogue;
mod identity;
mod independent_tokens;

use std::path::Path;

use crate::support::test_config;
use agent_runtime_cli::config::{ServeConfig, StoreKind};
use agent_runtime_gateway::AuthMode;
use agent_runtime_gateway::auth::JwtConfig;
use serde_json::{Value, json};

const ISSUER: &str = "https://id.example.test/";
const AUDIENCE: &str = "agent-runtime";

/// A server that authenticates with `jwt`, issuer and audience set to the test ones.
fn jwt_config(dir: &Path, mut jwt: JwtConfig) -> ServeConfig {
    jwt.issuer = Some(ISSUER.to_owned());
    jwt.audience = Some(AUDIENCE.to_owned());
    ServeConfig {
        tokens: Vec::new(),
        auth_mode: AuthMode::Jwt(jwt),
        ..test_config(StoreKind::Memory, dir)
    }
}

/// The exact body of every authentication failure (docs/protocol.md §4.3).
fn generic_401() -> Value {
    json!({
        "protocolVersion": 1,
        "commandId": "authentication",
        "ok": false,
        "error": {"code": "UNAUTHENTICATED", "message": "Authentication required", "retryable": false},
    })
}
