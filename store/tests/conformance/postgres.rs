//! The shared store conformance suite against PostgreSQL: one fresh database per case.

use std::sync::Arc;

use agent_runtime_store::conformance::{Harness, StoreConfigForTest};
use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::{PostgresOptions, PostgresStore, TestHooks, conformance_trim_hook};

async fn postgres_store(config: StoreConfigForTest) -> Harness {
    let url = fresh_database_url().await.expect("a test database");
    let options = PostgresOptions {
        clock: config.shared_clock(),
        max_events_per_session: config.max_events_per_session,
        max_durable_events_per_session: config.max_durable_events_per_session,
        ..PostgresOptions::default()
    };
    let store = Arc::new(
        PostgresStore::connect(&url, options)
            .await
            .expect("connect"),
    );
    Harness::new(store.clone(), config.clock).with_trim_hook(conformance_trim_hook!(store))
}

agent_runtime_store::store_conformance_suite!(postgres, postgres_store);
agent_runtime_store::store_test_hook_suite!(postgres_hooks, postgres_store);
