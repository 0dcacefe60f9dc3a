//! Readiness (`readyz`) and shutdown of the PostgreSQL store.

use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_runtime::protocol::JsonObject;
use async_trait::async_trait;
use serde_json::Value;

use super::migrate::schema_version_of;
use super::{PostgresStore, again_on_lost_connection, brief};
use crate::error::StoreResult;
use crate::model::StoreHealth;
use crate::ports::StoreLifecycle;

/// A health check that takes longer than this reports the database as unreachable, so `readyz`
/// answers promptly during an outage.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

impl PostgresStore {
    /// `Ok(version)` when the database answers and takes writes, else a short, secret-free
    /// reason. A read-only database (a standby, or `default_transaction_read_only` set) answers
    /// reads but refuses every command's receipt, so it is not ready (PG-12).
    async fn probe(&self) -> Result<i64, String> {
        let probe_once = || async {
            let mut conn = self.pool().acquire().await?;
            let version = schema_version_of(&mut conn).await?;
            let (read_only,): (bool,) =
                sqlx::query_as("SELECT current_setting('transaction_read_only') = 'on'")
                    .fetch_one(&mut *conn)
                    .await?;
            Ok::<_, sqlx::Error>((version, read_only))
        };
        // A pooled connection the server had ended says nothing about the database now.
        let probe = again_on_lost_connection(self.max_retries(), probe_once);
        match tokio::time::timeout(HEALTH_TIMEOUT, probe).await {
            Err(_) => Err("database did not answer in time".into()),
            Ok(Err(error)) => Err(brief(&error)),
            Ok(Ok((None, _))) => Err("database schema is not migrated".into()),
            Ok(Ok((Some(_), true))) => Err("database is read-only".into()),
            Ok(Ok((Some(version), false))) => Ok(version),
        }
    }
}

#[async_trait]
impl StoreLifecycle for PostgresStore {
    async fn health_check(&self) -> StoreHealth {
        let mut details = JsonObject::new();
        details.insert("backend".into(), Value::from("postgresql"));
        let outcome = if self.inner.closed.load(Ordering::Acquire) {
            Err("store is closed".to_owned())
        } else {
            self.probe().await
        };
        let ready = match outcome {
            Ok(version) => {
                details.insert("schemaVersion".into(), Value::from(version));
                true
            }
            Err(reason) => {
                details.insert("error".into(), Value::from(reason));
                false
            }
        };
        StoreHealth { ready, details }
    }

    async fn close(&self) -> StoreResult<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.listener.abort();
        self.inner.waiters.wake_all();
        self.pool().close().await;
        Ok(())
    }
}
