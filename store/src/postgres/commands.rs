//! Command receipts (docs/storage.md §1.2) in `commands`. A claim is one transaction: insert the
//! claim if no row exists, otherwise lock the row and decide with the shared rules. Seal, complete,
//! release and abandon are single guarded statements, each in its own transaction so that only a
//! failing `COMMIT` is ambiguous.

use async_trait::async_trait;
use serde_json::Value;

use super::rows::CommandRow;
use super::{PostgresStore, Tx, db_error, json_text, to_i64, to_u64};
use crate::error::{StoreError, StoreResult};
use crate::model::{CommandClaim, CommandTarget, UnfinishedCommand};
use crate::ports::CommandReceipts;
use crate::rules::{
    abandon_reason_required, command_lease_lost, decide_existing_claim, new_command_lease,
    validate_claim_command,
};

/// `(tenant, command, lease, sealed, sealed at, target)` of `list_unfinished_commands`.
type UnfinishedRow = (
    String,
    String,
    String,
    bool,
    Option<i64>,
    Option<sqlx::types::Json<Value>>,
);

fn target_json(target: &CommandTarget) -> Value {
    serde_json::to_value(target).unwrap_or(Value::Null)
}

/// A claim retries when the row it found vanished (released) between its two statements.
const CLAIM_ATTEMPTS: usize = 3;

impl PostgresStore {
    /// Runs one guarded statement in its own transaction and returns the affected row count;
    /// again (a new statement from `query`) when PostgreSQL aborts it as a deadlock victim.
    pub(super) async fn guarded_update<'q>(
        &self,
        query: impl Fn() -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> StoreResult<u64> {
        self.guarded(query, false).await
    }

    /// [`PostgresStore::guarded_update`]; `unflushed`: see [`PostgresStore::begin_unflushed`].
    async fn guarded<'q>(
        &self,
        query: impl Fn() -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        unflushed: bool,
    ) -> StoreResult<u64> {
        self.retrying_conflicts(|| async {
            let mut tx = if unflushed {
                self.begin_unflushed().await?
            } else {
                self.begin().await?
            };
            let done = query().execute(&mut *tx).await.map_err(db_error)?;
            self.commit(tx).await?;
            Ok(done.rows_affected())
        })
        .await
    }

    /// One claim transaction (see `claim_command`); with `seal`, a claim it makes is sealed on
    /// that target in the same statement (`claim_and_seal_command`).
    /// Stays whole: one transaction that decides a claim from what it reads.
    async fn claim_command_once(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
        seal: Option<&str>,
    ) -> StoreResult<CommandClaim> {
        for _ in 0..CLAIM_ATTEMPTS {
            let now = self.now();
            let fresh = new_command_lease(fingerprint, ttl_ms, now);
            let status = if seal.is_some() { "sealed" } else { "claimed" };
            let expires_at = if seal.is_some() {
                None
            } else {
                fresh.expires_at.map(to_i64)
            };
            let sealed_at = seal.map(|_| to_i64(now));
            // Both statements number the claim's columns alike.
            let write_claim = |sql: &'static str| {
                sqlx::query(sql)
                    .bind(tenant_id)
                    .bind(command_id)
                    .bind(fingerprint)
                    .bind(&fresh.lease_id)
                    .bind(expires_at)
                    .bind(to_i64(now))
                    .bind(status)
                    .bind(sealed_at)
                    .bind(seal)
            };
            // Flushed by the durable write of the command's effect that follows it.
            let mut tx = self.begin_unflushed().await?;
            // A concurrent inserter of the same key makes this wait for its commit, then do
            // nothing: exactly one of many concurrent first claims inserts.
            let inserted = write_claim(
                "INSERT INTO commands (tenant_id, command_id, fingerprint, lease_id, status, \
                 expires_at_ms, created_at_ms, updated_at_ms, sealed_at_ms, target) \
                 VALUES ($1, $2, $3, $4, $7, $5, $6, $6, $8, $9::json) ON CONFLICT DO NOTHING",
            )
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            if inserted.rows_affected() == 1 {
                return self
                    .commit_claim(tx, tenant_id, command_id, fresh.lease_id, seal.is_some())
                    .await;
            }
            let existing: Option<CommandRow> = sqlx::query_as(
                "SELECT lease_id, fingerprint, status, expires_at_ms, result, abandon_reason, \
                 sealed_at_ms FROM commands WHERE tenant_id = $1 AND command_id = $2 FOR UPDATE",
            )
            .bind(tenant_id)
            .bind(command_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
            let Some(existing) = existing else {
                // Released between the insert and the select: try again from the start.
                continue;
            };
            if let Some(decided) = decide_existing_claim(&existing.into_lease(), fingerprint, now) {
                return Ok(decided);
            }
            // An expired, unsealed claim: replace it under the row lock.
            write_claim(
                "UPDATE commands SET fingerprint = $3, lease_id = $4, status = $7, \
                 expires_at_ms = $5, result = NULL, abandon_reason = NULL, sealed_at_ms = $8, \
                 target = $9::json, updated_at_ms = $6 WHERE tenant_id = $1 AND command_id = $2",
            )
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            return self
                .commit_claim(tx, tenant_id, command_id, fresh.lease_id, seal.is_some())
                .await;
        }
        Err(StoreError::Backend {
            message: "the command receipt changed repeatedly during the claim; retrying is safe"
                .into(),
            retry_safe: true,
        })
    }
}

