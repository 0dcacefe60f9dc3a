//! The transcript projection (docs/storage.md §8) in three tables: `transcripts` holds each
//! document without its entries and pending inputs (summary, history progress, times),
//! `transcript_entries` its entries, one row each, in order (migration 0006), and
//! `transcript_pending_inputs` its queue (migration 0023, `pending_inputs.rs`). A turn appends its
//! messages and rewrites only the small document, and queueing an input writes that input, so
//! neither costs more as the session or its queue grows.
//! A document written before that migration still holds its entries until its next write moves
//! them into rows (see the migration for why SQL cannot). Every write locks the document row
//! (`FOR UPDATE`) after the fence check and applies the shared [`crate::transcript`] rules in
//! Rust, so the read-modify-write is atomic and identical to the other backends.

use async_trait::async_trait;
use sqlx::types::Json;

use super::sessions::delete_for_session;
use super::{PostgresStore, Tx, check_fence_in, db_error, json_text, to_i64};
use crate::error::{StoreError, StoreResult};
use crate::model::{ExecutionFence, Transcript, TranscriptEntry, TranscriptMutation};
use crate::ports::TranscriptStore;
use crate::rules::transcript_not_found;
use crate::transcript::{apply_mutation, fork_prefix, into_readable, new_transcript, readable};

use super::pending_inputs::{pending_writes, write_pending};
use super::transcript_copy::{Kept, write_from_copy};
use agent_runtime::protocol::JsonObject;

/// The whole document in one statement (one snapshot, so a concurrent turn is either all in or
/// all out). The document comes with the first row only; a transcript without entries is one
/// row with no entry.
const READ_WHOLE: &str = "SELECT CASE WHEN COALESCE(e.position, 0) = 0 THEN t.document END, e.entry, \
       CASE WHEN COALESCE(e.position, 0) = 0 THEN (SELECT json_agg(p.input ORDER BY p.position) \
         FROM transcript_pending_inputs p \
         WHERE p.tenant_id = t.tenant_id AND p.session_id = t.session_id) END \
     FROM transcripts t LEFT JOIN transcript_entries e \
       ON e.tenant_id = t.tenant_id AND e.session_id = t.session_id \
     WHERE t.tenant_id = $1 AND t.session_id = $2 ORDER BY e.position";

pub(super) type WholeRow = (
    Option<Json<Transcript>>,
    Option<Json<TranscriptEntry>>,
    Option<Json<Vec<JsonObject>>>,
);
/// The document, and the position and content of its last entry row if it has one.
type LockedRow = (Json<Transcript>, Option<i64>, Option<Json<TranscriptEntry>>);

/// Assembles the rows of [`READ_WHOLE`]; `None` when there are none (no transcript).
pub(super) fn whole(rows: Vec<WholeRow>) -> Option<Transcript> {
    let mut rows = rows.into_iter();
    let (doc, first, pending) = rows.next()?;
    // A document from before migration 0006 brings its own entries (and has no rows yet), one
    // from before 0023 its own pending inputs.
    let mut doc = doc?.0;
    doc.entries.extend(
        first
            .into_iter()
            .chain(rows.filter_map(|(_, entry, _)| entry))
            .map(|entry| entry.0),
    );
    doc.pending_inputs
        .extend(pending.map(|list| list.0).unwrap_or_default());
    Some(doc)
}

pub(super) fn read_whole<'q>(
    tenant_id: &'q str,
    session_id: &'q str,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, WholeRow, sqlx::postgres::PgArguments> {
    sqlx::query_as(READ_WHOLE).bind(tenant_id).bind(session_id)
}

/// A document locked for the rest of the transaction, with the entries a mutation needs to
/// append after (the last one), which of them are still to be stored as rows (from that index)
/// and at which position the first of those goes.
struct Locked {
    doc: Transcript,
    unstored_from: usize,
    next_position: i64,
}

async fn lock_for_append(
    tx: &mut Tx,
    tenant_id: &str,
    session_id: &str,
) -> StoreResult<Option<Locked>> {
    let row: Option<LockedRow> = sqlx::query_as(
        "SELECT t.document, last.position, last.entry FROM transcripts t \
             LEFT JOIN LATERAL (SELECT position, entry FROM transcript_entries e \
               WHERE e.tenant_id = t.tenant_id AND e.session_id = t.session_id \
               ORDER BY position DESC LIMIT 1) last ON TRUE \
             WHERE t.tenant_id = $1 AND t.session_id = $2 FOR UPDATE OF t",
    )
    .bind(tenant_id)
    .bind(session_id)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(row.map(|(doc, position, last)| {
        let mut doc = doc.0;
        if !doc.entries.is_empty() {
            // From before migration 0006: all its entries move to rows with this write.
            return Locked {
                doc,
                unstored_from: 0,
                next_position: 0,
            };
        }
        doc.entries.extend(last.map(|entry| entry.0));
        Locked {
            unstored_from: doc.entries.len(),
            next_position: position.map_or(0, |position| position + 1),
            doc,
        }
    }))
}

