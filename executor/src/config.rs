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
    /// How long `session.close` and shutdown wait for a cancelled request to write its terminal
    /// events. Default 5 s.
    pub stop_grace: Duration,
    /// Permission mode and rules of tool calls. Default: mode `default`, no rules.
    pub permissions: PermissionPolicy,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            max_active_sessions_per_tenant: 100,
            tenant_max_active_sessions: HashMap::new(),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            default_max_turns: 16,
            stop_grace: Duration::from_secs(5),
            permissions: PermissionPolicy::default(),
        }
    }
}

impl ExecutorConfig {
    /// The active-session cap of every tenant.
    pub fn session_caps(&self) -> SessionCaps {
        SessionCaps {
            default: self.max_active_sessions_per_tenant,
            named: Arc::new(self.tenant_max_active_sessions.clone()),
        }
    }
}

/// Active sessions allowed per tenant: a default and named exceptions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionCaps {
    default: usize,
    named: Arc<HashMap<String, usize>>,
}

impl SessionCaps {
    /// The same cap for every tenant.
    pub fn uniform(cap: usize) -> Self {
        Self {
            default: cap,
            named: Arc::default(),
        }
    }

    pub fn for_tenant(&self, tenant_id: &str) -> usize {
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
