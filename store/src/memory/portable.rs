//! Whole sessions and tenant records in and out of the engine (`crate::portable`). An import is
//! applied to an empty state first, exactly as a replay applies journal lines, so the entries
//! are checked and made into what this engine would export before the real state changes; then
//! it is applied again to the real state and journaled as one change.

use std::collections::BTreeSet;

use async_trait::async_trait;

use super::state::{Scope, State, scope};
use super::{Backend, StoreEngine};
use crate::error::{StoreError, StoreResult};
use crate::journal::JournalEntry;
use crate::portable::{
    ImportCounts, ImportOutcome, Portable, outcome_against, record_key, session_of,
};

impl State {
    /// Everything the session `key` owns, in the order of `crate::portable`.
    pub(crate) fn session_entries(&self, key: &Scope) -> Option<Vec<JournalEntry>> {
        let stored = self.sessions.get(key)?;
        let (tenant_id, session_id) = key;
        let mut record = stored.clone();
        // Empty metadata reads back as none from PostgreSQL: it travels as none from everywhere.
        record.metadata = record.metadata.filter(|metadata| metadata.len() > 2);
        let mut entries = vec![JournalEntry::Session { record }];
        let log = self.event_logs.get(key);
        entries.extend(log.into_iter().flat_map(|log| &log.events).map(
            |(event, idempotency_key)| JournalEntry::Event {
                tenant_id: tenant_id.clone(),
                session_id: session_id.clone(),
                event: event.clone(),
                idempotency_key: idempotency_key.clone(),
            },
        ));
        for (idempotency_key, event) in self.event_keys.get(key).into_iter().flatten() {
            if !log.is_some_and(|log| log.retains(event)) {
                entries.push(JournalEntry::EventKey {
                    tenant_id: tenant_id.clone(),
                    session_id: session_id.clone(),
                    idempotency_key: idempotency_key.clone(),
                    event: event.clone(),
                });
            }
        }
        if let Some(transcript) = self.transcripts.get(key) {
            entries.push(JournalEntry::Transcript {
                tenant_id: tenant_id.clone(),
                session_id: session_id.clone(),
                transcript: Some(transcript.clone()),
            });
        }
        entries.extend(self.durable.get(key).into_iter().flatten().map(|event| {
            JournalEntry::DurableEvent {
                tenant_id: tenant_id.clone(),
                event: event.clone(),
            }
        }));
        if let Some(lease) = self.execution_leases.get(key) {
            entries.push(JournalEntry::ExecutionLease {
                tenant_id: tenant_id.clone(),
                lease: lease.clone(),
            });
        }
        Some(entries)
    }

    /// Whether anything at all is kept under the session `key` (a record, events, keys, a
    /// transcript, a journal or a lease).
    fn holds_session_data(&self, key: &Scope) -> bool {
        self.sessions.contains_key(key)
            || self.event_logs.contains_key(key)
            || self.event_keys.contains_key(key)
            || self.transcripts.contains_key(key)
            || self.durable.contains_key(key)
            || self.execution_leases.contains_key(key)
    }
}

/// `entries` applied to an empty state: the error says which entry does not fit.
fn applied(entries: &[JournalEntry], retention: u64) -> StoreResult<State> {
    let mut state = State::default();
    for entry in entries {
        state
            .apply(entry.clone(), retention)
            .map_err(StoreError::invalid)?;
    }
    Ok(state)
}

#[async_trait]
impl<B: Backend> Portable for StoreEngine<B> {
    async fn list_tenants(&self, after: Option<&str>, limit: u32) -> StoreResult<Vec<String>> {
        self.read(|state, _| {
            let mut tenants: BTreeSet<&str> = BTreeSet::new();
            tenants.extend(state.sessions.keys().map(|(tenant, _)| tenant.as_str()));
            tenants.extend(state.commands.keys().map(|(tenant, _)| tenant.as_str()));
            tenants.extend(state.memories.keys().map(|(tenant, _, _)| tenant.as_str()));
            Ok(tenants
                .into_iter()
                .filter(|tenant| after.is_none_or(|after| *tenant > after))
                .take(limit as usize)
                .map(str::to_owned)
                .collect())
        })
    }

