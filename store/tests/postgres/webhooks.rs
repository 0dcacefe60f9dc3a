//! The webhook outbox's reads on PostgreSQL touch the pending deliveries only, never every
//! delivery kept for redelivery (seven days of them by default). A claim that joined the queue
//! heads to the table let the planner scan the table whole on every claim (154 ms per claim under
//! B1's load, growing with the retention), and the metrics read counted the failed deliveries by
//! reading the delivered ones too. Checked black-box: the table's sequential-scan counter does not
//! move while they run, and does for a query that must scan, so the counter is live. A backend
//! publishes its counters when it exits, so each step closes its connections first.

use std::time::Duration;

use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::{
    PostgresOptions, PostgresStore, StoreLifecycle, WebhookOutbox, WebhookSubscription,
};
use sqlx::{Connection, PgConnection};

async fn store(url: &str) -> PostgresStore {
    PostgresStore::connect(url, PostgresOptions::default())
        .await
        .unwrap()
}

/// The table's sequential scans, once every other backend of the database has exited.
async fn sequential_scans(direct: &mut PgConnection) -> i64 {
    let others = "SELECT count(*) FROM pg_stat_activity \
                  WHERE datname = current_database() AND pid <> pg_backend_pid()";
    for _ in 0..200 {
        let count: i64 = sqlx::query_scalar(others)
            .fetch_one(&mut *direct)
            .await
            .unwrap();
        if count == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sqlx::query_scalar(
        "SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'webhook_deliveries'",
    )
    .fetch_one(&mut *direct)
    .await
    .unwrap()
}

#[tokio::test]
async fn claiming_and_measuring_the_outbox_never_scan_every_kept_delivery() {
    let url = fresh_database_url().await.expect("a test database");
    let setup = store(&url).await;
    let subscription = WebhookSubscription {
        tenant_id: "t".to_owned(),
        endpoint_id: "hook".to_owned(),
        event_types: vec!["request.completed".to_owned()],
    };
    setup.sync_webhook_endpoints(&[subscription]).await.unwrap();
    setup.close().await.unwrap();
    // 20,000 delivered (kept for redelivery), 10 pending in 10 sessions.
    let mut writer = PgConnection::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO webhook_deliveries (delivery_id, tenant_id, endpoint_id, session_id, \
           event_type, source, created_at_ms, attempts, status, finished_at_ms) \
         SELECT 'msg_' || g, 't', 'hook', 's' || (g % 50), 'request.completed', '{}'::json, g, 1, \
                CASE WHEN g > 20000 THEN 'pending' ELSE 'delivered' END, \
                CASE WHEN g > 20000 THEN NULL ELSE g END \
           FROM generate_series(1, 20010) g",
    )
    .execute(&mut writer)
    .await
    .unwrap();
    sqlx::query("ANALYZE webhook_deliveries")
        .execute(&mut writer)
        .await
        .unwrap();
    writer.close().await.unwrap();

    let mut direct = PgConnection::connect(&url).await.unwrap();
    let before = sequential_scans(&mut direct).await;
    let outbox = store(&url).await;
    for _ in 0..3 {
        outbox.webhook_outbox_stats().await.unwrap();
    }
    let claimed = outbox.claim_webhook_deliveries(32, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 10, "one head per session, all due");
    let stats = outbox.webhook_outbox_stats().await.unwrap();
    assert_eq!((stats[0].pending, stats[0].failed), (10, 0));
    outbox.close().await.unwrap();
    assert_eq!(
        sequential_scans(&mut direct).await,
        before,
        "a claim or the metrics read every delivery"
    );

    // The counter is live: a query that must read the whole table moves it.
    let mut other = PgConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT count(*) FROM webhook_deliveries WHERE event_type <> 'x'")
        .execute(&mut other)
        .await
        .unwrap();
    other.close().await.unwrap();
    assert!(sequential_scans(&mut direct).await > before);
}
