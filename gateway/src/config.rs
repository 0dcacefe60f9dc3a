//! Gateway configuration, the `[gateway]` section of the file: every field has a documented unit
//! and default; a duration's key ends in `_ms`. Tests build this struct directly instead of
//! mutating the environment.

use std::collections::HashMap;
use std::time::Duration;

use agent_runtime::config::{
    check_positive, check_positive_overrides, check_tenant_overrides, millis, option_millis,
};
use agent_runtime::protocol::error::{DEFAULT_COMMAND_LEASE_TTL_MS, DEFAULT_MAX_REQUEST_BYTES};
use serde::Deserialize;

use crate::admission::AdmissionLimits;

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// SHA-256 (hex) of each operator token of the admin API (`{base}/admin/…`); none turns the
    /// admin API off. Default: none.
    pub operator_token_sha256: Vec<String>,
    /// Prefix of every route. Default `/v1/agent`; normalised to one leading `/` and no trailing `/`.
    pub base_path: String,
    /// Silence after which an SSE stream sends `: heartbeat`. Default 15 s.
    #[serde(rename = "heartbeat_interval_ms", with = "millis")]
    pub heartbeat_interval: Duration,
    /// How long an unsealed command claim holds before another attempt may take it over.
    /// Milliseconds, default 30 000.
    pub command_lease_ttl_ms: u64,
    /// Largest accepted command body in bytes. Default 1 MiB (1 048 576).
    pub max_request_bytes: usize,
    /// Commands running at once per tenant. Default 8.
    pub max_concurrent_commands: usize,
    /// Commands waiting for a slot per tenant. Default 64.
    pub max_queued_commands: usize,
    /// Commands admitted per sliding minute per tenant. Default 600.
    pub commands_per_minute: usize,
    /// Open SSE connections per tenant; one more answers `503 OVERLOADED` before any stream byte.
    /// Default 100.
    pub max_sse_connections_per_tenant: usize,
    /// Open SSE connections of the whole process; one more answers `503 OVERLOADED`. Default
    /// 10 000.
    pub max_sse_connections: usize,
    /// Limits of named tenants that differ from the defaults above.
    pub tenant_limits: Vec<TenantLimits>,
    /// Largest request head (request line and headers) in bytes; a larger one gets `431`.
    /// Default 16 KiB (16 384).
    pub max_header_bytes: usize,
    /// A request head must arrive whole within this from its first byte (and a new connection
    /// must send one within this): slow senders are disconnected. Default 10 s.
    #[serde(rename = "header_read_timeout_ms", with = "millis")]
    pub header_read_timeout: Duration,
    /// A kept-alive connection with no request in flight is closed after this. Keep it longer
    /// than the idle timeout of any load balancer in front. Default 75 s.
    #[serde(rename = "idle_timeout_ms", with = "millis")]
    pub idle_timeout: Duration,
    /// Longest time a command request may take, body included. Past it the answer is a retryable
    /// `COMMAND_IN_PROGRESS` (or `408` while the body is still arriving); the command itself is
    /// not cut short. Never applied to SSE. Default 30 s.
    #[serde(rename = "request_timeout_ms", with = "millis")]
    pub request_timeout: Duration,
    /// A connection whose client has taken no response data for this long while some waits is
    /// closed: an SSE client that stopped reading (it resumes from its last event when it
    /// reconnects). Default 30 s.
    #[serde(rename = "write_timeout_ms", with = "millis")]
    pub write_timeout: Duration,
    /// Response bytes buffered per connection before the server waits for the client (the
    /// kernel's socket buffer comes on top). At least 8192 and `max_header_bytes`. Default 64 KiB.
    pub write_buffer_bytes: usize,
    /// On shutdown, how long `readyz` answers 503 while everything else is still served, so that
    /// load balancers stop sending traffic before the listener closes. Default 0.
    #[serde(rename = "shutdown_readiness_delay_ms", with = "millis")]
    pub shutdown_readiness_delay: Duration,
    /// Origins allowed by CORS (`*` allows any). Default: none, so no CORS headers are sent.
    pub cors_allowed_origins: Vec<String>,
    /// Hosts (without port) a request on a loopback connection may name besides the loopback
    /// names (`localhost`, `*.localhost`, loopback IPs); `*` allows any. Others get `421`, which
    /// stops DNS-rebinding pages. Connections on non-loopback addresses are not checked.
    /// Default: none.
    pub allowed_hosts: Vec<String>,
    /// Where clients reach this gateway (`https://agents.example.com`, without the base path),
    /// for the URLs it advertises: the A2A agent card's interface. Default: none, `http://` and
    /// the request's `Host`.
    pub public_url: Option<String>,
    /// Sealed commands without a result are abandoned after this long (decision S5). Default 10 min.
    #[serde(rename = "abandon_sealed_after_ms", with = "millis")]
    pub abandon_sealed_after: Duration,
    /// A command sealed this long ago whose effect is stored is completed with the result that
    /// effect answers (its gateway crashed before storing the result, or a write's outcome was
    /// unknown). Must exceed the longest dispatch (failover
    /// window plus the executor call timeout, 75 s by default). Default 2 min.
    #[serde(rename = "reconcile_sealed_after_ms", with = "millis")]
    pub reconcile_sealed_after: Duration,
    /// Receipts of finished commands (completed or abandoned) are deleted this long after they
    /// finished; a command id used again after that runs as a new command. Default 24 h.
    #[serde(rename = "command_retention_ms", with = "millis")]
    pub command_retention: Duration,
    /// Bytes of stored results (the JSON text of finished commands' answers) kept per tenant;
    /// past it the tenant's oldest receipts go before their retention ends, and their ids run as
    /// new commands. 0: no byte bound. Default 64 MiB.
    pub max_stored_result_bytes_per_tenant: u64,
    /// Events older than this are trimmed from every session's log (its newest is kept), on top
    /// of the retention by count; zero: by count only. Default 0.
    #[serde(rename = "event_retention_ms", with = "millis")]
    pub event_retention: Duration,
    /// Closed sessions, with everything they own, are purged this long after they were closed;
    /// zero keeps them. `tenant_limits` may set a tenant's own. Default 30 days.
    #[serde(rename = "closed_session_retention_ms", with = "millis")]
    pub closed_session_retention: Duration,
    /// Bytes a tenant's closed sessions may retain (records, events, durable journals,
    /// transcripts); past it its oldest closed sessions are purged before their retention ends.
    /// 0: no byte bound. `tenant_limits` may set a tenant's own. Default 256 MiB.
    pub max_closed_session_bytes_per_tenant: u64,
    /// How long in-flight commands may take to finish on shutdown. Default 10 s.
    #[serde(rename = "shutdown_grace_ms", with = "millis")]
    pub shutdown_grace: Duration,
    /// Serve the web console at `/` and `/console/…` (static files, no authentication). Default
    /// true.
    pub console: bool,
    /// Failed authentications a client address may make per minute (as a burst, refilled
    /// evenly); past that it gets `429 RATE_LIMITED` and its costly credentials are not checked
    /// until the budget refills. 0 turns the brake off. Default 60.
    pub auth_failures_per_minute: u32,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            operator_token_sha256: Vec::new(),
            base_path: "/v1/agent".to_owned(),
            heartbeat_interval: Duration::from_secs(15),
            command_lease_ttl_ms: DEFAULT_COMMAND_LEASE_TTL_MS,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_concurrent_commands: 8,
            max_queued_commands: 64,
            commands_per_minute: 600,
            max_sse_connections_per_tenant: 100,
            max_sse_connections: 10_000,
            tenant_limits: Vec::new(),
            max_header_bytes: 16 * 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            request_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            write_buffer_bytes: 64 * 1024,
            shutdown_readiness_delay: Duration::ZERO,
            cors_allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            public_url: None,
            abandon_sealed_after: Duration::from_secs(600),
            reconcile_sealed_after: Duration::from_secs(120),
            command_retention: Duration::from_secs(24 * 3600),
            max_stored_result_bytes_per_tenant: 64 << 20,
            event_retention: Duration::ZERO,
            closed_session_retention: Duration::from_secs(30 * 24 * 3600),
            max_closed_session_bytes_per_tenant: 256 << 20,
            shutdown_grace: Duration::from_secs(10),
            console: true,
            auth_failures_per_minute: 60,
        }
    }
}