/// Stores `doc`'s entries from index `from` as rows at positions from `position`, and the
/// document without its entries under a new revision (migration 0017), in one statement.
/// Returns that revision.
async fn write_appended(
    tx: &mut Tx,
    tenant_id: &str,
    doc: &mut Transcript,
    from: usize,
    position: i64,
) -> StoreResult<i64> {
    let entries = std::mem::take(&mut doc.entries);
    let texts: Vec<String> = entries.iter().skip(from).map(json_text).collect();
    let positions: Vec<i64> = (position..).take(texts.len()).collect();
    let document = json_text(&*doc);
    doc.entries = entries;
    let (revision,): (i64,) = sqlx::query_as(
        "WITH appended AS (INSERT INTO transcript_entries (tenant_id, session_id, position, entry) \
           SELECT $1, $2, p, e::json FROM unnest($3::bigint[], $4::text[]) AS u(p, e)) \
         INSERT INTO transcripts (tenant_id, session_id, document, updated_at_ms, revision) \
         VALUES ($1, $2, $5::json, $6, nextval('transcript_revisions')) \
         ON CONFLICT (tenant_id, session_id) DO UPDATE SET document = EXCLUDED.document, \
           updated_at_ms = EXCLUDED.updated_at_ms, revision = EXCLUDED.revision \
         RETURNING revision",
    )
    .bind(tenant_id)
    .bind(&doc.session_id)
    .bind(&positions)
    .bind(&texts)
    .bind(document)
    .bind(to_i64(doc.last_activity_ms))
    .fetch_one(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(revision)
}

/// Whose transcript a change is for, and the fence it is written under.
pub(super) struct Writer<'a> {
    pub tenant_id: &'a str,
    pub session_id: &'a str,
    pub fence: Option<&'a ExecutionFence>,
    /// Whether the caller's transaction checked the fence already, under the execution lock.
    pub fence_checked: bool,
}

/// Applies a mutation in the caller's transaction: from the copy of the document this store
/// keeps, in one statement, when it still matches the row (`transcript_copy.rs`); otherwise on
/// the locked row. Several mutations are applied in order and written at once. A rejected
/// mutation writes nothing. Returns the entries they appended.
pub(super) async fn mutate_in(
    store: &PostgresStore,
    tx: &mut Tx,
    writer: &Writer<'_>,
    mutations: &[TranscriptMutation],
    now: u64,
) -> StoreResult<Vec<TranscriptEntry>> {
    let Writer {
        tenant_id,
        session_id,
        fence,
        fence_checked,
    } = *writer;
    let copies = store.transcript_copies();
    if let Some(kept) = copies.get(tenant_id, session_id)
        && let Some(written) = write_from_copy(tx, tenant_id, kept, mutations, fence, now).await?
    {
        copies.wrote(tenant_id, session_id, written.copy);
        return Ok(written.appended);
    }
    if !fence_checked {
        check_fence_in(store, tx, tenant_id, session_id, fence, now).await?;
    }
    let Some(Locked {
        mut doc,
        unstored_from,
        next_position,
    }) = lock_for_append(tx, tenant_id, session_id).await?
    else {
        return Err(transcript_not_found(session_id));
    };
    // The queue lives in rows and the document keeps none; one from before 0023 moves its own.
    let legacy = std::mem::take(&mut doc.pending_inputs);
    let entries_before = doc.entries.len();
    for mutation in mutations {
        apply_mutation(&mut doc, mutation.clone(), now)?;
    }
    doc.pending_inputs.clear();
    let appended = doc.entries[entries_before..].to_vec();
    let revision = write_appended(tx, tenant_id, &mut doc, unstored_from, next_position).await?;
    let writes = pending_writes(legacy, mutations);
    write_pending(tx, tenant_id, session_id, &writes).await?;
    let next_position = next_position + (doc.entries.len() - unstored_from) as i64;
    copies.keep(
        tenant_id,
        session_id,
        Kept::after(revision, doc, next_position),
    );
    Ok(appended)
}

#[async_trait]
impl TranscriptStore for PostgresStore {
    async fn create_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Transcript> {
        self.retrying_conflicts(|| self.create_transcript_once(tenant_id, session_id, fence))
            .await
    }

    async fn load_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Transcript>> {
        self.ensure_open()?;
        let rows = self
            .reading(|| read_whole(tenant_id, session_id).fetch_all(self.pool()))
            .await?;
        Ok(whole(rows).map(into_readable))
    }

