//! Session records (docs/storage.md §1.3): an upsert that never changes `created_by`/`created_at`,
//! and offset pages ordered by `updated_at` descending then session id ascending (bytewise, "C"
//! collation, like the other backends).

use agent_runtime::protocol::{JsonObject, SessionStatus};
use async_trait::async_trait;
use sqlx::FromRow;
use sqlx::types::Json;

use super::rows::corrupt;
use super::{PostgresStore, Tx, db_error, json_text, to_i64};
use crate::error::{StoreError, StoreResult};
use crate::model::{ClosedSession, SessionPage, SessionRecord, TenantScope};
use crate::ports::SessionRecords;
use crate::rules::{check_session_record_ids, session_page};

#[derive(FromRow)]
pub(super) struct SessionRow {
    tenant_id: String,
    session_id: String,
    created_by: String,
    status: String,
    created_at: String,
    updated_at: String,
    metadata: Json<JsonObject>,
    profile: Option<String>,
}

impl TryFrom<SessionRow> for SessionRecord {
    type Error = StoreError;

    fn try_from(row: SessionRow) -> StoreResult<Self> {
        let status = match row.status.as_str() {
            "active" => SessionStatus::Active,
            "closed" => SessionStatus::Closed,
            other => return Err(corrupt("session status", other)),
        };
        let metadata = Some(row.metadata.0).filter(|m| !m.is_empty());
        Ok(SessionRecord {
            tenant_id: row.tenant_id,
            created_by: row.created_by,
            session_id: row.session_id,
            status,
            created_at: row.created_at,
            updated_at: row.updated_at,
            metadata,
            profile: row.profile,
        })
    }
}

pub(super) fn status_str(status: SessionStatus) -> &'static str {
    match status {
        SessionStatus::Active => "active",
        SessionStatus::Closed => "closed",
    }
}