impl PostgresStore {
    /// Commits a claim. When a sealing claim's commit outcome is unknown, the receipt is taken
    /// back: nobody has run the command (its caller has not had the claim), and a sealed receipt
    /// of a command that never ran would answer `COMMAND_IN_PROGRESS` until it is abandoned.
    /// Taken back, the claim is a plain retry-safe failure; if that fails too, the unknown
    /// outcome stands.
    async fn commit_claim(
        &self,
        tx: Tx,
        tenant_id: &str,
        command_id: &str,
        lease_id: String,
        sealed: bool,
    ) -> StoreResult<CommandClaim> {
        match self.commit(tx).await {
            Ok(()) => Ok(CommandClaim::Claimed { lease_id }),
            Err(
                unknown @ StoreError::Backend {
                    retry_safe: false, ..
                },
            ) if sealed => {
                match self
                    .reopen_sealed_command(tenant_id, command_id, &lease_id)
                    .await
                {
                    Ok(()) => Err(StoreError::Backend {
                        message: "the command's claim lost its connection and was taken back; \
                                  retrying is safe"
                            .into(),
                        retry_safe: true,
                    }),
                    Err(_) => Err(unknown),
                }
            }
            Err(error) => Err(error),
        }
    }
}

#[async_trait]
impl CommandReceipts for PostgresStore {
    async fn claim_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
    ) -> StoreResult<CommandClaim> {
        validate_claim_command(tenant_id, command_id, fingerprint, ttl_ms)?;
        self.retrying_conflicts(|| {
            self.claim_command_once(tenant_id, command_id, fingerprint, ttl_ms, None)
        })
        .await
    }

    async fn claim_and_seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
        target: &CommandTarget,
    ) -> StoreResult<CommandClaim> {
        validate_claim_command(tenant_id, command_id, fingerprint, ttl_ms)?;
        let target = json_text(&target_json(target));
        self.retrying_conflicts(|| {
            self.claim_command_once(tenant_id, command_id, fingerprint, ttl_ms, Some(&target))
        })
        .await
    }

    async fn seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        target: &CommandTarget,
    ) -> StoreResult<()> {
        let now = to_i64(self.now());
        let target = json_text(&target_json(target));
        let query = || {
            sqlx::query(
                "UPDATE commands SET status = 'sealed', expires_at_ms = NULL, sealed_at_ms = $4, \
             updated_at_ms = $4, target = $5::json WHERE tenant_id = $1 AND command_id = $2 \
             AND lease_id = $3 AND status = 'claimed'",
            )
            .bind(tenant_id)
            .bind(command_id)
            .bind(lease_id)
            .bind(now)
            .bind(&target)
        };
        // Flushed by the durable write of the command's effect that follows it.
        if self.guarded(&query, true).await? != 1 {
            return Err(command_lease_lost(command_id, lease_id));
        }
        Ok(())
    }

    async fn list_unfinished_commands(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<UnfinishedCommand>> {
        self.ensure_open()?;
        let (tenant, command) = after.unwrap_or_default();
        // A partial index holds only the commands in flight, in key order.
        let rows: Vec<UnfinishedRow> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT tenant_id, command_id, lease_id, status = 'sealed', sealed_at_ms, target \
                 FROM commands WHERE status IN ('claimed', 'sealed') \
                 AND (tenant_id, command_id) > ($1, $2) ORDER BY tenant_id, command_id LIMIT $3",
                )
                .bind(&tenant)
                .bind(&command)
                .bind(i64::from(limit))
                .fetch_all(self.pool())
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(tenant_id, command_id, lease_id, sealed, sealed_at_ms, target)| {
                    UnfinishedCommand {
                        tenant_id,
                        command_id,
                        lease_id,
                        sealed,
                        sealed_at_ms: sealed_at_ms.map(to_u64),
                        target: target.and_then(|json| serde_json::from_value(json.0).ok()),
                    }
                },
            )
            .collect())
    }

    async fn complete_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        result: &Value,
    ) -> StoreResult<()> {
        let result = json_text(result);
        let completed = self
            .retrying_conflicts(|| {
                let write = (
                    (tenant_id.to_owned(), command_id.to_owned()),
                    lease_id.to_owned(),
                    result.clone(),
                    to_i64(self.now()),
                );
                // In the shared transaction of the next batch (`shared_commit.rs`), ordered by
                // its command id: it locks no session.
                self.shared_write(tenant_id, command_id, write, |tx, write| {
                    let ((tenant, command), lease, result, now) = write;
                    Box::pin(complete_in(tx, tenant, command, lease, result, *now))
                })
            })
            .await?;
        // A failing COMMIT surfaces as a non-retry-safe error, never as success or a lost lease.
        if completed != 1 {
            return Err(command_lease_lost(command_id, lease_id));
        }
        Ok(())
    }

    async fn command_receipt_exists(&self, tenant_id: &str, command_id: &str) -> StoreResult<bool> {
        self.ensure_open()?;
        let row: Option<(i32,)> = self
            .reading(|| {
                sqlx::query_as("SELECT 1 FROM commands WHERE tenant_id = $1 AND command_id = $2")
                    .bind(tenant_id)
                    .bind(command_id)
                    .fetch_optional(self.pool())
            })
            .await?;
        Ok(row.is_some())
    }

    async fn release_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        let query = || {
            sqlx::query(
                "DELETE FROM commands WHERE tenant_id = $1 AND command_id = $2 AND lease_id = $3 \
             AND status = 'claimed'",
            )
            .bind(tenant_id)
            .bind(command_id)
            .bind(lease_id)
        };
        self.guarded_update(&query).await?;
        Ok(())
    }

    async fn reopen_sealed_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        let query = || {
            sqlx::query(
                "DELETE FROM commands WHERE tenant_id = $1 AND command_id = $2 AND lease_id = $3 \
             AND status = 'sealed' AND result IS NULL",
            )
            .bind(tenant_id)
            .bind(command_id)
            .bind(lease_id)
        };
        self.guarded_update(&query).await?;
        Ok(())
    }

    async fn abandon_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        reason: &str,
    ) -> StoreResult<bool> {
        abandon_reason_required(reason)?;
        let now = to_i64(self.now());
        let query = || {
            sqlx::query(
                "UPDATE commands SET status = 'abandoned', abandon_reason = $3, updated_at_ms = $4 \
             WHERE tenant_id = $1 AND command_id = $2 AND status = 'sealed' AND result IS NULL",
            )
            .bind(tenant_id)
            .bind(command_id)
            .bind(reason)
            .bind(now)
        };
        Ok(self.guarded_update(&query).await? == 1)
    }

    async fn reap_receipts_over_budget(
        &self,
        max_bytes_per_tenant: u64,
        limit: u32,
    ) -> StoreResult<u64> {
        let query = || {
            // Only tenants over budget (one aggregate) are ranked: per tenant, newest first,
            // the bytes of each receipt and all newer ones.
            sqlx::query(
                "DELETE FROM commands WHERE ctid IN (SELECT ctid FROM (SELECT ctid, \
                 sum(COALESCE(result_bytes, octet_length(result::text), 0)) OVER (PARTITION BY \
                 tenant_id ORDER BY updated_at_ms DESC, command_id DESC) AS newer_bytes \
                 FROM commands WHERE status IN ('completed', 'abandoned') AND tenant_id IN \
                 (SELECT tenant_id FROM commands WHERE status IN ('completed', 'abandoned') \
                 GROUP BY tenant_id \
                 HAVING sum(COALESCE(result_bytes, octet_length(result::text), 0)) > $1)) ranked \
                 WHERE newer_bytes > $1 LIMIT $2)",
            )
            .bind(to_i64(max_bytes_per_tenant))
            .bind(i64::from(limit))
        };
        self.guarded_update(&query).await
    }

    async fn reap_command_receipts(&self, finished_before_ms: u64, limit: u32) -> StoreResult<u64> {
        let query = || {
            sqlx::query(
                "DELETE FROM commands WHERE ctid IN (SELECT ctid FROM commands \
             WHERE status IN ('completed', 'abandoned') AND updated_at_ms <= $1 LIMIT $2)",
            )
            .bind(to_i64(finished_before_ms))
            .bind(i64::from(limit))
        };
        self.guarded_update(&query).await
    }
}