impl GatewayConfig {
    /// Every tenant's admission limits unless `tenant_limits` names it.
    pub fn admission(&self) -> AdmissionLimits {
        AdmissionLimits {
            max_concurrent_commands: self.max_concurrent_commands,
            max_queued_commands: self.max_queued_commands,
            commands_per_minute: self.commands_per_minute,
        }
    }

    /// Every limit must be usable: positive, tenant overrides naming valid tenants once, and
    /// buffers large enough for hyper. `Err` names the key as the file writes it.
    pub fn validate(&self) -> Result<(), String> {
        let ms = |d: Duration| d.as_millis() as u64;
        check_positive([
            ("gateway.command_lease_ttl_ms", self.command_lease_ttl_ms),
            ("gateway.max_request_bytes", self.max_request_bytes as u64),
            ("gateway.max_header_bytes", self.max_header_bytes as u64),
            (
                "gateway.header_read_timeout_ms",
                ms(self.header_read_timeout),
            ),
            ("gateway.idle_timeout_ms", ms(self.idle_timeout)),
            ("gateway.request_timeout_ms", ms(self.request_timeout)),
            ("gateway.write_timeout_ms", ms(self.write_timeout)),
            (
                "gateway.max_concurrent_commands",
                self.max_concurrent_commands as u64,
            ),
            (
                "gateway.max_queued_commands",
                self.max_queued_commands as u64,
            ),
            (
                "gateway.commands_per_minute",
                self.commands_per_minute as u64,
            ),
            (
                "gateway.max_sse_connections_per_tenant",
                self.max_sse_connections_per_tenant as u64,
            ),
            (
                "gateway.max_sse_connections",
                self.max_sse_connections as u64,
            ),
            ("gateway.heartbeat_interval_ms", ms(self.heartbeat_interval)),
        ])?;
        if let Some(bad) = self
            .operator_token_sha256
            .iter()
            .find(|hash| hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            let shown: String = bad.chars().take(8).collect();
            return Err(format!(
                "gateway.operator_token_sha256: {shown:?}… is not a SHA-256 in hex (64 digits)"
            ));
        }
        let tenants = self.tenant_limits.iter().map(|t| t.tenant.as_str());
        check_tenant_overrides("gateway", tenants)?;
        for tenant in &self.tenant_limits {
            check_positive_overrides(
                "gateway",
                &tenant.tenant,
                [
                    ("max_concurrent_commands", tenant.max_concurrent_commands),
                    ("max_queued_commands", tenant.max_queued_commands),
                    ("commands_per_minute", tenant.commands_per_minute),
                    ("max_sse_connections", tenant.max_sse_connections),
                ],
            )?;
        }
        // hyper's buffer floor; and a buffer smaller than the head limit would lower that limit.
        const MIN_BUFFER: usize = 8192;
        if self.write_buffer_bytes < MIN_BUFFER.max(self.max_header_bytes) {
            return Err(
                "gateway.write_buffer_bytes must be at least 8192 and at least \
                 gateway.max_header_bytes"
                    .to_owned(),
            );
        }
        if let Some(url) = &self.public_url {
            let authority = url
                .strip_prefix("https://")
                .or_else(|| url.strip_prefix("http://"))
                .map(|rest| rest.trim_end_matches('/'));
            let plain = |authority: &str| {
                !authority.is_empty() && !authority.contains(['/', '?', '#', '@', ' '])
            };
            if !authority.is_some_and(plain) {
                return Err(
                    "gateway.public_url must be http:// or https:// with a host and an \
                     optional port, without a path"
                        .to_owned(),
                );
            }
        }
        Ok(())
    }
}