    async fn mutate_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        mutation: TranscriptMutation,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.retrying_conflicts(|| {
            self.mutate_transcript_once(tenant_id, session_id, mutation.clone(), fence)
        })
        .await
    }

    async fn fork_transcript(
        &self,
        tenant_id: &str,
        source_session_id: &str,
        target_session_id: &str,
        message_id: Option<&str>,
    ) -> StoreResult<Transcript> {
        self.retrying_conflicts(|| {
            self.fork_transcript_once(tenant_id, source_session_id, target_session_id, message_id)
        })
        .await
    }

    async fn delete_transcript(&self, tenant_id: &str, session_id: &str) -> StoreResult<()> {
        self.retrying_conflicts(|| self.delete_transcript_once(tenant_id, session_id))
            .await
    }

    async fn list_transcripts(&self, tenant_id: &str) -> StoreResult<Vec<String>> {
        self.ensure_open()?;
        let rows: Vec<(String,)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT session_id FROM transcripts WHERE tenant_id = $1 ORDER BY session_id",
                )
                .bind(tenant_id)
                .fetch_all(self.pool())
            })
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `create_transcript` (re-run whole on a deadlock).
    async fn create_transcript_once(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Transcript> {
        if tenant_id.trim().is_empty() || session_id.trim().is_empty() {
            return Err(StoreError::invalid("Transcript ids must not be blank"));
        }
        let mut tx = self.begin().await?;
        let now = self.now();
        // The execution lock also serialises concurrent creators of one transcript.
        check_fence_in(self, &mut tx, tenant_id, session_id, fence, now).await?;
        if lock_for_append(&mut tx, tenant_id, session_id)
            .await?
            .is_some()
        {
            let rows = read_whole(tenant_id, session_id)
                .fetch_all(&mut *tx)
                .await
                .map_err(db_error)?;
            return whole(rows)
                .map(into_readable)
                .ok_or_else(|| transcript_not_found(session_id));
        }
        let mut doc = new_transcript(session_id, now);
        write_appended(&mut tx, tenant_id, &mut doc, 0, 0).await?;
        self.commit(tx).await?;
        Ok(doc)
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `mutate_transcript` (re-run whole on a deadlock).
    async fn mutate_transcript_once(
        &self,
        tenant_id: &str,
        session_id: &str,
        mutation: TranscriptMutation,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let write = (
            self.clone(),
            (tenant_id.to_owned(), session_id.to_owned()),
            mutation,
            fence.cloned(),
        );
        // In the shared transaction of the next batch (`shared_commit.rs`).
        self.shared_write(tenant_id, session_id, write, |tx, write| {
            let (store, (tenant_id, session_id), mutation, fence) = write;
            let writer = Writer {
                tenant_id,
                session_id,
                fence: fence.as_ref(),
                fence_checked: false,
            };
            Box::pin(async move {
                let mutations = std::slice::from_ref(mutation);
                mutate_in(store, tx, &writer, mutations, store.now()).await
            })
        })
        .await
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `fork_transcript` (re-run whole on a deadlock).
    async fn fork_transcript_once(
        &self,
        tenant_id: &str,
        source_session_id: &str,
        target_session_id: &str,
        message_id: Option<&str>,
    ) -> StoreResult<Transcript> {
        if target_session_id.trim().is_empty() {
            return Err(StoreError::invalid("Transcript ids must not be blank"));
        }
        let mut tx = self.begin().await?;
        let now = self.now();
        let rows = read_whole(tenant_id, source_session_id)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
        let source = whole(rows).ok_or_else(|| transcript_not_found(source_session_id))?;
        let doc = fork_prefix(&source, target_session_id, message_id, now)?;
        // A fork starts a new session; it never overwrites an existing transcript. The row is
        // claimed empty first, then written whole.
        let claimed = sqlx::query(
            "INSERT INTO transcripts (tenant_id, session_id, document, updated_at_ms) \
             VALUES ($1, $2, $3::json, $4) ON CONFLICT DO NOTHING",
        )
        .bind(tenant_id)
        .bind(target_session_id)
        .bind(json_text(&new_transcript(target_session_id, now)))
        .bind(to_i64(now))
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        if claimed.rows_affected() != 1 {
            return Err(StoreError::invalid(format!(
                "Transcript of Session {target_session_id} already exists"
            )));
        }
        let view = readable(&doc);
        let mut doc = doc;
        write_appended(&mut tx, tenant_id, &mut doc, 0, 0).await?;
        self.commit(tx).await?;
        Ok(view)
    }
}

impl PostgresStore {
    /// One attempt of the transaction of `delete_transcript` (re-run whole on a deadlock).
    async fn delete_transcript_once(&self, tenant_id: &str, session_id: &str) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        // The document first: deleting it waits for a turn that holds it, whose entries the
        // second statement then sees.
        let statements = [
            "DELETE FROM transcripts WHERE tenant_id = $1 AND session_id = $2",
            "DELETE FROM transcript_entries WHERE tenant_id = $1 AND session_id = $2",
            "DELETE FROM transcript_pending_inputs WHERE tenant_id = $1 AND session_id = $2",
        ];
        delete_for_session(&mut tx, &statements, tenant_id, session_id).await?;
        self.commit(tx).await
    }
}
