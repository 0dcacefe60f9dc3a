//! The shared store conformance suite against the in-memory backend.

use std::sync::Arc;

use agent_runtime_store::conformance::{Harness, StoreConfigForTest};
use agent_runtime_store::{MemoryStore, TestHooks, conformance_trim_hook};

async fn memory_store(config: StoreConfigForTest) -> Harness {
    let store = Arc::new(MemoryStore::new(crate::common::store_options(&config)));
    Harness::new(store.clone(), config.clock).with_trim_hook(conformance_trim_hook!(store))
}

agent_runtime_store::store_conformance_suite!(memory, memory_store);
agent_runtime_store::store_test_hook_suite!(memory_hooks, memory_store);
