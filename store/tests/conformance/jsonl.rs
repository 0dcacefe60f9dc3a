//! The shared store conformance suite against the JSONL backend, one fresh directory per case.

use std::sync::Arc;

use agent_runtime_store::conformance::{Harness, StoreConfigForTest};
use agent_runtime_store::{JsonlStore, TestHooks, conformance_trim_hook};

async fn jsonl_store(config: StoreConfigForTest) -> Harness {
    let directory = tempfile::tempdir().expect("temporary store directory");
    let store = JsonlStore::open(directory.path(), crate::common::store_options(&config))
        .await
        .expect("open the JSONL store");
    let store = Arc::new(store);
    Harness::new(store.clone(), config.clock)
        .with_trim_hook(conformance_trim_hook!(store))
        .with_guard(directory)
}

agent_runtime_store::store_conformance_suite!(jsonl, jsonl_store);
agent_runtime_store::store_test_hook_suite!(jsonl_hooks, jsonl_store);