/// Completes a claimed or sealed receipt held by `lease_id` with `result` (JSON text), on `tx`:
/// the number of receipts completed (0 when the lease no longer holds it). Completing again
/// with the same lease and result counts: the write that took the effect may have completed it
/// when its answer was lost.
pub(super) async fn complete_in(
    tx: &mut Tx,
    tenant_id: &str,
    command_id: &str,
    lease_id: &str,
    result: &str,
    now: i64,
) -> StoreResult<u64> {
    let done = sqlx::query(
        "UPDATE commands SET status = 'completed', expires_at_ms = NULL, result = $4::json, \
         result_bytes = octet_length($4), updated_at_ms = $5 WHERE tenant_id = $1 \
         AND command_id = $2 AND lease_id = $3 AND status IN ('claimed', 'sealed')",
    )
    .bind(tenant_id)
    .bind(command_id)
    .bind(lease_id)
    .bind(result)
    .bind(now)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    if done.rows_affected() == 1 {
        return Ok(1);
    }
    // Completed already by this lease with this result (`complete_again_is_a_no_op`).
    let again: Option<(i32,)> = sqlx::query_as(
        "SELECT 1 FROM commands WHERE tenant_id = $1 AND command_id = $2 AND lease_id = $3 \
         AND status = 'completed' AND result::jsonb = $4::jsonb",
    )
    .bind(tenant_id)
    .bind(command_id)
    .bind(lease_id)
    .bind(result)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(u64::from(again.is_some()))
}
