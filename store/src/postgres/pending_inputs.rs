//! A session's pending inputs as rows of `transcript_pending_inputs` (migration 0023): what a
//! transcript mutation does to the queue is written as that one input (an upsert by `inputId`,
//! or a delete), so queueing costs the input's size whatever the queue holds.

use agent_runtime::protocol::JsonObject;

use super::{Tx, db_error, json_text};
use crate::error::StoreResult;
use crate::model::TranscriptMutation;
use crate::transcript::{input_id, pending_change};

/// One change to the rows.
pub(super) enum PendingWrite {
    /// Added at the end, or replaced in place.
    Enqueue(JsonObject),
    Remove(String),
}

/// The row changes of `mutations`, after those that move `legacy` (the pending inputs a document
/// written before migration 0023 still holds) into rows.
pub(super) fn pending_writes(
    legacy: Vec<JsonObject>,
    mutations: &[TranscriptMutation],
) -> Vec<PendingWrite> {
    let mut writes: Vec<PendingWrite> = legacy.into_iter().map(PendingWrite::Enqueue).collect();
    for mutation in mutations {
        match pending_change(mutation) {
            (Some(id), _) => writes.push(PendingWrite::Remove(id)),
            (None, Some(input)) => writes.push(PendingWrite::Enqueue(input)),
            (None, None) => {}
        }
    }
    writes
}

/// Writes `writes` in order, in the caller's transaction (which holds the document's row).
pub(super) async fn write_pending(
    tx: &mut Tx,
    tenant_id: &str,
    session_id: &str,
    writes: &[PendingWrite],
) -> StoreResult<()> {
    for write in writes {
        let query = match write {
            PendingWrite::Enqueue(input) => sqlx::query(
                "INSERT INTO transcript_pending_inputs (tenant_id, session_id, input_id, input) \
                 VALUES ($1, $2, $3, $4::json) ON CONFLICT (tenant_id, session_id, input_id) \
                 DO UPDATE SET input = EXCLUDED.input",
            )
            .bind(tenant_id)
            .bind(session_id)
            .bind(input_id(input).unwrap_or_default())
            .bind(json_text(input)),
            PendingWrite::Remove(id) => sqlx::query(
                "DELETE FROM transcript_pending_inputs \
                 WHERE tenant_id = $1 AND session_id = $2 AND input_id = $3",
            )
            .bind(tenant_id)
            .bind(session_id)
            .bind(id),
        };
        query.execute(&mut **tx).await.map_err(db_error)?;
    }
    Ok(())
}