/// The limits of one named tenant (`[[gateway.tenant_limits]]`); every limit left out keeps the
/// gateway's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    pub tenant: String,
    pub max_concurrent_commands: Option<usize>,
    pub max_queued_commands: Option<usize>,
    pub commands_per_minute: Option<usize>,
    pub max_sse_connections: Option<usize>,
    /// The tenant's own retention of closed sessions (zero keeps them).
    #[serde(
        rename = "closed_session_retention_ms",
        default,
        with = "option_millis"
    )]
    pub closed_session_retention: Option<Duration>,
    /// The tenant's own byte budget of closed sessions (zero: no byte bound).
    pub max_closed_session_bytes: Option<u64>,
}

/// What every tenant gets: the defaults with the overrides of `tenant_limits` applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantQuota {
    pub admission: AdmissionLimits,
    pub max_sse_connections: usize,
}

/// Resolves a tenant's quota (a map built once; looked up per command and per stream).
#[derive(Clone, Debug)]
pub struct TenantQuotas {
    default: TenantQuota,
    named: HashMap<String, TenantQuota>,
}

impl TenantQuotas {
    pub fn from_config(config: &GatewayConfig) -> Self {
        let default = TenantQuota {
            admission: config.admission(),
            max_sse_connections: config.max_sse_connections_per_tenant,
        };
        let named = config
            .tenant_limits
            .iter()
            .map(|limits| {
                let admission = AdmissionLimits {
                    max_concurrent_commands: limits
                        .max_concurrent_commands
                        .unwrap_or(default.admission.max_concurrent_commands),
                    max_queued_commands: limits
                        .max_queued_commands
                        .unwrap_or(default.admission.max_queued_commands),
                    commands_per_minute: limits
                        .commands_per_minute
                        .unwrap_or(default.admission.commands_per_minute),
                };
                let quota = TenantQuota {
                    admission,
                    max_sse_connections: limits
                        .max_sse_connections
                        .unwrap_or(default.max_sse_connections),
                };
                (limits.tenant.clone(), quota)
            })
            .collect();
        Self { default, named }
    }

    pub fn for_tenant(&self, tenant: &str) -> &TenantQuota {
        self.named.get(tenant).unwrap_or(&self.default)
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

    #[test]
    fn a_named_tenant_overrides_only_what_it_sets() {
        let config = GatewayConfig {
            tenant_limits: vec![TenantLimits {
                tenant: "acme".to_owned(),
                commands_per_minute: Some(5),
                max_sse_connections: Some(2),
                ..TenantLimits::default()
            }],
            ..GatewayConfig::default()
        };
        let quotas = TenantQuotas::from_config(&config);
        let acme = quotas.for_tenant("acme");
        assert_eq!(acme.admission.commands_per_minute, 5);
        assert_eq!(acme.max_sse_connections, 2);
        assert_eq!(
            acme.admission.max_concurrent_commands,
            config.max_concurrent_commands
        );
        let other = quotas.for_tenant("other");
        assert_eq!(other.admission, config.admission());
        assert_eq!(
            other.max_sse_connections,
            config.max_sse_connections_per_tenant
        );
    }
}
