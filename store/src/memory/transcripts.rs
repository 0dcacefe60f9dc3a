//! The transcript port (docs/storage.md §8): one document per session, each write one atomic
//! read-modify-write under the state lock, fenced like event appends.
//!
//! Messages are kept as their JSON text (`SharedObject::frozen`): a session's writer keeps its own
//! parsed copy, so the store is read only when a session is loaded or read, and what a reader
//! parses stays in the reader's copy (`detached`).

use async_trait::async_trait;

use super::state::{Scope, State, freeze_entries, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::{StoreError, StoreResult};
use crate::journal::{JournalEntry, TranscriptChange};
use crate::model::{ExecutionFence, Transcript, TranscriptEntry, TranscriptMutation};
use crate::ports::TranscriptStore;
use crate::rules::transcript_not_found;
use crate::transcript::{
    apply_mutation, fork_prefix, into_readable, new_transcript, pending_change, readable,
};

impl State {
    /// Stores a document and journals it whole.
    pub(super) fn put_transcript(&mut self, cx: &mut Ctx<'_>, key: &Scope, mut doc: Transcript) {
        freeze_entries(&mut doc, 0);
        self.transcripts.insert(key.clone(), doc.clone());
        cx.record(JournalEntry::Transcript {
            tenant_id: key.0.clone(),
            session_id: key.1.clone(),
            transcript: Some(doc),
        });
    }

    /// Applies a mutation in place (a rejected one changes nothing) and journals only what it
    /// changed, so a turn costs the turn's size, not the transcript's. Returns the entries it
    /// appended.
    pub(super) fn mutate_transcript(
        &mut self,
        cx: &mut Ctx<'_>,
        key: &Scope,
        mutation: TranscriptMutation,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let Some(doc) = self.transcripts.get_mut(key) else {
            return Err(transcript_not_found(&key.1));
        };
        let entries_before = doc.entries.len();
        let (dequeued, enqueued) = pending_change(&mutation);
        apply_mutation(doc, mutation, cx.now)?;
        let appended: Vec<TranscriptEntry> = doc.entries[entries_before..].to_vec();
        freeze_entries(doc, entries_before);
        let change = TranscriptChange {
            dequeued,
            enqueued,
            ..TranscriptChange::of(doc, entries_before..doc.entries.len())
        };
        cx.record(JournalEntry::TranscriptChange {
            tenant_id: key.0.clone(),
            session_id: key.1.clone(),
            change,
        });
        Ok(appended)
    }
}

/// A kept document's copy for a reader: its messages share their text with the kept ones, and
/// what the reader parses stays in the copy.
fn detached(doc: &Transcript) -> Transcript {
    let mut copy = doc.clone();
    for entry in &mut copy.entries {
        entry.message = entry.message.detached();
    }
    copy
}

#[async_trait]
impl<B: Backend> TranscriptStore for StoreEngine<B> {
    async fn create_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Transcript> {
        if tenant_id.trim().is_empty() || session_id.trim().is_empty() {
            return Err(StoreError::invalid("Transcript ids must not be blank"));
        }
        self.write(|state, cx| {
            let key = scope(tenant_id, session_id);
            state.check_fence(&key, fence, cx.now)?;
            if let Some(existing) = state.transcripts.get(&key) {
                return Ok(into_readable(detached(existing)));
            }
            let doc = new_transcript(session_id, cx.now);
            state.put_transcript(cx, &key, doc.clone());
            Ok(doc)
        })
    }

    async fn load_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Transcript>> {
        let kept = self.read(|state, _| {
            Ok(state
                .transcripts
                .get(&scope(tenant_id, session_id))
                .map(detached))
        })?;
        // The view is built, and the messages parsed, after the state lock is released.
        Ok(kept.map(into_readable))
    }

    async fn mutate_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        mutation: TranscriptMutation,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.write(|state, cx| {
            let key = scope(tenant_id, session_id);
            state.check_fence(&key, fence, cx.now)?;
            state.mutate_transcript(cx, &key, mutation)
        })
    }

    async fn fork_transcript(
        &self,
        tenant_id: &str,
        source_session_id: &str,
        target_session_id: &str,
        message_id: Option<&str>,
    ) -> StoreResult<Transcript> {
        if target_session_id.trim().is_empty() {
            return Err(StoreError::invalid("Transcript ids must not be blank"));
        }
        self.write(|state, cx| {
            let source = state
                .transcripts
                .get(&scope(tenant_id, source_session_id))
                .map(detached)
                .ok_or_else(|| transcript_not_found(source_session_id))?;
            let target = scope(tenant_id, target_session_id);
            // A fork starts a new session; it never overwrites an existing transcript.
            if state.transcripts.contains_key(&target) {
                return Err(StoreError::invalid(format!(
                    "Transcript of Session {target_session_id} already exists"
                )));
            }
            let doc = fork_prefix(&source, target_session_id, message_id, cx.now)?;
            let view = readable(&doc);
            state.put_transcript(cx, &target, doc);
            Ok(view)
        })
    }

    async fn delete_transcript(&self, tenant_id: &str, session_id: &str) -> StoreResult<()> {
        self.write(|state, cx| {
            let key = scope(tenant_id, session_id);
            if state.transcripts.remove(&key).is_some() {
                cx.record(JournalEntry::Transcript {
                    tenant_id: key.0,
                    session_id: key.1,
                    transcript: None,
                });
            }
            Ok(())
        })
    }

    async fn list_transcripts(&self, tenant_id: &str) -> StoreResult<Vec<String>> {
        self.read(|state, _| {
            Ok(state
                .transcripts
                .keys()
                .filter(|(tenant, _)| tenant == tenant_id)
                .map(|(_, session)| session.clone())
                .collect())
        })
    }
}
