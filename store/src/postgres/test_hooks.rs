//! The test-only operations of the PostgreSQL store (feature `testing`).

use std::sync::atomic::Ordering;

use async_trait::async_trait;

use super::events::AGENT;
use super::{PostgresStore, db_error};
use crate::error::StoreResult;
use crate::test_hooks::TestHooks;

#[async_trait]
impl TestHooks for PostgresStore {
    async fn trim_agent_events_for_testing(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        super::events::lock_session_stream(&mut tx, tenant_id, session_id, AGENT).await?;
        sqlx::query("DELETE FROM agent_events WHERE tenant_id = $1 AND session_id = $2")
            .bind(tenant_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        // Like the memory hook: the log itself is gone, so the next append restarts at 1.
        sqlx::query(
            "DELETE FROM stream_heads WHERE tenant_id = $1 AND session_id = $2 \
             AND stream_name = $3",
        )
        .bind(tenant_id)
        .bind(session_id)
        .bind(AGENT)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        self.commit(tx).await?;
        self.inner.heads.forget(tenant_id, session_id);
        self.inner.waiters.reset(tenant_id, session_id);
        Ok(())
    }
}

impl PostgresStore {
    /// Skips the fencing rule of every later fenced write, so a stale owner's writes land. It
    /// exists only to prove that the history checker (tests/history/check.rs) notices two
    /// writers on one session.
    pub fn disable_fencing_for_testing(&self) {
        self.inner.fencing_disabled.store(true, Ordering::Relaxed);
    }
}
