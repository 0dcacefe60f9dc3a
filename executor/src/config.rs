//! Executor configuration, the `[executor]` section of the file: every field documented with
//! unit and default; a duration's key ends in `_ms`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::config::{
    check_positive, check_positive_overrides, check_tenant_overrides, millis,
};
use serde::Deserialize;

use crate::approvals::DEFAULT_APPROVAL_TIMEOUT;
use crate::permissions::PermissionPolicy;
use crate::provider::DEFAULT_DEMO_SLOW_DELTA_INTERVAL;
use crate::session::event_bound::{MAX_EVENT_BYTES_LIMIT, MIN_EVENT_BYTES};

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecutorConfig {
    /// Sessions one tenant may have loaded at once (decision P11). Default 100.
    pub max_active_sessions_per_tenant: usize,
    /// How long a tool waits for a human decision. Default 5 min.
    #[serde(rename = "approval_timeout_ms", with = "millis")]
    pub approval_timeout: Duration,
    /// Model turns per request when the input does not say (`maxTurns`). Default 16.
    pub default_max_turns: u64,
    /// Largest `maxTurns` a client may ask for; above it `input.submit` is refused with
    /// `INVALID_COMMAND` (an LLM spend cap, reliability catalogue RES-11). Default 100.
    pub max_turns_limit: u64,
    /// Model tokens (input + output, as the provider reports them in `usage`) one request may
    /// use: once a request has used this many, it makes no further model call and ends with
    /// the error code `MAX_REQUEST_TOKENS_EXCEEDED`. Default `None`: no cap.
    pub max_request_tokens: Option<u64>,
    /// How long `session.close` and shutdown wait for a cancelled request to write its terminal
    /// events. Default 5 s.
    #[serde(rename = "stop_grace_ms", with = "millis")]
    pub stop_grace: Duration,
    /// Permission mode and rules of tool calls, set by the `[tools]` section. Default: mode
    /// `default`, no rules.
    #[serde(skip)]
    pub permissions: PermissionPolicy,
    /// Inputs one session may hold waiting (steered into its running request or queued after
    /// it); one more is refused with a retryable `RATE_LIMITED`. Default 32.
    pub max_pending_inputs_per_session: usize,
    /// Bytes of those inputs' text and image URLs
    /// ([`agent_runtime::protocol::content::UserContent::size`]). Default 8 MiB.
    pub max_pending_input_bytes_per_session: usize,
    /// Bytes of JSON one event's `data` may carry (docs/protocol.md §6.5): a longer text delta
    /// is split, a longer answer or tool output cut with a marker, a tool call whose input does
    /// not fit refused. Default 1 MiB; 64 KiB to 4 MiB − 16 KiB.
    pub max_event_bytes: usize,
    /// The demo provider's pause between `demo:slow` deltas. Default 250 ms.
    #[serde(rename = "demo_slow_delta_interval_ms", with = "millis")]
    pub demo_slow_delta_interval: Duration,
    /// A cluster `executor` process's drain deadline on SIGTERM. Default 10 s.
    #[serde(rename = "shutdown_grace_ms", with = "millis")]
    pub shutdown_grace: Duration,
    /// Named tenants whose limits differ from the ones above. Default: none.
    pub tenant_limits: Vec<ExecutorTenantLimits>,
}

/// The limits of one named tenant (`[[executor.tenant_limits]]`); every limit left out keeps
/// the executor's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorTenantLimits {
    pub tenant: String,
    pub max_active_sessions: Option<usize>,
    pub max_pending_inputs: Option<usize>,
    pub max_pending_input_bytes: Option<usize>,
}

/// What one session may hold waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingInputLimits {
    pub inputs: usize,
    /// Bytes of the inputs' text and image URLs
    /// ([`agent_runtime::protocol::content::UserContent::size`]).
    pub bytes: usize,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            max_active_sessions_per_tenant: 100,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            default_max_turns: 16,
            max_turns_limit: 100,
            max_request_tokens: None,
            stop_grace: Duration::from_secs(5),
            permissions: PermissionPolicy::default(),
            max_pending_inputs_per_session: 32,
            max_pending_input_bytes_per_session: 8 << 20,
            max_event_bytes: crate::session::event_bound::DEFAULT_MAX_EVENT_BYTES,
            demo_slow_delta_interval: DEFAULT_DEMO_SLOW_DELTA_INTERVAL,
            shutdown_grace: Duration::from_secs(10),
            tenant_limits: Vec::new(),
        }
    }
}