    async fn list_session_ids(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<String>> {
        let from = scope(tenant_id, after.unwrap_or_default());
        self.read(|state, _| {
            Ok(state
                .sessions
                .range(from..)
                .map(|(key, _)| key)
                .take_while(|(tenant, _)| tenant == tenant_id)
                .filter(|(_, session)| after.is_none_or(|after| session.as_str() > after))
                .take(limit as usize)
                .map(|(_, session)| session.clone())
                .collect())
        })
    }

    async fn export_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Vec<JournalEntry>>> {
        let key = scope(tenant_id, session_id);
        self.read(|state, _| Ok(state.session_entries(&key)))
    }

    async fn export_receipts(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<JournalEntry>> {
        let from = scope(tenant_id, after.unwrap_or_default());
        self.read(|state, _| {
            Ok(state
                .commands
                .range(from..)
                .take_while(|((tenant, _), _)| tenant == tenant_id)
                .filter(|((_, command), _)| after.is_none_or(|after| command.as_str() > after))
                .take(limit as usize)
                .map(|((tenant, command), lease)| JournalEntry::Lease {
                    tenant_id: tenant.clone(),
                    command_id: command.clone(),
                    lease: Some(portable_receipt(lease)),
                })
                .collect())
        })
    }

    async fn export_memories(&self, tenant_id: &str) -> StoreResult<Vec<JournalEntry>> {
        let from = (tenant_id.to_owned(), String::new(), String::new());
        self.read(|state, _| {
            Ok(state
                .memories
                .range(from..)
                .take_while(|((tenant, _, _), _)| tenant == tenant_id)
                .map(|((tenant, _, _), record)| JournalEntry::Memory {
                    tenant_id: tenant.clone(),
                    record: record.clone(),
                })
                .collect())
        })
    }

    async fn import_session(&self, entries: Vec<JournalEntry>) -> StoreResult<ImportOutcome> {
        let (tenant_id, session_id) = session_of(&entries)?;
        let key = scope(&tenant_id, &session_id);
        let retention = self.inner.options.retention();
        let incoming = applied(&entries, retention)?
            .session_entries(&key)
            .ok_or_else(|| StoreError::invalid("A session's entries must hold its record"))?;
        self.write(|state, cx| {
            if state.holds_session_data(&key) {
                let existing = state.session_entries(&key).unwrap_or_default();
                let what = format!("Session {session_id} of tenant {tenant_id}");
                return Ok(outcome_against(Some(&existing), &incoming, &what)
                    .unwrap_or(ImportOutcome::Unchanged));
            }
            for entry in incoming {
                state
                    .apply(entry.clone(), retention)
                    .map_err(StoreError::invalid)?;
                cx.record(entry);
            }
            Ok(ImportOutcome::Imported)
        })
    }

    async fn import_records(&self, entries: Vec<JournalEntry>) -> StoreResult<ImportCounts> {
        let mut counts = ImportCounts::default();
        for entry in entries {
            let (kind, id) = record_key(&entry)?;
            let outcome = self.write(|state, cx| {
                let existing = match &entry {
                    JournalEntry::Lease {
                        tenant_id,
                        command_id,
                        ..
                    } => state
                        .commands
                        .get(&scope(tenant_id, command_id))
                        .map(|lease| JournalEntry::Lease {
                            tenant_id: tenant_id.clone(),
                            command_id: command_id.clone(),
                            lease: Some(portable_receipt(lease)),
                        }),
                    JournalEntry::Memory { tenant_id, record } => state
                        .memories
                        .get(&(tenant_id.clone(), record.scope.clone(), record.name.clone()))
                        .map(|stored| JournalEntry::Memory {
                            tenant_id: tenant_id.clone(),
                            record: stored.clone(),
                        }),
                    _ => None,
                };
                let what = format!("The {kind} {id}");
                let incoming = std::slice::from_ref(&entry);
                if let Some(outcome) =
                    outcome_against(existing.as_ref().map(std::slice::from_ref), incoming, &what)
                {
                    return Ok(outcome);
                }
                state
                    .apply(with_result_bytes(entry.clone()), 1)
                    .map_err(StoreError::invalid)?;
                cx.record(with_result_bytes(entry.clone()));
                Ok(ImportOutcome::Imported)
            })?;
            counts.add(kind, &id, outcome);
        }
        Ok(counts)
    }
}

/// A receipt as it travels: without its derived result size (each store measures its own).
pub(crate) fn portable_receipt(
    lease: &crate::journal::CommandLease,
) -> crate::journal::CommandLease {
    crate::journal::CommandLease {
        result_bytes: None,
        ..lease.clone()
    }
}

/// A receipt entry with the size of its result measured, as the engine keeps it.
fn with_result_bytes(entry: JournalEntry) -> JournalEntry {
    match entry {
        JournalEntry::Lease {
            tenant_id,
            command_id,
            lease: Some(mut lease),
        } => {
            lease.result_bytes = lease.result.as_ref().map(|result| result.len() as u64);
            JournalEntry::Lease {
                tenant_id,
                command_id,
                lease: Some(lease),
            }
        }
        other => other,
    }
}
