//! A transcript change in one statement (migration 0017).
//!
//! While a session holds its lease it is the only writer of its transcript, so the store keeps
//! the document its last write here left (without its entries but the last one, which the next
//! appended message names as its parent), with the row's `revision`. The next change is applied
//! to that copy in Rust, and `write_transcript_at` writes it only if the fence holds and the row
//! is still at that revision: one round trip instead of three (fence, locked read, write). When
//! it cannot prove either it writes nothing, and the full path reads the row (`transcripts.rs`).
//!
//! Every write gives the row a revision never used before, so a copy matches the row only if
//! the row is the very write that made the copy: a write that rolled back, a delete, another
//! process's write, all leave a row the copy does not match. A copy is kept by the write that
//! made it, under the session's execution lock, before its transaction ends.

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::pending_inputs::{pending_writes, write_pending};
use super::{Tx, db_error, json_text, to_i64};
use crate::error::StoreResult;
use crate::model::{ExecutionFence, Transcript, TranscriptEntry, TranscriptMutation};
use crate::transcript::apply_mutation;

/// Copies kept; past this many the memory starts over (a forgotten copy costs one full write).
const KEPT_COPIES: usize = 1024;

/// A last entry larger than this is not kept (it would be held for the session's lifetime).
const MAX_KEPT_ENTRY_BYTES: usize = 32 * 1024;

/// The document a session's last write left, as far as the next write needs it.
#[derive(Clone)]
pub(super) struct Kept {
    pub revision: i64,
    /// Entries: none, or the last one.
    pub doc: Transcript,
    /// Where the next entry row goes.
    pub next_position: i64,
}

impl Kept {
    /// The copy after a write of `doc` (whose entries end with the new ones) at `revision`;
    /// `None` when its last entry is too large to keep.
    pub fn after(revision: i64, mut doc: Transcript, next_position: i64) -> Option<Self> {
        let last = doc.entries.pop();
        if let Some(last) = &last
            && json_text(last).len() > MAX_KEPT_ENTRY_BYTES
        {
            return None;
        }
        doc.entries = last.into_iter().collect();
        Some(Kept {
            revision,
            doc,
            next_position,
        })
    }
}

/// The copies of this process, per session.
#[derive(Default)]
pub(super) struct TranscriptCopies {
    copies: Mutex<HashMap<(String, String), Kept>>,
    /// Writes made from a copy (diagnostics and tests).
    written: AtomicU64,
}

impl TranscriptCopies {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Kept>> {
        self.copies.locked()
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// After a write from a copy: the copy it left.
    pub fn wrote(&self, tenant_id: &str, session_id: &str, copy: Option<Kept>) {
        self.written.fetch_add(1, Ordering::Relaxed);
        self.keep(tenant_id, session_id, copy);
    }

    pub fn get(&self, tenant_id: &str, session_id: &str) -> Option<Kept> {
        self.lock()
            .get(&(tenant_id.to_owned(), session_id.to_owned()))
            .cloned()
    }

    pub fn keep(&self, tenant_id: &str, session_id: &str, copy: Option<Kept>) {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        let mut copies = self.lock();
        let Some(copy) = copy else {
            copies.remove(&key);
            return;
        };
        if copies.len() >= KEPT_COPIES && !copies.contains_key(&key) {
            copies.clear();
        }
        copies.insert(key, copy);
    }
}

/// A change written from the copy: the entries it appended and the copy it leaves.
pub(super) struct Written {
    pub appended: Vec<TranscriptEntry>,
    pub copy: Option<Kept>,
}

/// Applies `mutation` to `kept` and writes it in one statement. `None`: nothing was written
/// (the fence or the revision could not be proven, or the mutation is for the full path to
/// judge on the row).
pub(super) async fn write_from_copy(
    tx: &mut Tx,
    tenant_id: &str,
    kept: Kept,
    mutations: &[TranscriptMutation],
    fence: Option<&ExecutionFence>,
    now: u64,
) -> StoreResult<Option<Written>> {
    let mut doc = kept.doc;
    let before = doc.entries.len();
    for mutation in mutations {
        if apply_mutation(&mut doc, mutation.clone(), now).is_err() {
            return Ok(None);
        }
    }
    // The queue is written as rows (`pending_inputs.rs`), never in the document.
    doc.pending_inputs.clear();
    let appended = doc.entries[before..].to_vec();
    let texts: Vec<String> = appended.iter().map(json_text).collect();
    let positions: Vec<i64> = (kept.next_position..).take(texts.len()).collect();
    let entries = std::mem::take(&mut doc.entries);
    let written: (Option<i64>,) =
        sqlx::query_as("SELECT write_transcript_at($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")
            .bind(tenant_id)
            .bind(&doc.session_id)
            .bind(fence.map(|fence| fence.lease_id.as_str()))
            .bind(fence.map(|fence| to_i64(fence.fencing_token)))
            .bind(to_i64(now))
            .bind(kept.revision)
            .bind(&positions)
            .bind(&texts)
            .bind(json_text(&doc))
            .bind(to_i64(doc.last_activity_ms))
            .fetch_one(&mut **tx)
            .await
            .map_err(db_error)?;
    let Some(revision) = written.0 else {
        return Ok(None);
    };
    let writes = pending_writes(Vec::new(), mutations);
    write_pending(tx, tenant_id, &doc.session_id, &writes).await?;
    doc.entries = entries;
    let next_position = kept.next_position + appended.len() as i64;
    Ok(Some(Written {
        copy: Kept::after(revision, doc, next_position),
        appended,
    }))
}
