//! Executor configuration; every field documented with unit and default.

use std::time::Duration;

use crate::approvals::DEFAULT_APPROVAL_TIMEOUT;
use crate::permissions::PermissionPolicy;

#[derive(Clone, Debug, PartialEq)]
pub struct ExecutorConfig {
    /// Sessions one tenant may have loaded at once (decision P11). Default 100.
    pub max_active_sessions_per_tenant: usize,
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
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            default_max_turns: 16,
            stop_grace: Duration::from_secs(5),
            permissions: PermissionPolicy::default(),
        }
    }
}
