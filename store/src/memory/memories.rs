//! The memories of the memory tools (docs/agent.md §6.8), per tenant and scope.

use async_trait::async_trait;

use super::{Backend, StoreEngine};
use crate::error::StoreResult;
use crate::journal::JournalEntry;
use crate::model::MemoryRecord;
use crate::ports::AgentMemories;
use crate::rules::{memory_quota_exceeded, validate_memory};

#[async_trait]
impl<B: Backend> AgentMemories for StoreEngine<B> {
    async fn save_memory(
        &self,
        tenant_id: &str,
        mut record: MemoryRecord,
        max_entries: u32,
    ) -> StoreResult<MemoryRecord> {
        validate_memory(&record)?;
        self.write(|state, cx| {
            let key = (
                tenant_id.to_owned(),
                record.scope.clone(),
                record.name.clone(),
            );
            if !state.memories.contains_key(&key) {
                let in_scope = state
                    .memories
                    .range((tenant_id.to_owned(), record.scope.clone(), String::new())..)
                    .take_while(|((tenant, scope, _), _)| {
                        tenant == tenant_id && *scope == record.scope
                    })
                    .count();
                if in_scope >= max_entries as usize {
                    return Err(memory_quota_exceeded(max_entries));
                }
            }
            record.updated_at_ms = cx.now;
            state.memories.insert(key, record.clone());
            cx.record(JournalEntry::Memory {
                tenant_id: tenant_id.to_owned(),
                record: record.clone(),
            });
            Ok(record)
        })
    }

    async fn get_memory(
        &self,
        tenant_id: &str,
        scope: &str,
        name: &str,
    ) -> StoreResult<Option<MemoryRecord>> {
        let key = (tenant_id.to_owned(), scope.to_owned(), name.to_owned());
        self.read(|state, _| Ok(state.memories.get(&key).cloned()))
    }

    async fn list_memories(&self, tenant_id: &str, scope: &str) -> StoreResult<Vec<MemoryRecord>> {
        self.read(|state, _| {
            Ok(state
                .memories
                .range((tenant_id.to_owned(), scope.to_owned(), String::new())..)
                .take_while(|((tenant, s, _), _)| tenant == tenant_id && s == scope)
                .map(|(_, record)| record.clone())
                .collect())
        })
    }

    async fn delete_memory(&self, tenant_id: &str, scope: &str, name: &str) -> StoreResult<bool> {
        self.write(|state, cx| {
            let key = (tenant_id.to_owned(), scope.to_owned(), name.to_owned());
            if state.memories.remove(&key).is_none() {
                return Ok(false);
            }
            cx.record(JournalEntry::MemoryDeleted {
                tenant_id: tenant_id.to_owned(),
                scope: scope.to_owned(),
                name: name.to_owned(),
            });
            Ok(true)
        })
    }
}
