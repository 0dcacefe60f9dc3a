//! Session records (docs/storage.md §1.3) with the PostgreSQL semantics (S6): `createdBy` and
//! `createdAt` are immutable after the first put, an empty metadata object reads as absent, pages
//! hold 1..=100 records ordered by `updatedAt` descending then session id ascending.

use std::collections::BTreeMap;

use agent_runtime::protocol::SessionStatus;
use async_trait::async_trait;

use super::state::scope;
use super::{Backend, StoreEngine};
use crate::error::StoreResult;
use crate::journal::{JournalEntry, StoredSession};
use crate::model::{ClosedSession, SessionPage, SessionRecord, TenantScope};
use crate::ports::SessionRecords;
use crate::rules::{check_session_record_ids, session_page};

#[async_trait]
impl<B: Backend> SessionRecords for StoreEngine<B> {
    async fn list_active_sessions(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<(String, String)>> {
        use std::ops::Bound;
        let from = match after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Unbounded,
        };
        self.read(|state, _| {
            Ok(state
                .sessions
                .range((from, Bound::Unbounded))
                .filter(|(_, stored)| stored.record.status == SessionStatus::Active)
                .take(limit as usize)
                .map(|(key, _)| key.clone())
                .collect())
        })
    }

    async fn list_closed_sessions(
        &self,
        tenants: &TenantScope,
        closed_before: &str,
        limit: u32,
    ) -> StoreResult<Vec<ClosedSession>> {
        self.read(|state, _| {
            let mut due: Vec<ClosedSession> = state
                .sessions
                .values()
                .map(|stored| &stored.record)
                .filter(|record| {
                    record.status == SessionStatus::Closed
                        && record.updated_at.as_str() <= closed_before
                        && tenants.covers(&record.tenant_id)
                })
                .map(|record| ClosedSession {
                    tenant_id: record.tenant_id.clone(),
                    session_id: record.session_id.clone(),
                    closed_at: record.updated_at.clone(),
                })
                .collect();
            due.sort_by(|a, b| a.closed_at.cmp(&b.closed_at));
            due.truncate(limit as usize);
            Ok(due)
        })
    }

    async fn closed_sessions_over_budget(
        &self,
        tenants: &TenantScope,
        max_bytes: u64,
        limit: u32,
    ) -> StoreResult<Vec<ClosedSession>> {
        self.read(|state, _| {
            // Each tenant's closed sessions, newest first, with what each retains.
            let mut by_tenant: BTreeMap<&str, Vec<(ClosedSession, u64)>> = BTreeMap::new();
            for (key, stored) in &state.sessions {
                let record = &stored.record;
                if record.status != SessionStatus::Closed || !tenants.covers(&record.tenant_id) {
                    continue;
                }
                let closed = ClosedSession {
                    tenant_id: record.tenant_id.clone(),
                    session_id: record.session_id.clone(),
                    closed_at: record.updated_at.clone(),
                };
                let bytes = state.closed_session_bytes(key);
                by_tenant
                    .entry(record.tenant_id.as_str())
                    .or_default()
                    .push((closed, bytes));
            }
            let mut over = Vec::new();
            for sessions in by_tenant.values_mut() {
                sessions.sort_by(|a, b| {
                    (&b.0.closed_at, &b.0.session_id).cmp(&(&a.0.closed_at, &a.0.session_id))
                });
                let mut kept = 0u64;
                for (closed, bytes) in sessions.drain(..) {
                    kept = kept.saturating_add(bytes);
                    if kept > max_bytes {
                        over.push(closed);
                    }
                }
            }
            over.sort_by(|a, b| (&a.closed_at, &a.session_id).cmp(&(&b.closed_at, &b.session_id)));
            over.truncate(limit as usize);
            Ok(over)
        })
    }

    async fn purge_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<bool> {
        self.write(|state, cx| {
            let key = scope(tenant_id, session_id);
            let closed = state
                .sessions
                .get(&key)
                .is_some_and(|stored| stored.record.status == SessionStatus::Closed);
            if closed {
                cx.dropped += state.purged_line_bytes(&key);
                state.purge_session(&key);
                cx.record(JournalEntry::SessionPurged {
                    tenant_id: tenant_id.to_owned(),
                    session_id: session_id.to_owned(),
                });
            }
            Ok(closed)
        })
    }

    async fn put_session(&self, record: &SessionRecord) -> StoreResult<()> {
        check_session_record_ids(record)?;
        self.write(|state, cx| {
            let key = scope(&record.tenant_id, &record.session_id);
            let mut stored = record.clone();
            if stored.metadata.as_ref().is_some_and(|m| m.is_empty()) {
                stored.metadata = None;
            }
            if let Some(existing) = state.sessions.get(&key) {
                stored.created_by = existing.record.created_by.clone();
                stored.created_at = existing.record.created_at.clone();
                stored.profile = existing.record.profile.clone();
            }
            let stored = StoredSession::from(stored);
            state.sessions.insert(key, stored.clone());
            cx.record(JournalEntry::Session { record: stored });
            Ok(())
        })
    }

    async fn get_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRecord>> {
        let stored =
            self.read(|state, _| Ok(state.sessions.get(&scope(tenant_id, session_id)).cloned()))?;
        Ok(stored.map(|stored| stored.thaw()))
    }

    async fn list_sessions(
        &self,
        tenant_id: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> StoreResult<SessionPage> {
        let (offset, limit) = session_page(cursor, limit)?;
        let (page, next_cursor) = self.read(|state, _| {
            let mut sessions: Vec<&StoredSession> = state
                .sessions
                .range(scope(tenant_id, "")..)
                .take_while(|((tenant, _), _)| tenant == tenant_id)
                .map(|(_, stored)| stored)
                .collect();
            sessions.sort_by(|a, b| {
                let (a, b) = (&a.record, &b.record);
                b.updated_at
                    .cmp(&a.updated_at)
                    .then_with(|| a.session_id.cmp(&b.session_id))
            });
            let (offset, limit) = (
                usize::try_from(offset).unwrap_or(usize::MAX),
                limit as usize,
            );
            let page: Vec<StoredSession> = sessions
                .iter()
                .skip(offset)
                .take(limit)
                .map(|stored| (*stored).clone())
                .collect();
            let next = offset.saturating_add(limit);
            let next_cursor = (next < sessions.len()).then(|| next.to_string());
            Ok((page, next_cursor))
        })?;
        // Parsed after the state lock is released.
        Ok(SessionPage {
            sessions: page.iter().map(StoredSession::thaw).collect(),
            next_cursor,
        })
    }
}

#[async_trait]
impl<B: Backend> crate::ports::TenantData for StoreEngine<B> {
    async fn delete_tenant(&self, tenant_id: &str) -> StoreResult<u64> {
        self.write(|state, cx| {
            let deleted = state.delete_tenant(tenant_id);
            if deleted > 0 {
                cx.record(JournalEntry::TenantDeleted {
                    tenant_id: tenant_id.to_owned(),
                });
            }
            Ok(deleted)
        })
    }
}
