//! Whole sessions and tenant records in and out of a store, for session bundles
//! (docs/bundles.md): what `agent-runtime export` reads and `agent-runtime import` writes.
//!
//! A session travels as the journal entries the JSONL store would write for it
//! ([`JournalEntry`]), in one order on every backend: its record, its retained events (each with
//! the idempotency key it was appended with), the keys whose events were trimmed, its transcript
//! (the whole document, pending inputs included), its durable journal and its execution lease.
//! A tenant's command receipts and memories travel as `lease` and `memory` entries. Routes,
//! workers and webhook state belong to a deployment and do not travel.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{StoreError, StoreResult};
use crate::journal::JournalEntry;

/// What importing one session or record did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImportOutcome {
    /// It was not there; now it is, whole.
    Imported,
    /// It was there with exactly this content: nothing written (a re-import).
    Unchanged,
    /// Something with its id is there with other content: nothing written. The text says what.
    Conflict(String),
}

/// How many records an import of tenant records wrote, found already there, or refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportCounts {
    pub imported: u64,
    pub unchanged: u64,
    /// `(kind, id, why)` of each refused record.
    pub conflicts: Vec<(String, String, String)>,
}

impl ImportCounts {
    pub fn add(&mut self, kind: &str, id: &str, outcome: ImportOutcome) {
        match outcome {
            ImportOutcome::Imported => self.imported += 1,
            ImportOutcome::Unchanged => self.unchanged += 1,
            ImportOutcome::Conflict(why) => {
                self.conflicts.push((kind.to_owned(), id.to_owned(), why))
            }
        }
    }
}

/// The largest page of tenants, sessions or receipts one call lists.
pub const MAX_EXPORT_PAGE: u32 = 1000;

/// Reading and writing whole sessions and tenant records (see the module docs).
#[async_trait]
pub trait Portable: Send + Sync {
    /// Tenants owning a session, a command receipt or a memory, ascending, after `after`.
    async fn list_tenants(&self, after: Option<&str>, limit: u32) -> StoreResult<Vec<String>>;

    /// The ids of a tenant's sessions, whatever their status, ascending, after `after`.
    async fn list_session_ids(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<String>>;

    /// Everything a session owns, as entries in the order of the module docs; `None` when the
    /// tenant has no such session.
    async fn export_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Vec<JournalEntry>>>;

    /// A tenant's command receipts (`lease` entries) by command id ascending, after `after`.
    async fn export_receipts(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<JournalEntry>>;

    /// A tenant's memories (`memory` entries) by scope and name.
    async fn export_memories(&self, tenant_id: &str) -> StoreResult<Vec<JournalEntry>>;

    /// Writes one session as [`Portable::export_session`] gives it, all or nothing. A session
    /// that exports exactly these entries already is `Unchanged`; anything else stored under
    /// its id is a `Conflict`. Imported history notifies no webhook endpoint.
    async fn import_session(&self, entries: Vec<JournalEntry>) -> StoreResult<ImportOutcome>;

    /// Writes command receipts and memories, each on its own with the outcomes of
    /// [`Portable::import_session`].
    async fn import_records(&self, entries: Vec<JournalEntry>) -> StoreResult<ImportCounts>;

    /// Makes every import before it durable. A backend may commit imports without waiting for
    /// each to reach the disk (PostgreSQL: `synchronous_commit = off`), so an import is
    /// acknowledged only after this; one lost to a crash before it is imported again on the
    /// next run (a re-import writes only what is missing).
    async fn flush_imports(&self) -> StoreResult<()> {
        Ok(())
    }
}

/// The tenant and session a session's entries are for: those of its first entry, which must be
/// its record, and of every other entry, which must be of a kind a session owns.
pub fn session_of(entries: &[JournalEntry]) -> StoreResult<(String, String)> {
    let Some(JournalEntry::Session { record }) = entries.first() else {
        return Err(StoreError::invalid(
            "A session's entries must start with its record",
        ));
    };
    let tenant = &record.record.tenant_id;
    let session = &record.record.session_id;
    for entry in &entries[1..] {
        let owner = match entry {
            JournalEntry::Event {
                tenant_id,
                session_id,
                event,
                ..
            } if event.session_id == *session_id => Some((tenant_id, session_id)),
            JournalEntry::EventKey {
                tenant_id,
                session_id,
                event,
                ..
            } if event.session_id == *session_id => Some((tenant_id, session_id)),
            JournalEntry::Transcript {
                tenant_id,
                session_id,
                transcript: Some(transcript),
            } if transcript.session_id == *session_id => Some((tenant_id, session_id)),
            JournalEntry::DurableEvent { tenant_id, event } => {
                (event.thaw().session_id == *session).then_some((tenant_id, session))
            }
            JournalEntry::ExecutionLease { tenant_id, lease } => {
                (lease.session_id == *session).then_some((tenant_id, session))
            }
            _ => None,
        };
        if owner != Some((tenant, session)) {
            return Err(StoreError::invalid(format!(
                "A `{}` entry in session {session} of tenant {tenant} is not that session's",
                entry.kind()
            )));
        }
    }
    Ok((tenant.clone(), session.clone()))
}

/// What a tenant record is and its id within the tenant: `("receipt", command id)` or
/// `("memory", "scope/name")`; any other entry is not a tenant record (`InvalidArgument`).
pub fn record_key(entry: &JournalEntry) -> StoreResult<(&'static str, String)> {
    match entry {
        JournalEntry::Lease {
            command_id,
            lease: Some(_),
            ..
        } => Ok(("receipt", command_id.clone())),
        JournalEntry::Memory { record, .. } => {
            Ok(("memory", format!("{}/{}", record.scope, record.name)))
        }
        other => Err(StoreError::invalid(format!(
            "A `{}` entry is not a tenant record",
            other.kind()
        ))),
    }
}

/// Whether two backends' entries hold the same content: compared as JSON values, so the order
/// of an object's keys (which PostgreSQL's `jsonb` does not keep) does not matter.
pub fn same_entries(a: &[JournalEntry], b: &[JournalEntry]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            let a: Value = serde_json::to_value(a).unwrap_or(Value::Null);
            let b: Value = serde_json::to_value(b).unwrap_or(Value::Null);
            a == b
        })
}

/// The outcome of importing `incoming` where `existing` may already be stored.
pub fn outcome_against(
    existing: Option<&[JournalEntry]>,
    incoming: &[JournalEntry],
    what: &str,
) -> Option<ImportOutcome> {
    let existing = existing?;
    Some(if same_entries(existing, incoming) {
        ImportOutcome::Unchanged
    } else {
        ImportOutcome::Conflict(format!("{what} already exists here with other content"))
    })
}
