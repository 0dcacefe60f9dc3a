//! The webhook outbox in `webhook_endpoints` and `webhook_deliveries` (docs/storage.md §11).
//! Deliveries are inserted by the triggers of migration 0026; this side claims, records and reaps
//! them. Claims take row locks with `SKIP LOCKED` and expire, so several processes deliver from one
//! outbox without sending a delivery twice at once.

use async_trait::async_trait;

use super::{PostgresStore, db_error, to_i64, to_u64};
use crate::error::{StoreError, StoreResult};
use crate::memory::failure_clock;
use crate::outbox::*;
use crate::ports::WebhookOutbox;

type EndpointRow = (
    String,
    String,
    Vec<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
);

const ENDPOINT_COLUMNS: &str =
    "tenant_id, endpoint_id, event_types, disabled_at_ms, disabled_reason, failing_since_ms";

fn endpoint(row: EndpointRow) -> WebhookEndpoint {
    let (tenant_id, endpoint_id, event_types, disabled_at, disabled_reason, failing_since) = row;
    WebhookEndpoint {
        tenant_id,
        endpoint_id,
        event_types,
        disabled_at_ms: disabled_at.map(to_u64),
        disabled_reason,
        failing_since_ms: failing_since.map(to_u64),
    }
}

type DeliveryRow = (
    String,
    i64,
    String,
    String,
    String,
    String,
    String,
    i64,
    i32,
    i64,
    String,
    Option<String>,
    Option<i64>,
);

const DELIVERY_COLUMNS: &str = "delivery_id, position, tenant_id, endpoint_id, session_id, \
     event_type, source::text, created_at_ms, attempts, next_attempt_at_ms, status, last_error, \
     finished_at_ms";

fn delivery(row: DeliveryRow) -> StoreResult<WebhookDelivery> {
    let (delivery_id, position, tenant_id, endpoint_id, session_id, event_type, source) =
        (row.0, row.1, row.2, row.3, row.4, row.5, row.6);
    let corrupt = |what: &str| StoreError::Backend {
        message: format!("webhook delivery {delivery_id} has an unreadable {what}"),
        retry_safe: true,
    };
    let source = serde_json::from_str(&source).map_err(|_| corrupt("source"))?;
    let status = DeliveryStatus::parse(&row.10).ok_or_else(|| corrupt("status"))?;
    Ok(WebhookDelivery {
        delivery_id,
        position: to_u64(position),
        tenant_id,
        endpoint_id,
        session_id,
        event_type,
        source,
        created_at_ms: to_u64(row.7),
        attempts: u32::try_from(row.8).unwrap_or(0),
        next_attempt_at_ms: to_u64(row.9),
        status,
        last_error: row.11,
        finished_at_ms: row.12.map(to_u64),
    })
}

fn deliveries(rows: Vec<DeliveryRow>) -> StoreResult<Vec<WebhookDelivery>> {
    rows.into_iter().map(delivery).collect()
}

impl PostgresStore {
    /// Moves an endpoint's failure clock after its latest attempt (see
    /// `crate::memory::failure_clock`), writing the endpoint only when it changes.
    async fn move_failure_clock(
        &self,
        tx: &mut super::Tx,
        tenant_id: &str,
        endpoint_id: &str,
        failed: bool,
        now: u64,
        disable_after_ms: u64,
    ) -> StoreResult<()> {
        let query = format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints \
             WHERE tenant_id = $1 AND endpoint_id = $2 FOR NO KEY UPDATE"
        );
        let row: Option<EndpointRow> = sqlx::query_as(&query)
            .bind(tenant_id)
            .bind(endpoint_id)
            .fetch_optional(&mut **tx)
            .await
            .map_err(db_error)?;
        let Some(before) = row.map(endpoint) else {
            return Ok(());
        };
        let mut after = before.clone();
        failure_clock(&mut after, failed, now, disable_after_ms);
        if after != before {
            sqlx::query(
                "UPDATE webhook_endpoints SET failing_since_ms = $3, disabled_at_ms = $4, \
                 disabled_reason = $5 WHERE tenant_id = $1 AND endpoint_id = $2",
            )
            .bind(&after.tenant_id)
            .bind(&after.endpoint_id)
            .bind(after.failing_since_ms.map(to_i64))
            .bind(after.disabled_at_ms.map(to_i64))
            .bind(&after.disabled_reason)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        }
        Ok(())
    }
}

