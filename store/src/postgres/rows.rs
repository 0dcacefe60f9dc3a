//! Rows as PostgreSQL returns them, and their conversion to and from store records.

use agent_runtime::protocol::JsonObject;
use sqlx::FromRow;
use sqlx::types::Json;

use super::{to_i64, to_u64};
use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::frozen::Frozen;
use crate::journal::CommandLease;
use crate::model::{ExecutionLease, RouteState, SessionRoute, WorkerRecord, WorkerStatus};

/// `(first_sequence, next_sequence)` of a stream.
pub(super) type Head = (i64, i64);

/// A value the schema's CHECK constraints should have made impossible.
pub(crate) fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::runtime(
        RuntimeErrorCode::InvalidTransaction,
        format!("Unexpected {what} in the database: {value}"),
    )
}

#[derive(FromRow)]
pub(crate) struct CommandRow {
    pub lease_id: String,
    pub fingerprint: String,
    pub status: String,
    pub expires_at_ms: Option<i64>,
    pub result: Option<Json<serde_json::Value>>,
    pub abandon_reason: Option<String>,
    pub sealed_at_ms: Option<i64>,
}

/// The fallback reason of an abandoned row without one (docs/storage.md §1.2, step 3).
const DEFAULT_ABANDON_REASON: &str = "This command was abandoned after sealing";

impl CommandRow {
    /// The receipt in the memory engine's shape, so both decide claims with the same rules.
    pub fn into_lease(self) -> CommandLease {
        let abandon_reason = match self.status.as_str() {
            "abandoned" => Some(
                self.abandon_reason
                    .unwrap_or_else(|| DEFAULT_ABANDON_REASON.to_owned()),
            ),
            _ => None,
        };
        CommandLease {
            lease_id: self.lease_id,
            command_fingerprint: self.fingerprint,
            expires_at: self.expires_at_ms.map(to_u64),
            sealed: self.sealed_at_ms.is_some(),
            result: self.result.map(|json| Frozen::new(&json.0)),
            abandon_reason,
            sealed_at: self.sealed_at_ms.map(to_u64),
            // Claim decisions do not use it; the reaper reads `updated_at_ms` in SQL.
            finished_at: None,
            target: None,
            result_bytes: None,
        }
    }
}

#[derive(FromRow)]
pub(crate) struct LeaseRow {
    pub session_id: String,
    pub lease_id: String,
    pub owner_id: String,
    pub fencing_token: i64,
    pub acquired_at_ms: i64,
    pub renewed_at_ms: i64,
    pub expires_at_ms: i64,
    pub released_at_ms: Option<i64>,
}

impl From<LeaseRow> for ExecutionLease {
    fn from(row: LeaseRow) -> Self {
        ExecutionLease {
            session_id: row.session_id,
            lease_id: row.lease_id,
            owner_id: row.owner_id,
            fencing_token: to_u64(row.fencing_token),
            acquired_at_ms: to_u64(row.acquired_at_ms),
            renewed_at_ms: to_u64(row.renewed_at_ms),
            expires_at_ms: to_u64(row.expires_at_ms),
            released_at_ms: row.released_at_ms.map(to_u64),
        }
    }
}

#[derive(FromRow)]
pub(crate) struct RouteRow {
    pub tenant_id: String,
    pub session_id: String,
    pub state: String,
    pub priority: i64,
    pub attempt: i64,
    pub fencing_token: i64,
    pub worker_id: Option<String>,
    pub lease_id: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    pub queued_at_ms: i64,
    pub updated_at_ms: i64,
    pub metadata: Json<JsonObject>,
    pub failure: Option<Json<JsonObject>>,
}

pub(crate) fn route_state(text: &str) -> StoreResult<RouteState> {
    serde_json::from_value(serde_json::Value::from(text)).map_err(|_| corrupt("route state", text))
}

impl TryFrom<RouteRow> for SessionRoute {
    type Error = StoreError;

    fn try_from(row: RouteRow) -> StoreResult<Self> {
        Ok(SessionRoute {
            state: route_state(&row.state)?,
            tenant_id: row.tenant_id,
            session_id: row.session_id,
            priority: row.priority,
            attempt: to_u64(row.attempt),
            fencing_token: to_u64(row.fencing_token),
            worker_id: row.worker_id,
            lease_id: row.lease_id,
            lease_expires_at_ms: row.lease_expires_at_ms.map(to_u64),
            queued_at_ms: to_u64(row.queued_at_ms),
            updated_at_ms: to_u64(row.updated_at_ms),
            metadata: row.metadata.0,
            failure: row.failure.map(|json| json.0),
        })
    }
}

#[derive(FromRow)]
pub(crate) struct WorkerRow {
    pub worker_id: String,
    pub status: String,
    pub capacity: i64,
    pub metadata: Json<JsonObject>,
    pub registered_at_ms: i64,
    pub last_heartbeat_at_ms: i64,
    pub lease_expires_at_ms: i64,
    pub draining_at_ms: Option<i64>,
}

