//! The schema: embedded, versioned migrations from `store/migrations/` (decision S3).
//!
//! Migrations run on one connection under a session-level advisory lock, so any number of
//! processes may start (or run `agent-runtime migrate`) at once: the first applies what is
//! missing, the others wait and then find nothing to do. The schema version is the newest
//! migration recorded in `_sqlx_migrations`.

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::{PgPool, PgPoolOptions};

use super::{brief, connect_options, db_error};
use crate::error::{StoreError, StoreResult};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Key of the session-level advisory lock held while migrating ("agentmig").
const MIGRATION_LOCK_KEY: i64 = 0x6167_656e_746d_6967;

/// The schema version this build writes and expects.
pub fn target_schema_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// Applies the embedded migrations to the database at `url`; returns the resulting version.
/// This is what `agent-runtime migrate` runs.
pub async fn migrate(url: &str) -> StoreResult<i64> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(connect_options(url)?)
        .await
        .map_err(db_error)?;
    let migrated = run(&pool).await;
    pool.close().await;
    migrated?;
    Ok(target_schema_version())
}

fn migrate_error(error: MigrateError) -> StoreError {
    let message = match &error {
        MigrateError::VersionMissing(version) => format!(
            "the database schema has migration {version}, which this build (schema version {}) \
             does not know; it was migrated by a newer agent-runtime: upgrade agent-runtime",
            target_schema_version()
        ),
        MigrateError::Execute(inner) => format!("a migration failed ({})", brief(inner)),
        other => format!("migrating the schema failed: {other}"),
    };
    tracing::error!(%error, "schema migration failed");
    StoreError::NotOpen(message)
}

/// Applies missing migrations under the advisory lock.
pub(crate) async fn run(pool: &PgPool) -> StoreResult<()> {
    let mut conn = pool.acquire().await.map_err(db_error)?;
    // The store's `lock_timeout` is for its own transactions: a start-up waits for another
    // process's migration, and a migration for the locks of running transactions, as long as
    // it takes. RESET below puts the connection's own setting back.
    sqlx::query("SET lock_timeout = 0")
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    let migrated = MIGRATOR.run_direct(&mut *conn).await.map_err(migrate_error);
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut *conn)
        .await;
    let reset = sqlx::query("RESET lock_timeout").execute(&mut *conn).await;
    if unlocked.is_err() || reset.is_err() {
        // Never reuse a connection that may still hold the lock, or wait on locks without
        // limit: close it instead.
        let _closed = conn.detach();
        migrated?;
        return Ok(());
    }
    migrated?;
    let version = schema_version_of(&mut conn)
        .await
        .map_err(db_error)?
        .unwrap_or(0);
    tracing::info!(schema_version = version, "database schema is current");
    Ok(())
}

/// Refuses to start unless the schema is exactly at this build's version.
pub(crate) async fn require_current(pool: &PgPool) -> StoreResult<()> {
    let mut conn = pool.acquire().await.map_err(db_error)?;
    let current = schema_version_of(&mut conn)
        .await
        .map_err(db_error)?
        .unwrap_or(0);
    let target = target_schema_version();
    if current == target {
        return Ok(());
    }
    let message = if current < target {
        format!(
            "the database schema is at version {current} but this build needs version {target}; \
             run `agent-runtime migrate --database-url <URL>` first, or start with \
             schema = \"migrate\""
        )
    } else {
        format!(
            "the database schema is at version {current}, newer than this build (version \
             {target}); upgrade agent-runtime"
        )
    };
    Err(StoreError::NotOpen(message))
}

/// The newest applied migration, or `None` before the first migration.
pub async fn schema_version_of(conn: &mut sqlx::PgConnection) -> Result<Option<i64>, sqlx::Error> {
    // Two statements: a query naming a missing table fails at planning time.
    let (exists,): (bool,) = sqlx::query_as("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    if !exists {
        return Ok(None);
    }
    let (version,): (Option<i64>,) =
        sqlx::query_as("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(&mut *conn)
            .await?;
    Ok(version)
}
