//! A session's worker route state (docs/storage.md §4.4): what a runtime store keeps for each routed
//! session and what `session.read` reports in its recovery object (docs/protocol.md §7.1). One type for
//! both, so the reported state is the stored one.

use serde::{Deserialize, Serialize};

/// A worker route's state and its transitions. `idle` exists only in newer route schemas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RouteState {
    Queued,
    Provisioning,
    Running,
    WaitingApproval,
    Suspended,
    Idle,
    Completed,
    Failed,
}

impl RouteState {
    /// Every state, in the order of the lifecycle.
    pub const ALL: [RouteState; 8] = [
        RouteState::Queued,
        RouteState::Provisioning,
        RouteState::Running,
        RouteState::WaitingApproval,
        RouteState::Suspended,
        RouteState::Idle,
        RouteState::Completed,
        RouteState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RouteState::Queued => "queued",
            RouteState::Provisioning => "provisioning",
            RouteState::Running => "running",
            RouteState::WaitingApproval => "waiting_approval",
            RouteState::Suspended => "suspended",
            RouteState::Idle => "idle",
            RouteState::Completed => "completed",
            RouteState::Failed => "failed",
        }
    }

    /// Provisioning, running and waiting for approval: an owner is working on the session.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            RouteState::Provisioning | RouteState::Running | RouteState::WaitingApproval
        )
    }

    /// Entering one of these clears ownership and releases the execution lease.
    pub fn clears_ownership(self) -> bool {
        matches!(
            self,
            RouteState::Idle | RouteState::Completed | RouteState::Failed | RouteState::Suspended
        )
    }

    /// The transition table of docs/storage.md §4.4 (same-state is always allowed).
    pub fn can_transition_to(self, to: RouteState) -> bool {
        use RouteState::*;
        if self == to {
            return true;
        }
        match self {
            Queued => matches!(to, Provisioning | Failed),
            Provisioning => matches!(to, Running | Suspended | Failed),
            Running => matches!(to, WaitingApproval | Suspended | Idle | Completed | Failed),
            WaitingApproval => matches!(to, Running | Suspended | Failed),
            Suspended => matches!(to, Queued | Provisioning | Idle | Completed | Failed),
            Idle => matches!(to, Queued | Completed | Failed),
            Completed | Failed => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RouteState;

    #[test]
    fn as_str_is_the_wire_name() {
        for state in RouteState::ALL {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::from(state.as_str())
            );
        }
    }
}