pub(crate) fn worker_status_str(status: WorkerStatus) -> &'static str {
    match status {
        WorkerStatus::Active => "active",
        WorkerStatus::Draining => "draining",
        WorkerStatus::Offline => "offline",
    }
}

impl TryFrom<WorkerRow> for WorkerRecord {
    type Error = StoreError;

    fn try_from(row: WorkerRow) -> StoreResult<Self> {
        let status = match row.status.as_str() {
            "active" => WorkerStatus::Active,
            "draining" => WorkerStatus::Draining,
            "offline" => WorkerStatus::Offline,
            other => return Err(corrupt("worker status", other)),
        };
        Ok(WorkerRecord {
            worker_id: row.worker_id,
            status,
            capacity: u32::try_from(row.capacity).unwrap_or(u32::MAX),
            metadata: row.metadata.0,
            registered_at_ms: to_u64(row.registered_at_ms),
            last_heartbeat_at_ms: to_u64(row.last_heartbeat_at_ms),
            lease_expires_at_ms: to_u64(row.lease_expires_at_ms),
            draining_at_ms: row.draining_at_ms.map(to_u64),
        })
    }
}

/// Writes the whole lease row (one row per session, overwritten by every acquire).
pub(crate) async fn put_lease_row(
    tx: &mut super::Tx,
    tenant_id: &str,
    lease: &ExecutionLease,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO execution_leases (tenant_id, session_id, lease_id, owner_id, fencing_token, \
         acquired_at_ms, renewed_at_ms, expires_at_ms, released_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (tenant_id, session_id) DO UPDATE SET lease_id = EXCLUDED.lease_id, \
         owner_id = EXCLUDED.owner_id, fencing_token = EXCLUDED.fencing_token, \
         acquired_at_ms = EXCLUDED.acquired_at_ms, renewed_at_ms = EXCLUDED.renewed_at_ms, \
         expires_at_ms = EXCLUDED.expires_at_ms, released_at_ms = EXCLUDED.released_at_ms",
    )
    .bind(tenant_id)
    .bind(&lease.session_id)
    .bind(&lease.lease_id)
    .bind(&lease.owner_id)
    .bind(to_i64(lease.fencing_token))
    .bind(to_i64(lease.acquired_at_ms))
    .bind(to_i64(lease.renewed_at_ms))
    .bind(to_i64(lease.expires_at_ms))
    .bind(lease.released_at_ms.map(to_i64))
    .execute(&mut **tx)
    .await
    .map_err(super::db_error)?;
    Ok(())
}

/// Writes the whole route row.
pub(crate) async fn put_route_row(tx: &mut super::Tx, route: &SessionRoute) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO session_routes (tenant_id, session_id, state, priority, attempt, \
         fencing_token, worker_id, lease_id, lease_expires_at_ms, queued_at_ms, updated_at_ms, \
         metadata, failure) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
         ON CONFLICT (tenant_id, session_id) DO UPDATE SET state = EXCLUDED.state, \
         priority = EXCLUDED.priority, attempt = EXCLUDED.attempt, \
         fencing_token = EXCLUDED.fencing_token, worker_id = EXCLUDED.worker_id, \
         lease_id = EXCLUDED.lease_id, lease_expires_at_ms = EXCLUDED.lease_expires_at_ms, \
         queued_at_ms = EXCLUDED.queued_at_ms, updated_at_ms = EXCLUDED.updated_at_ms, \
         metadata = EXCLUDED.metadata, failure = EXCLUDED.failure",
    )
    .bind(&route.tenant_id)
    .bind(&route.session_id)
    .bind(route.state.as_str())
    .bind(route.priority)
    .bind(to_i64(route.attempt))
    .bind(to_i64(route.fencing_token))
    .bind(&route.worker_id)
    .bind(&route.lease_id)
    .bind(route.lease_expires_at_ms.map(to_i64))
    .bind(to_i64(route.queued_at_ms))
    .bind(to_i64(route.updated_at_ms))
    .bind(Json(&route.metadata))
    .bind(route.failure.as_ref().map(Json))
    .execute(&mut **tx)
    .await
    .map_err(super::db_error)?;
    Ok(())
}

/// The session's route, locked for the rest of the transaction when `lock` is set.
pub(crate) async fn load_route(
    executor: &mut sqlx::PgConnection,
    tenant_id: &str,
    session_id: &str,
    lock: bool,
) -> StoreResult<Option<SessionRoute>> {
    let sql = if lock {
        "SELECT * FROM session_routes WHERE tenant_id = $1 AND session_id = $2 FOR UPDATE"
    } else {
        "SELECT * FROM session_routes WHERE tenant_id = $1 AND session_id = $2"
    };
    let row: Option<RouteRow> = sqlx::query_as(sql)
        .bind(tenant_id)
        .bind(session_id)
        .fetch_optional(executor)
        .await
        .map_err(super::db_error)?;
    row.map(SessionRoute::try_from).transpose()
}
