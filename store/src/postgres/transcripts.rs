//! The transcript projection (storage.md §8): one JSONB document per session in `transcripts`.
//! Every write locks the row (`FOR UPDATE`) after the fence check and applies the shared
//! [`crate::transcript`] rules in Rust, so the read-modify-write is atomic and identical to the
//! other backends.

use async_trait::async_trait;
use sqlx::types::Json;

use super::{PostgresStore, Tx, check_fence_in, db_error, json_text, to_i64};
use crate::error::{StoreError, StoreResult};
use crate::model::{ExecutionFence, Transcript, TranscriptMutation};
use crate::ports::TranscriptStore;
use crate::rules::transcript_not_found;
use crate::transcript::{apply_mutation, fork_prefix, new_transcript, readable};

/// The document, locked for the rest of the transaction.
pub(super) async fn lock_transcript(
    tx: &mut Tx,
    tenant_id: &str,
    session_id: &str,
) -> StoreResult<Option<Transcript>> {
    let row: Option<(Json<Transcript>,)> = sqlx::query_as(
        "SELECT document FROM transcripts WHERE tenant_id = $1 AND session_id = $2 FOR UPDATE",
    )
    .bind(tenant_id)
    .bind(session_id)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(row.map(|(doc,)| doc.0))
}

pub(super) async fn put_transcript(
    tx: &mut Tx,
    tenant_id: &str,
    doc: &Transcript,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO transcripts (tenant_id, session_id, document, updated_at_ms) \
         VALUES ($1, $2, $3::json, $4) ON CONFLICT (tenant_id, session_id) \
         DO UPDATE SET document = EXCLUDED.document, updated_at_ms = EXCLUDED.updated_at_ms",
    )
    .bind(tenant_id)
    .bind(&doc.session_id)
    .bind(json_text(doc))
    .bind(to_i64(doc.last_activity_ms))
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Applies a mutation to the locked document of the caller's transaction; a rejected mutation
/// writes nothing.
pub(super) async fn mutate_in(
    tx: &mut Tx,
    tenant_id: &str,
    session_id: &str,
    mutation: TranscriptMutation,
    now: u64,
) -> StoreResult<()> {
    let Some(mut doc) = lock_transcript(tx, tenant_id, session_id).await? else {
        return Err(transcript_not_found(session_id));
    };
    apply_mutation(&mut doc, mutation, now)?;
    put_transcript(tx, tenant_id, &doc).await
}

#[async_trait]
impl TranscriptStore for PostgresStore {
    async fn create_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Transcript> {
        self.retrying_conflicts(|| self.create_transcript_once(tenant_id, session_id, fence))
            .await
    }

    async fn load_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Transcript>> {
        self.ensure_open()?;
        let row: Option<(Json<Transcript>,)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT document FROM transcripts WHERE tenant_id = $1 AND session_id = $2",
                )
                .bind(tenant_id)
                .bind(session_id)
                .fetch_optional(self.pool())
            })
            .await?;
        Ok(row.map(|(doc,)| readable(&doc.0)))
    }

    async fn mutate_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        mutation: TranscriptMutation,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<()> {
        self.retrying_conflicts(|| {
            self.mutate_transcript_once(tenant_id, session_id, mutation.clone(), fence)
        })
        .await
    }

    async fn fork_transcript(
        &self,
        tenant_id: &str,
        source_session_id: &str,
        target_session_id: &str,
        message_id: Option<&str>,
    ) -> StoreResult<Transcript> {
        self.retrying_conflicts(|| {
            self.fork_transcript_once(tenant_id, source_session_id, target_session_id, message_id)
        })
        .await
    }

    async fn delete_transcript(&self, tenant_id: &str, session_id: &str) -> StoreResult<()> {
        self.retrying_conflicts(|| self.delete_transcript_once(tenant_id, session_id))
            .await
    }

    async fn list_transcripts(&self, tenant_id: &str) -> StoreResult<Vec<String>> {
        self.ensure_open()?;
        let rows: Vec<(String,)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT session_id FROM transcripts WHERE tenant_id = $1 ORDER BY session_id",
                )
                .bind(tenant_id)
                .fetch_all(self.pool())
            })
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `create_transcript` (re-run whole on a deadlock).
    async fn create_transcript_once(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Transcript> {
        if tenant_id.trim().is_empty() || session_id.trim().is_empty() {
            return Err(StoreError::invalid("Transcript ids must not be blank"));
        }
        let mut tx = self.begin().await?;
        let now = self.now();
        // The execution lock also serialises concurrent creators of one transcript.
        check_fence_in(self, &mut tx, tenant_id, session_id, fence, now).await?;
        if let Some(existing) = lock_transcript(&mut tx, tenant_id, session_id).await? {
            return Ok(readable(&existing));
        }
        let doc = new_transcript(session_id, now);
        put_transcript(&mut tx, tenant_id, &doc).await?;
        self.commit(tx).await?;
        Ok(doc)
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `mutate_transcript` (re-run whole on a deadlock).
    async fn mutate_transcript_once(
        &self,
        tenant_id: &str,
        session_id: &str,
        mutation: TranscriptMutation,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        let now = self.now();
        check_fence_in(self, &mut tx, tenant_id, session_id, fence, now).await?;
        mutate_in(&mut tx, tenant_id, session_id, mutation, now).await?;
        self.commit(tx).await
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `fork_transcript` (re-run whole on a deadlock).
    async fn fork_transcript_once(
        &self,
        tenant_id: &str,
        source_session_id: &str,
        target_session_id: &str,
        message_id: Option<&str>,
    ) -> StoreResult<Transcript> {
        if target_session_id.trim().is_empty() {
            return Err(StoreError::invalid("Transcript ids must not be blank"));
        }
        let mut tx = self.begin().await?;
        let now = self.now();
        let source = sqlx::query_as::<_, (Json<Transcript>,)>(
            "SELECT document FROM transcripts WHERE tenant_id = $1 AND session_id = $2",
        )
        .bind(tenant_id)
        .bind(source_session_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?
        .map(|(doc,)| doc.0)
        .ok_or_else(|| transcript_not_found(source_session_id))?;
        let doc = fork_prefix(&source, target_session_id, message_id, now)?;
        // A fork starts a new session; it never overwrites an existing transcript.
        let inserted = sqlx::query(
            "INSERT INTO transcripts (tenant_id, session_id, document, updated_at_ms) \
             VALUES ($1, $2, $3::json, $4) ON CONFLICT DO NOTHING",
        )
        .bind(tenant_id)
        .bind(target_session_id)
        .bind(json_text(&doc))
        .bind(to_i64(now))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if inserted.rows_affected() != 1 {
            return Err(StoreError::invalid(format!(
                "Transcript of Session {target_session_id} already exists"
            )));
        }
        self.commit(tx).await?;
        Ok(readable(&doc))
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `delete_transcript` (re-run whole on a deadlock).
    async fn delete_transcript_once(&self, tenant_id: &str, session_id: &str) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query("DELETE FROM transcripts WHERE tenant_id = $1 AND session_id = $2")
            .bind(tenant_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        self.commit(tx).await
    }
}
