//! The memories of the memory tools (docs/agent.md §6.8) in `agent_memories`.

use async_trait::async_trait;

use super::{PostgresStore, db_error, to_i64, to_u64};
use crate::error::StoreResult;
use crate::model::MemoryRecord;
use crate::ports::AgentMemories;
use crate::rules::{memory_quota_exceeded, validate_memory};

pub(super) type MemoryRow = (String, String, String, String, String, i64);

pub(super) const COLUMNS: &str = "scope, name, description, memory_type, body, updated_at_ms";

pub(super) fn record(
    (scope, name, description, memory_type, body, updated_at_ms): MemoryRow,
) -> MemoryRecord {
    MemoryRecord {
        scope,
        name,
        description,
        memory_type,
        body,
        updated_at_ms: to_u64(updated_at_ms),
    }
}

#[async_trait]
impl AgentMemories for PostgresStore {
    async fn save_memory(
        &self,
        tenant_id: &str,
        mut record: MemoryRecord,
        max_entries: u32,
    ) -> StoreResult<MemoryRecord> {
        validate_memory(&record)?;
        let mut tx = self.begin().await?;
        // One saver per scope at a time: the count below stays true until the commit. The
        // two-key form has its own key space, apart from the single-key locks of the schema.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))")
            .bind(tenant_id)
            .bind(&record.scope)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let (exists, count): (bool, i64) = sqlx::query_as(
            "SELECT bool_or(name = $3) IS TRUE, count(*) FROM agent_memories \
             WHERE tenant_id = $1 AND scope = $2",
        )
        .bind(tenant_id)
        .bind(&record.scope)
        .bind(&record.name)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error)?;
        if !exists && count >= i64::from(max_entries) {
            return Err(memory_quota_exceeded(max_entries));
        }
        record.updated_at_ms = self.now();
        sqlx::query(
            "INSERT INTO agent_memories (tenant_id, scope, name, description, memory_type, body, \
             updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (tenant_id, scope, name) DO UPDATE SET \
             description = EXCLUDED.description, memory_type = EXCLUDED.memory_type, \
             body = EXCLUDED.body, updated_at_ms = EXCLUDED.updated_at_ms",
        )
        .bind(tenant_id)
        .bind(&record.scope)
        .bind(&record.name)
        .bind(&record.description)
        .bind(&record.memory_type)
        .bind(&record.body)
        .bind(to_i64(record.updated_at_ms))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        self.commit(tx).await?;
        Ok(record)
    }

    async fn get_memory(
        &self,
        tenant_id: &str,
        scope: &str,
        name: &str,
    ) -> StoreResult<Option<MemoryRecord>> {
        self.ensure_open()?;
        let query = format!(
            "SELECT {COLUMNS} FROM agent_memories WHERE tenant_id = $1 AND scope = $2 AND name = $3"
        );
        let row: Option<MemoryRow> = self
            .reading(|| {
                sqlx::query_as(&query)
                    .bind(tenant_id)
                    .bind(scope)
                    .bind(name)
                    .fetch_optional(self.pool())
            })
            .await?;
        Ok(row.map(record))
    }

    async fn list_memories(&self, tenant_id: &str, scope: &str) -> StoreResult<Vec<MemoryRecord>> {
        self.ensure_open()?;
        let query = format!(
            "SELECT {COLUMNS} FROM agent_memories WHERE tenant_id = $1 AND scope = $2 \
             ORDER BY name"
        );
        let rows: Vec<MemoryRow> = self
            .reading(|| {
                sqlx::query_as(&query)
                    .bind(tenant_id)
                    .bind(scope)
                    .fetch_all(self.pool())
            })
            .await?;
        Ok(rows.into_iter().map(record).collect())
    }

    async fn delete_memory(&self, tenant_id: &str, scope: &str, name: &str) -> StoreResult<bool> {
        self.ensure_open()?;
        let mut tx = self.begin().await?;
        let deleted = sqlx::query(
            "DELETE FROM agent_memories WHERE tenant_id = $1 AND scope = $2 AND name = $3",
        )
        .bind(tenant_id)
        .bind(scope)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        self.commit(tx).await?;
        Ok(deleted > 0)
    }
}
