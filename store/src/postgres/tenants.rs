//! Deleting everything a tenant owns: every table with a `tenant_id` column, in one transaction
//! (so a table added by a later migration is covered without a change here).

use async_trait::async_trait;

use super::{PostgresStore, db_error};
use crate::error::StoreResult;
use crate::ports::TenantData;

#[async_trait]
impl TenantData for PostgresStore {
    async fn delete_tenant(&self, tenant_id: &str) -> StoreResult<u64> {
        self.ensure_open()?;
        let mut tx = self.begin().await?;
        let tables: Vec<(String,)> = sqlx::query_as(
            "SELECT c.table_name::text FROM information_schema.columns c \
               JOIN information_schema.tables t \
                 ON t.table_schema = c.table_schema AND t.table_name = c.table_name \
              WHERE c.table_schema = current_schema() AND c.column_name = 'tenant_id' \
                AND t.table_type = 'BASE TABLE' \
              ORDER BY c.table_name",
        )
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let mut deleted = 0;
        for (table,) in tables {
            // The name comes from the catalog, quoted as an identifier.
            let statement = format!(
                "DELETE FROM \"{}\" WHERE tenant_id = $1",
                table.replace('"', "\"\"")
            );
            deleted += sqlx::query(&statement)
                .bind(tenant_id)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?
                .rows_affected();
        }
        self.commit(tx).await?;
        Ok(deleted)
    }
}