#[async_trait]
impl SessionRecords for PostgresStore {
    async fn list_active_sessions(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<(String, String)>> {
        self.ensure_open()?;
        let (tenant, session) = after.unwrap_or_default();
        let rows: Vec<(String, String)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT tenant_id, session_id FROM sessions WHERE status = 'active' \
             AND (tenant_id, session_id) > ($1, $2) ORDER BY tenant_id, session_id LIMIT $3",
                )
                .bind(&tenant)
                .bind(&session)
                .bind(i64::from(limit))
                .fetch_all(self.pool())
            })
            .await?;
        Ok(rows)
    }

    async fn list_closed_sessions(
        &self,
        tenants: &TenantScope,
        closed_before: &str,
        limit: u32,
    ) -> StoreResult<Vec<ClosedSession>> {
        self.ensure_open()?;
        let (only, excluded) = scope_binds(tenants);
        let rows: Vec<(String, String, String)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT tenant_id, session_id, updated_at FROM sessions \
                     WHERE status = 'closed' AND updated_at <= $1 \
                     AND ($2::text IS NULL OR tenant_id = $2) AND NOT (tenant_id = ANY($3)) \
                     ORDER BY updated_at LIMIT $4",
                )
                .bind(closed_before)
                .bind(only)
                .bind(&excluded)
                .bind(i64::from(limit))
                .fetch_all(self.pool())
            })
            .await?;
        Ok(closed_sessions(rows))
    }

    async fn closed_sessions_over_budget(
        &self,
        tenants: &TenantScope,
        max_bytes: u64,
        limit: u32,
    ) -> StoreResult<Vec<ClosedSession>> {
        self.ensure_open()?;
        let (only, excluded) = scope_binds(tenants);
        // Measures the closed sessions not measured yet (a bounded batch per call; what a call
        // leaves, the next one measures), then lists, per tenant, the closed sessions that do
        // not fit when the newest are kept within the budget.
        self.guarded_update(|| sqlx::query(MEASURE_CLOSED).bind(only).bind(&excluded))
            .await?;
        let rows: Vec<(String, String, String)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT tenant_id, session_id, updated_at FROM ( \
                       SELECT tenant_id, session_id, updated_at, sum(retained_bytes) OVER ( \
                         PARTITION BY tenant_id ORDER BY updated_at DESC, session_id DESC) AS kept \
                       FROM sessions WHERE status = 'closed' AND retained_bytes IS NOT NULL \
                       AND ($1::text IS NULL OR tenant_id = $1) AND NOT (tenant_id = ANY($2))) s \
                     WHERE kept > $3 ORDER BY updated_at, session_id LIMIT $4",
                )
                .bind(only)
                .bind(&excluded)
                .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
                .bind(i64::from(limit))
                .fetch_all(self.pool())
            })
            .await?;
        Ok(closed_sessions(rows))
    }

    async fn purge_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<bool> {
        self.retrying_conflicts(|| self.purge_session_once(tenant_id, session_id))
            .await
    }

    async fn put_session(&self, record: &SessionRecord) -> StoreResult<()> {
        self.retrying_conflicts(|| self.put_session_once(record))
            .await
    }

    async fn get_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRecord>> {
        self.ensure_open()?;
        let row: Option<SessionRow> = self
            .reading(|| {
                sqlx::query_as("SELECT * FROM sessions WHERE tenant_id = $1 AND session_id = $2")
                    .bind(tenant_id)
                    .bind(session_id)
                    .fetch_optional(self.pool())
            })
            .await?;
        row.map(SessionRecord::try_from).transpose()
    }

    async fn list_sessions(
        &self,
        tenant_id: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> StoreResult<SessionPage> {
        let (offset, limit) = session_page(cursor, limit)?;
        self.ensure_open()?;
        // One row more than the page tells whether another page exists.
        let rows: Vec<SessionRow> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT * FROM sessions WHERE tenant_id = $1 \
             ORDER BY updated_at DESC, session_id ASC OFFSET $2 LIMIT $3",
                )
                .bind(tenant_id)
                .bind(to_i64(offset))
                .bind(i64::from(limit) + 1)
                .fetch_all(self.pool())
            })
            .await?;
        let more = rows.len() > limit as usize;
        let sessions = rows
            .into_iter()
            .take(limit as usize)
            .map(SessionRecord::try_from)
            .collect::<StoreResult<Vec<_>>>()?;
        let next_cursor = more.then(|| offset.saturating_add(u64::from(limit)).to_string());
        Ok(SessionPage {
            sessions,
            next_cursor,
        })
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `put_session` (re-run whole on a deadlock).
    async fn put_session_once(&self, record: &SessionRecord) -> StoreResult<()> {
        check_session_record_ids(record)?;
        let metadata = record.metadata.clone().unwrap_or_default();
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO sessions (tenant_id, session_id, created_by, status, created_at, \
             updated_at, metadata, profile) VALUES ($1, $2, $3, $4, $5, $6, $7::json, $8) \
             ON CONFLICT (tenant_id, session_id) DO UPDATE SET status = EXCLUDED.status, \
             updated_at = EXCLUDED.updated_at, metadata = EXCLUDED.metadata",
        )
        .bind(&record.tenant_id)
        .bind(&record.session_id)
        .bind(&record.created_by)
        .bind(status_str(record.status))
        .bind(&record.created_at)
        .bind(&record.updated_at)
        .bind(json_text(&metadata))
        .bind(&record.profile)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        self.commit(tx).await
    }
}

/// A tenant scope as the binds of `($n::text IS NULL OR tenant_id = $n) AND NOT (tenant_id =
/// ANY($m))`: the one tenant, or the tenants left out.
fn scope_binds(tenants: &TenantScope) -> (Option<&str>, Vec<&str>) {
    match tenants {
        TenantScope::Only(tenant) => (Some(tenant), Vec::new()),
        TenantScope::AllExcept(tenants) => (None, tenants.iter().map(String::as_str).collect()),
    }
}

/// Rows of `(tenant_id, session_id, updated_at)` as closed sessions.
fn closed_sessions(rows: Vec<(String, String, String)>) -> Vec<ClosedSession> {
    rows.into_iter()
        .map(|(tenant_id, session_id, closed_at)| ClosedSession {
            tenant_id,
            session_id,
            closed_at,
        })
        .collect()
}

