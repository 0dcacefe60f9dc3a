//! Gateway configuration. Every field has a documented unit and default; tests build this struct
//! directly instead of mutating the environment.

use std::time::Duration;

use agent_runtime::protocol::error::{DEFAULT_COMMAND_LEASE_TTL_MS, DEFAULT_MAX_REQUEST_BYTES};

use crate::admission::AdmissionLimits;

#[derive(Clone, Debug, PartialEq)]
pub struct GatewayConfig {
    /// Prefix of every route. Default `/v1/agent`; normalised to one leading `/` and no trailing `/`.
    pub base_path: String,
    /// Silence after which an SSE stream sends `: heartbeat`. Default 15 s.
    pub heartbeat_interval: Duration,
    /// How long an unsealed command claim holds before another attempt may take it over.
    /// Milliseconds, default 30 000.
    pub command_lease_ttl_ms: u64,
    /// Largest accepted command body in bytes. Default 1 MiB (1 048 576).
    pub max_request_bytes: usize,
    /// Per-tenant admission limits (8 concurrent, 64 queued, 600 per minute).
    pub admission: AdmissionLimits,
    /// Origins allowed by CORS (`*` allows any). Default: none, so no CORS headers are sent.
    pub cors_allowed_origins: Vec<String>,
    /// Sealed commands without a result are abandoned after this long (decision S5). Default 10 min.
    pub abandon_sealed_after: Duration,
    /// How long in-flight commands may take to finish on shutdown. Default 10 s.
    pub shutdown_grace: Duration,
    /// Serve the web console at `/` and `/console/…` (static files, no authentication). Default
    /// true.
    pub console: bool,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            base_path: "/v1/agent".to_owned(),
            heartbeat_interval: Duration::from_secs(15),
            command_lease_ttl_ms: DEFAULT_COMMAND_LEASE_TTL_MS,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            admission: AdmissionLimits::default(),
            cors_allowed_origins: Vec::new(),
            abandon_sealed_after: Duration::from_secs(600),
            shutdown_grace: Duration::from_secs(10),
            console: true,
        }
    }
}

/// Strips leading and trailing `/` and adds a single leading `/` (an empty base path is `/`-less
/// root, i.e. routes start at `/healthz`).
pub fn normalize_base_path(raw: &str) -> String {
    let trimmed = raw.trim_matches('/');
    if trimmed.is_empty() {
        String::new()
    } else {
        format!("/{trimmed}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_path_is_normalised() {
        assert_eq!(normalize_base_path("/v1/agent/"), "/v1/agent");
        assert_eq!(normalize_base_path("v1/agent"), "/v1/agent");
        assert_eq!(normalize_base_path("///api//"), "/api");
        assert_eq!(normalize_base_path("/"), "");
    }
}
