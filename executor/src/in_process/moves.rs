//! An operator's move of one session to another executor (docs/cluster.md "Moving a session"):
//! the executor running it stops and hands it off, the chosen one takes it. Both halves are
//! serialized with the session's commands.

use agent_runtime::protocol::ProtocolError;

use super::InProcessExecutor;
use crate::session::StopReason;

impl InProcessExecutor {
    /// Stops running the session here (its running request ends as on a drain, with its
    /// terminal events stored) and hands its route off, so that another executor can take it at
    /// once. `false`: it does not run here.
    pub async fn release(&self, tenant_id: &str, session_id: &str) -> bool {
        self.registry
            .serialized(tenant_id, session_id, async {
                let Some(session) = self.registry.remove(tenant_id, session_id) else {
                    return false;
                };
                session
                    .stop(StopReason::Moved, self.config.stop_grace)
                    .await;
                if let Some(lease) = &session.lease {
                    self.leases.release(tenant_id, lease, false).await;
                }
                true
            })
            .await
    }

    /// Takes a session handed off to this executor: claims its lease (waiting out the handoff
    /// while its last owner finishes) and loads it, so that its waiting inputs run here. Answers
    /// the fencing token it runs under (0 without leases).
    pub async fn take(&self, tenant_id: &str, session_id: &str) -> Result<u64, ProtocolError> {
        self.check_running()?;
        self.registry
            .serialized(tenant_id, session_id, async {
                let live = match self.registry.get(tenant_id, session_id) {
                    Some(live) => live,
                    None => {
                        let record = self.record(tenant_id, session_id).await?;
                        self.load_stored(&record).await?
                    }
                };
                Ok(live.lease.as_ref().map_or(0, |lease| lease.fencing_token))
            })
            .await
    }
}
