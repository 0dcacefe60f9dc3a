//! What the conformance test files of the memory and JSONL backends share.

use agent_runtime_store::StoreOptions;
use agent_runtime_store::conformance::StoreConfigForTest;

/// The backend options a conformance case asks for (clock, retention, durable quota).
pub fn store_options(config: &StoreConfigForTest) -> StoreOptions {
    StoreOptions {
        clock: config.shared_clock(),
        max_events_per_session: config.max_events_per_session,
        max_durable_events_per_session: config.max_durable_events_per_session,
        ..StoreOptions::default()
    }
}
