//! Cases that need the memory/JSONL test hook `trim_agent_events_for_testing` (docs/storage.md
//! §1.1), run by `store_test_hook_suite!`. PostgreSQL may not provide the hook.

use super::Factory;
use super::support::*;

/// Case 23: idempotency keys outlive the log they were appended to.
pub async fn idempotency_keys_outlive_a_trimmed_log(factory: Factory) {
    let h = factory.start().await;
    let original = h
        .store
        .append_event(TENANT, stream_event(SESSION, "terminal"), Some("key-1"))
        .await
        .unwrap();

    h.trim_agent_events(TENANT, SESSION).await.expect("trim");
    let repeat = h
        .store
        .append_event(TENANT, stream_event(SESSION, "again"), Some("key-1"))
        .await
        .unwrap();

    assert_eq!(repeat.event_id, original.event_id);
    assert!(h.read_all(SESSION).await.is_empty());
    let by_key = h
        .store
        .get_event_by_idempotency_key(TENANT, SESSION, "key-1")
        .await
        .unwrap();
    assert_eq!(by_key, Some(original));
}
