//! Executor configuration; every field documented with unit and default.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::approvals::DEFAULT_APPROVAL_TIMEOUT;
use crate::permissions::PermissionPolicy;

#[derive(Clone, Debug, PartialEq)]
pub struct ExecutorConfig {
    /// Sessions one tenant may have loaded at once (decision P11). Default 100.
    pub max_active_sessions_per_tenant: usize,
    /// Named tenants whose cap differs from `max_active_sessions_per_tenant`. Default: none.
    pub tenant_max_active_sessions: HashMap<String, usize>,
    /// How long a tool waits for a human decision. Default 5 min.
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
    pub stop_grace: Duration,
    /// Permission mode and rules of tool calls. Default: mode `default`, no rules.
    pub permissions: PermissionPolicy,
    /// Inputs one session may hold waiting (steered into its running request or queued after
    /// it), and their size; one more is refused with a retryable `RATE_LIMITED`. Default 32
    /// inputs, 8 MiB.
    pub pending_inputs: PendingInputLimits,
    /// Named tenants whose pending-input limits differ. Default: none.
    pub tenant_pending_inputs: HashMap<String, PendingInputLimits>,
    /// Bytes of JSON one event's `data` may carry (docs/protocol.md §6.5): a longer text delta
    /// is split, a longer answer or tool output cut with a marker, a tool call whose input does
    /// not fit refused. Default 1 MiB; 64 KiB to 4 MiB − 16 KiB.
    pub max_event_bytes: usize,
}

/// What one session may hold waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingInputLimits {
    pub inputs: usize,
    /// Bytes of the inputs' text and image URLs
    /// ([`agent_runtime::protocol::content::UserContent::size`]).
    pub bytes: usize,
}

impl Default for PendingInputLimits {
    fn default() -> Self {
        Self {
            inputs: 32,
            bytes: 8 << 20,
        }
    }
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            max_active_sessions_per_tenant: 100,
            tenant_max_active_sessions: HashMap::new(),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            default_max_turns: 16,
            max_turns_limit: 100,
            max_request_tokens: None,
            stop_grace: Duration::from_secs(5),
            permissions: PermissionPolicy::default(),
            pending_inputs: PendingInputLimits::default(),
            tenant_pending_inputs: HashMap::new(),
            max_event_bytes: crate::session::event_bound::DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

impl ExecutorConfig {
    /// The active-session cap of every tenant.
    pub fn session_caps(&self) -> SessionCaps {
        TenantCaps {
            default: self.max_active_sessions_per_tenant,
            named: Arc::new(self.tenant_max_active_sessions.clone()),
        }
    }

    /// The pending-input limits of every tenant.
    pub fn pending_input_caps(&self) -> TenantCaps<PendingInputLimits> {
        TenantCaps {
            default: self.pending_inputs,
            named: Arc::new(self.tenant_pending_inputs.clone()),
        }
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
            tenant_max_active_sessions: HashMap::from([("acme".to_owned(), 50)]),
            ..ExecutorConfig::default()
        };
        let caps = config.session_caps();
        assert_eq!(caps.for_tenant("acme"), 50);
        assert_eq!(caps.for_tenant("other"), 3);
        assert_eq!(SessionCaps::uniform(7).for_tenant("acme"), 7);
    }
}