/// Measures what up to 1,000 closed, unmeasured sessions of a tenant scope retain, in stored
/// bytes (migration 0024).
const MEASURE_CLOSED: &str = "UPDATE sessions s SET retained_bytes = pg_column_size(s.*) \
     + COALESCE((SELECT sum(pg_column_size(e.envelope)) FROM agent_events e \
         WHERE e.tenant_id = s.tenant_id AND e.session_id = s.session_id), 0) \
     + COALESCE((SELECT sum(pg_column_size(k.envelope)) FROM event_keys k \
         WHERE k.tenant_id = s.tenant_id AND k.session_id = s.session_id), 0) \
     + COALESCE((SELECT sum(pg_column_size(d.event)) FROM durable_events d \
         WHERE d.tenant_id = s.tenant_id AND d.session_id = s.session_id), 0) \
     + COALESCE((SELECT sum(pg_column_size(t.document)) FROM transcripts t \
         WHERE t.tenant_id = s.tenant_id AND t.session_id = s.session_id), 0) \
     + COALESCE((SELECT sum(pg_column_size(x.entry)) FROM transcript_entries x \
         WHERE x.tenant_id = s.tenant_id AND x.session_id = s.session_id), 0) \
     + COALESCE((SELECT sum(pg_column_size(p.input)) FROM transcript_pending_inputs p \
         WHERE p.tenant_id = s.tenant_id AND p.session_id = s.session_id), 0) \
     FROM (SELECT tenant_id, session_id FROM sessions WHERE status = 'closed' \
             AND retained_bytes IS NULL AND ($1::text IS NULL OR tenant_id = $1) \
             AND NOT (tenant_id = ANY($2)) LIMIT 1000) due \
     WHERE s.tenant_id = due.tenant_id AND s.session_id = due.session_id";

/// Everything a session owns besides its record, deleted with it.
const OWNED_BY_A_SESSION: [&str; 9] = [
    "DELETE FROM agent_events WHERE tenant_id = $1 AND session_id = $2",
    "DELETE FROM event_keys WHERE tenant_id = $1 AND session_id = $2",
    "DELETE FROM stream_heads WHERE tenant_id = $1 AND session_id = $2",
    "DELETE FROM durable_events WHERE tenant_id = $1 AND session_id = $2",
    "DELETE FROM transcripts WHERE tenant_id = $1 AND session_id = $2",
    "DELETE FROM transcript_entries WHERE tenant_id = $1 AND session_id = $2",
    "DELETE FROM transcript_pending_inputs WHERE tenant_id = $1 AND session_id = $2",
    "DELETE FROM execution_leases WHERE tenant_id = $1 AND session_id = $2",
    "DELETE FROM session_routes WHERE tenant_id = $1 AND session_id = $2",
];

impl PostgresStore {
    /// One attempt of `purge_session`'s transaction: the record first (only while closed; the row
    /// lock keeps a concurrent put waiting), then what it owns.
    async fn purge_session_once(&self, tenant_id: &str, session_id: &str) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let deleted = sqlx::query(
            "DELETE FROM sessions WHERE tenant_id = $1 AND session_id = $2 AND status = 'closed'",
        )
        .bind(tenant_id)
        .bind(session_id)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if deleted.rows_affected() == 0 {
            self.commit(tx).await?;
            return Ok(false);
        }
        delete_for_session(&mut tx, &OWNED_BY_A_SESSION, tenant_id, session_id).await?;
        self.commit(tx).await?;
        Ok(true)
    }
}

/// Runs `statements`, each bound to `($1, $2) = (tenant_id, session_id)`, in `tx`.
pub(crate) async fn delete_for_session(
    tx: &mut Tx,
    statements: &[&str],
    tenant_id: &str,
    session_id: &str,
) -> StoreResult<()> {
    for statement in statements {
        sqlx::query(statement)
            .bind(tenant_id)
            .bind(session_id)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
    }
    Ok(())
}