impl ExecutorConfig {
    /// The active-session cap of every tenant.
    pub fn session_caps(&self) -> SessionCaps {
        let named = self
            .tenant_limits
            .iter()
            .filter_map(|t| Some((t.tenant.clone(), t.max_active_sessions?)));
        TenantCaps {
            default: self.max_active_sessions_per_tenant,
            named: Arc::new(named.collect()),
        }
    }

    /// The pending-input limits of every tenant.
    pub fn pending_input_caps(&self) -> TenantCaps<PendingInputLimits> {
        let default = PendingInputLimits {
            inputs: self.max_pending_inputs_per_session,
            bytes: self.max_pending_input_bytes_per_session,
        };
        let named = self
            .tenant_limits
            .iter()
            .filter(|t| t.max_pending_inputs.is_some() || t.max_pending_input_bytes.is_some())
            .map(|t| {
                let limits = PendingInputLimits {
                    inputs: t.max_pending_inputs.unwrap_or(default.inputs),
                    bytes: t.max_pending_input_bytes.unwrap_or(default.bytes),
                };
                (t.tenant.clone(), limits)
            });
        TenantCaps {
            default,
            named: Arc::new(named.collect()),
        }
    }

    /// Every limit must be usable. `Err` names the key as the file writes it.
    pub fn validate(&self) -> Result<(), String> {
        check_positive([
            (
                "executor.max_active_sessions_per_tenant",
                self.max_active_sessions_per_tenant as u64,
            ),
            (
                "executor.approval_timeout_ms",
                self.approval_timeout.as_millis() as u64,
            ),
            ("executor.default_max_turns", self.default_max_turns),
            ("executor.max_turns_limit", self.max_turns_limit),
            (
                "executor.max_request_tokens",
                self.max_request_tokens.unwrap_or(1),
            ),
            (
                "executor.max_pending_inputs_per_session",
                self.max_pending_inputs_per_session as u64,
            ),
            (
                "executor.max_pending_input_bytes_per_session",
                self.max_pending_input_bytes_per_session as u64,
            ),
        ])?;
        if self.default_max_turns > self.max_turns_limit {
            return Err(format!(
                "executor.default_max_turns ({}) is above executor.max_turns_limit ({})",
                self.default_max_turns, self.max_turns_limit
            ));
        }
        if !(MIN_EVENT_BYTES..=MAX_EVENT_BYTES_LIMIT).contains(&self.max_event_bytes) {
            return Err(format!(
                "executor.max_event_bytes must be between {MIN_EVENT_BYTES} and \
                 {MAX_EVENT_BYTES_LIMIT} (an SSE frame stays under the 4 MiB clients accept)"
            ));
        }
        let tenants = self.tenant_limits.iter().map(|t| t.tenant.as_str());
        check_tenant_overrides("executor", tenants)?;
        for tenant in &self.tenant_limits {
            check_positive_overrides(
                "executor",
                &tenant.tenant,
                [
                    ("max_active_sessions", tenant.max_active_sessions),
                    ("max_pending_inputs", tenant.max_pending_inputs),
                    ("max_pending_input_bytes", tenant.max_pending_input_bytes),
                ],
            )?;
        }
        Ok(())
    }
}

/// A limit of every tenant: a default and named exceptions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantCaps<T> {
    default: T,
    named: Arc<HashMap<String, T>>,
}

/// Active sessions allowed per tenant.
pub type SessionCaps = TenantCaps<usize>;

impl<T: Copy> TenantCaps<T> {
    /// The same cap for every tenant.
    pub fn uniform(cap: T) -> Self {
        Self {
            default: cap,
            named: Arc::default(),
        }
    }

    pub fn for_tenant(&self, tenant_id: &str) -> T {
        self.named.get(tenant_id).copied().unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_tenant_has_its_own_session_cap() {
        let config = ExecutorConfig {
            max_active_sessions_per_tenant: 3,
            tenant_limits: vec![ExecutorTenantLimits {
                tenant: "acme".to_owned(),
                max_active_sessions: Some(50),
                ..ExecutorTenantLimits::default()
            }],
            ..ExecutorConfig::default()
        };
        let caps = config.session_caps();
        assert_eq!(caps.for_tenant("acme"), 50);
        assert_eq!(caps.for_tenant("other"), 3);
        assert_eq!(SessionCaps::uniform(7).for_tenant("acme"), 7);
    }
}
