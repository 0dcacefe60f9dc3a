//! The memories of the memory tools (docs/agent.md §6.8): saved, replaced, listed by name, deleted
//! for good, partitioned by tenant and scope, and bounded per scope.

use super::Factory;
use super::support::*;
use crate::error::{RuntimeErrorCode, StoreError};
use crate::model::MemoryRecord;

fn memory(scope: &str, name: &str, body: &str) -> MemoryRecord {
    MemoryRecord {
        scope: scope.to_owned(),
        name: name.to_owned(),
        description: format!("about {name}"),
        memory_type: "project".to_owned(),
        body: body.to_owned(),
        updated_at_ms: 0,
    }
}

pub async fn memories_are_saved_replaced_listed_by_name_and_deleted(factory: Factory) {
    let h = factory.start().await;
    let saved = h
        .store
        .save_memory(TENANT, memory("tenant", "style", "tabs"), 10)
        .await
        .unwrap();
    assert_eq!(saved.updated_at_ms, h.now(), "the store stamps the save");
    h.store
        .save_memory(TENANT, memory("tenant", "api-keys", "none"), 10)
        .await
        .unwrap();
    h.advance(1000);
    let replaced = h
        .store
        .save_memory(TENANT, memory("tenant", "style", "spaces"), 10)
        .await
        .unwrap();
    assert_eq!(replaced.updated_at_ms, h.now());
    assert_eq!(
        h.store.get_memory(TENANT, "tenant", "style").await,
        Ok(Some(replaced))
    );
    let names: Vec<String> = h
        .store
        .list_memories(TENANT, "tenant")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, ["api-keys", "style"]);
    assert_eq!(
        h.store.delete_memory(TENANT, "tenant", "style").await,
        Ok(true)
    );
    assert_eq!(
        h.store.delete_memory(TENANT, "tenant", "style").await,
        Ok(false)
    );
    assert_eq!(
        h.store.get_memory(TENANT, "tenant", "style").await,
        Ok(None)
    );
}

pub async fn memories_are_partitioned_by_tenant_and_scope(factory: Factory) {
    let h = factory.start().await;
    h.store
        .save_memory(TENANT, memory("tenant", "secret-plan", "a"), 10)
        .await
        .unwrap();
    assert_eq!(
        h.store
            .get_memory(OTHER_TENANT, "tenant", "secret-plan")
            .await,
        Ok(None)
    );
    assert_eq!(
        h.store.list_memories(OTHER_TENANT, "tenant").await,
        Ok(vec![])
    );
    assert_eq!(
        h.store
            .get_memory(TENANT, "user:alice", "secret-plan")
            .await,
        Ok(None)
    );
    assert_eq!(
        h.store
            .delete_memory(OTHER_TENANT, "tenant", "secret-plan")
            .await,
        Ok(false)
    );
    assert!(
        h.store
            .get_memory(TENANT, "tenant", "secret-plan")
            .await
            .unwrap()
            .is_some()
    );
}

pub async fn a_full_scope_refuses_new_names_but_replaces_existing_ones(factory: Factory) {
    let h = factory.start().await;
    for name in ["one", "two"] {
        h.store
            .save_memory(TENANT, memory("tenant", name, "x"), 2)
            .await
            .unwrap();
    }
    let refused = h
        .store
        .save_memory(TENANT, memory("tenant", "three", "x"), 2)
        .await;
    assert!(
        matches!(
            refused,
            Err(StoreError::Runtime {
                code: RuntimeErrorCode::QuotaExceeded,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        h.store.get_memory(TENANT, "tenant", "three").await,
        Ok(None)
    );
    h.store
        .save_memory(TENANT, memory("tenant", "two", "replaced"), 2)
        .await
        .unwrap();
    // Other scopes and tenants have their own count.
    h.store
        .save_memory(TENANT, memory("user:alice", "three", "x"), 2)
        .await
        .unwrap();
    h.store
        .save_memory(OTHER_TENANT, memory("tenant", "three", "x"), 2)
        .await
        .unwrap();
}

pub async fn invalid_memories_are_refused(factory: Factory) {
    let h = factory.start().await;
    for bad in [
        memory("tenant", "Not A Slug", "x"),
        memory("tenant", "double--hyphen", "x"),
        memory("tenant", "../escape", "x"),
        memory("", "name", "x"),
        MemoryRecord {
            memory_type: "secret".to_owned(),
            ..memory("tenant", "name", "x")
        },
    ] {
        let refused = h.store.save_memory(TENANT, bad.clone(), 10).await;
        assert!(
            matches!(refused, Err(StoreError::InvalidArgument(_))),
            "{bad:?}: {refused:?}"
        );
    }
    assert_eq!(h.store.list_memories(TENANT, "tenant").await, Ok(vec![]));
}