#[async_trait]
impl WebhookOutbox for PostgresStore {
    async fn sync_webhook_endpoints(
        &self,
        subscriptions: &[WebhookSubscription],
    ) -> StoreResult<()> {
        self.ensure_open()?;
        let mut tx = self.begin().await?;
        // Endpoints change rarely; one writer at a time keeps concurrent syncs from interleaving.
        sqlx::query("LOCK TABLE webhook_endpoints IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let tenants: Vec<&str> = subscriptions.iter().map(|s| s.tenant_id.as_str()).collect();
        let ids: Vec<&str> = subscriptions
            .iter()
            .map(|s| s.endpoint_id.as_str())
            .collect();
        sqlx::query(
            "DELETE FROM webhook_endpoints e WHERE NOT EXISTS ( \
               SELECT 1 FROM UNNEST($1::text[], $2::text[]) AS k(tenant_id, endpoint_id) \
                WHERE k.tenant_id = e.tenant_id AND k.endpoint_id = e.endpoint_id)",
        )
        .bind(&tenants)
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        for subscription in subscriptions {
            sqlx::query(
                "INSERT INTO webhook_endpoints (tenant_id, endpoint_id, event_types) \
                 VALUES ($1, $2, $3) ON CONFLICT (tenant_id, endpoint_id) DO UPDATE \
                 SET event_types = EXCLUDED.event_types \
                 WHERE webhook_endpoints.event_types IS DISTINCT FROM EXCLUDED.event_types",
            )
            .bind(&subscription.tenant_id)
            .bind(&subscription.endpoint_id)
            .bind(&subscription.event_types)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        self.commit(tx).await
    }

    async fn list_webhook_endpoints(&self) -> StoreResult<Vec<WebhookEndpoint>> {
        self.ensure_open()?;
        let query = format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints ORDER BY tenant_id, endpoint_id"
        );
        let rows: Vec<EndpointRow> = self
            .reading(|| sqlx::query_as(&query).fetch_all(self.pool()))
            .await?;
        Ok(rows.into_iter().map(endpoint).collect())
    }

    async fn set_webhook_endpoint_enabled(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        enabled: bool,
        reason: &str,
    ) -> StoreResult<Option<bool>> {
        self.ensure_open()?;
        let mut tx = self.begin().await?;
        let disabled: Option<(Option<i64>,)> = sqlx::query_as(
            "SELECT disabled_at_ms FROM webhook_endpoints \
             WHERE tenant_id = $1 AND endpoint_id = $2 FOR NO KEY UPDATE",
        )
        .bind(tenant_id)
        .bind(endpoint_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        // Ended here, not by dropping it: a dropped transaction keeps its row lock until its
        // connection is used again, and claims skip locked rows.
        let unchanged = match disabled {
            None => Some(None),
            Some((disabled_at,)) if disabled_at.is_none() == enabled => Some(Some(false)),
            Some(_) => None,
        };
        if let Some(answer) = unchanged {
            tx.rollback().await.map_err(db_error)?;
            return Ok(answer);
        }
        let update = if enabled {
            sqlx::query(
                "UPDATE webhook_endpoints SET disabled_at_ms = NULL, disabled_reason = NULL, \
                 failing_since_ms = NULL WHERE tenant_id = $1 AND endpoint_id = $2",
            )
            .bind(tenant_id)
            .bind(endpoint_id)
        } else {
            sqlx::query(
                "UPDATE webhook_endpoints SET disabled_at_ms = $3, disabled_reason = $4 \
                 WHERE tenant_id = $1 AND endpoint_id = $2",
            )
            .bind(tenant_id)
            .bind(endpoint_id)
            .bind(to_i64(self.now()))
            .bind(reason)
        };
        update.execute(&mut *tx).await.map_err(db_error)?;
        self.commit(tx).await?;
        Ok(Some(true))
    }

    async fn claim_webhook_deliveries(
        &self,
        limit: u32,
        claim_ttl_ms: u64,
    ) -> StoreResult<Vec<ClaimedDelivery>> {
        self.ensure_open()?;
        let now = self.now();
        let claim_id = agent_runtime::ids::nanoid();
        let mut tx = self.begin().await?;
        // The heads of the (endpoint, session) queues, read from the pending index alone; then
        // those due and free, fetched by primary key and locked so that two claimers never take
        // the same row. Joining the heads to the table instead lets the planner scan the whole
        // table (every delivery kept for redelivery), which grows with the retention.
        let query = format!(
            "WITH due AS ( \
               SELECT d.position FROM webhook_deliveries d \
                 JOIN webhook_endpoints e \
                   ON e.tenant_id = d.tenant_id AND e.endpoint_id = d.endpoint_id \
                WHERE d.position = ANY (ARRAY( \
                        SELECT DISTINCT ON (p.tenant_id, p.endpoint_id, p.session_id) p.position \
                          FROM webhook_deliveries p WHERE p.status = 'pending' \
                         ORDER BY p.tenant_id, p.endpoint_id, p.session_id, p.position)) \
                  AND d.status = 'pending' AND e.disabled_at_ms IS NULL \
                  AND d.next_attempt_at_ms <= $1 \
                  AND (d.claim_expires_at_ms IS NULL OR d.claim_expires_at_ms <= $1) \
                ORDER BY d.position LIMIT $2 FOR UPDATE OF d SKIP LOCKED) \
             UPDATE webhook_deliveries d SET claim_id = $3, claim_expires_at_ms = $4 \
               FROM due WHERE d.position = due.position \
             RETURNING {}",
            DELIVERY_COLUMNS
                .split(", ")
                .map(|column| format!("d.{column}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let rows: Vec<DeliveryRow> = sqlx::query_as(&query)
            .bind(to_i64(now))
            .bind(i64::from(limit))
            .bind(&claim_id)
            .bind(to_i64(now.saturating_add(claim_ttl_ms)))
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        self.commit(tx).await?;
        let mut claimed: Vec<ClaimedDelivery> = deliveries(rows)?
            .into_iter()
            .map(|delivery| ClaimedDelivery {
                delivery,
                claim_id: claim_id.clone(),
            })
            .collect();
        claimed.sort_by_key(|claim| claim.delivery.position);
        Ok(claimed)
    }

    async fn record_webhook_attempts(
        &self,
        attempts: &[(ClaimedDelivery, AttemptOutcome)],
        disable_after_ms: u64,
    ) -> StoreResult<Vec<bool>> {
        self.ensure_open()?;
        let now = self.now();
        let mut tx = self.begin().await?;
        let mut recorded = Vec::with_capacity(attempts.len());
        // Each endpoint's outcomes in order: whether the last delivered, whether any failed.
        let mut endpoints: Vec<((String, String), bool)> = Vec::new();
        for (claim, outcome) in attempts {
            let delivery = &claim.delivery;
            let (after, failed) = outcome.applied_to(DeliveryState::of(delivery), now);
            let done = sqlx::query(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, status = $3, \
                 next_attempt_at_ms = $4, \
                 last_error = $5, finished_at_ms = $6, claim_id = NULL, claim_expires_at_ms = NULL \
                 WHERE position = $1 AND claim_id = $2 AND status = 'pending'",
            )
            .bind(to_i64(delivery.position))
            .bind(&claim.claim_id)
            .bind(after.status.as_str())
            .bind(to_i64(after.next_attempt_at_ms))
            .bind(&after.last_error)
            .bind(after.finished_at_ms.map(to_i64))
            .execute(&mut *tx)
            .await
            .map_err(db_error)?
            .rows_affected()
                > 0;
            recorded.push(done);
            if done {
                let key = (delivery.tenant_id.clone(), delivery.endpoint_id.clone());
                match endpoints.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, last_failed)) => *last_failed = failed,
                    None => endpoints.push((key, failed)),
                }
            }
        }
        for ((tenant_id, endpoint_id), failed) in endpoints {
            self.move_failure_clock(
                &mut tx,
                &tenant_id,
                &endpoint_id,
                failed,
                now,
                disable_after_ms,
            )
            .await?;
        }
        self.commit(tx).await?;
        Ok(recorded)
    }

    async fn list_webhook_deliveries(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        status: Option<DeliveryStatus>,
        after_position: u64,
        limit: u32,
    ) -> StoreResult<Vec<WebhookDelivery>> {
        self.ensure_open()?;
        let query = format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries \
             WHERE tenant_id = $1 AND endpoint_id = $2 AND position > $3 \
               AND ($4::text IS NULL OR status = $4) \
             ORDER BY position LIMIT $5"
        );
        let rows: Vec<DeliveryRow> = self
            .reading(|| {
                sqlx::query_as(&query)
                    .bind(tenant_id)
                    .bind(endpoint_id)
                    .bind(to_i64(after_position))
                    .bind(status.map(DeliveryStatus::as_str))
                    .bind(i64::from(limit))
                    .fetch_all(self.pool())
            })
            .await?;
        deliveries(rows)
    }

    async fn redeliver_webhook(
        &self,
        tenant_id: &str,
        delivery_id: &str,
    ) -> StoreResult<Option<bool>> {
        self.ensure_open()?;
        let mut tx = self.begin().await?;
        let status: Option<(String,)> = sqlx::query_as(
            "SELECT status FROM webhook_deliveries \
             WHERE tenant_id = $1 AND delivery_id = $2 FOR UPDATE",
        )
        .bind(tenant_id)
        .bind(delivery_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        // Ended here, not by dropping it (see `set_webhook_endpoint_enabled`).
        let unchanged = match status {
            None => Some(None),
            Some((status,)) if status == DeliveryStatus::Pending.as_str() => Some(Some(false)),
            Some(_) => None,
        };
        if let Some(answer) = unchanged {
            tx.rollback().await.map_err(db_error)?;
            return Ok(answer);
        }
        sqlx::query(
            "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at_ms = 0, \
             finished_at_ms = NULL WHERE tenant_id = $1 AND delivery_id = $2",
        )
        .bind(tenant_id)
        .bind(delivery_id)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        self.commit(tx).await?;
        Ok(Some(true))
    }

    async fn webhook_outbox_stats(&self) -> StoreResult<Vec<WebhookEndpointStats>> {
        self.ensure_open()?;
        type Row = (String, String, bool, i64, i64, Option<i64>);
        let rows: Vec<Row> = self
            .reading(|| {
                sqlx::query_as(
                    // Each count from its partial index (pending, failed): never a read of
                    // the delivered ones kept for redelivery.
                    "SELECT e.tenant_id, e.endpoint_id, e.disabled_at_ms IS NOT NULL, \
                            p.pending, \
                            (SELECT count(*) FROM webhook_deliveries d \
                              WHERE d.tenant_id = e.tenant_id AND d.endpoint_id = e.endpoint_id \
                                AND d.status = 'failed'), \
                            p.oldest \
                       FROM webhook_endpoints e, LATERAL ( \
                            SELECT count(*) AS pending, min(d.created_at_ms) AS oldest \
                              FROM webhook_deliveries d \
                             WHERE d.tenant_id = e.tenant_id AND d.endpoint_id = e.endpoint_id \
                               AND d.status = 'pending') p \
                      ORDER BY e.tenant_id, e.endpoint_id",
                )
                .fetch_all(self.pool())
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(tenant_id, endpoint_id, disabled, pending, failed, oldest)| {
                    WebhookEndpointStats {
                        tenant_id,
                        endpoint_id,
                        disabled,
                        pending: to_u64(pending),
                        failed: to_u64(failed),
                        oldest_pending_at_ms: oldest.map(to_u64),
                    }
                },
            )
            .collect())
    }

    async fn reap_webhook_deliveries(
        &self,
        finished_before_ms: u64,
        max_pending_per_tenant: u64,
        limit: u32,
    ) -> StoreResult<ReapedDeliveries> {
        self.ensure_open()?;
        let mut tx = self.begin().await?;
        let finished = sqlx::query(
            "DELETE FROM webhook_deliveries WHERE position IN ( \
               SELECT position FROM webhook_deliveries \
                WHERE status <> 'pending' AND finished_at_ms <= $1 LIMIT $2)",
        )
        .bind(to_i64(finished_before_ms))
        .bind(i64::from(limit))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        let dropped = sqlx::query(
            "DELETE FROM webhook_deliveries WHERE position IN ( \
               SELECT position FROM ( \
                 SELECT position, row_number() OVER ( \
                          PARTITION BY tenant_id ORDER BY position DESC) AS newer \
                   FROM webhook_deliveries WHERE status = 'pending') ranked \
                WHERE newer > $1 LIMIT $2)",
        )
        .bind(to_i64(max_pending_per_tenant))
        .bind(i64::from(limit))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
        self.commit(tx).await?;
        Ok(ReapedDeliveries { finished, dropped })
    }
}
