//! Hooks that only tests call.

use async_trait::async_trait;

use crate::error::StoreResult;

/// Test-only operations of the memory and JSONL stores.
#[async_trait]
pub trait TestHooks: Send + Sync {
    /// Drops the whole retained agent event log of a session but keeps its idempotency keys, so
    /// a repeat append with a known key still returns the original event. Because the log itself
    /// is gone, the next append restarts at sequence 1 (docs/storage.md §1.1: a quirk of this
    /// hook). The JSONL store journals the trim, so it survives a restart.
    async fn trim_agent_events_for_testing(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<()>;
}
