//! One step of a request in one commit: its start (the journal's `request_accepted`, the input
//! applied to the transcript, the first `turn_start`, and the command's receipt) or its end (the
//! terminal events, the terminal journal entry with the transcript's coverage, and the last
//! assistant message). In separate commits, a crash or a lost lease between the `result` and its
//! journal entry would make the next load close the request again (R1 in docs/reliability.md),
//! and every seam would cost a commit and a WAL flush of its own.
//!
//! One write of the shared transaction (`shared_commit.rs`), in the lock order of docs/storage.md
//! §3.5: the agent stream head under the session's execution lock and the events numbered from
//! it, then the journal's own locks, then the transcript, then the receipt. The events are
//! announced after the commit, as every append's are.

use std::sync::Arc;

use super::append::Numbered;
use super::append_queue::append_one;
use super::commands::complete_in;
use super::events::{AGENT, lock_session_stream};
use super::transcripts::Writer;
use super::{PostgresStore, Tx, check_fence_row, db_error, json_text, to_i64};
use crate::error::StoreResult;
use crate::model::{
    DurableAppendOutcome, ExecutionFence, NewEvent, RequestStep, RequestStepWritten,
    TranscriptEntry,
};
use crate::rules::{check_batch_session, check_durable_append, check_event_ids};

impl PostgresStore {
    // Stays whole: one transaction, statement by statement: its order is what makes the step
    // atomic.
    pub(super) async fn write_step_in_one_commit(
        &self,
        tenant_id: &str,
        session_id: &str,
        step: RequestStep,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<RequestStepWritten> {
        check_event_ids(tenant_id, session_id)?;
        check_batch_session(&step.events, session_id)?;
        check_durable_append(tenant_id, session_id, &step.journal)?;
        let appends_events = !step.events.is_empty();
        let _appending =
            appends_events.then(|| self.inner.waiters.appending_to(tenant_id, session_id));
        let write = Arc::new((
            self.clone(),
            (tenant_id.to_owned(), session_id.to_owned()),
            step,
            fence.cloned(),
        ));
        let written = self
            .retrying_conflicts(|| {
                let write = Arc::clone(&write);
                self.shared_write(tenant_id, session_id, write, |tx, write| {
                    Box::pin(write_step(tx, write))
                })
            })
            .await;
        match written {
            Ok((numbered, journal, entries, receipt_completed)) => {
                self.durable_head_after(tenant_id, session_id, Some(&journal));
                let events = match numbered {
                    Some(numbered) => {
                        self.announce_appended(
                            tenant_id,
                            session_id,
                            numbered.to,
                            &numbered.stored,
                        );
                        numbered.stored
                    }
                    None => Vec::new(),
                };
                Ok(RequestStepWritten {
                    events,
                    journal,
                    entries,
                    receipt_completed,
                })
            }
            Err(error) => {
                // The heads this process knew may be gone with the transaction.
                self.inner.heads.forget(tenant_id, session_id);
                self.durable_head_after(tenant_id, session_id, None);
                Err(error)
            }
        }
    }
}

/// The step's events in `tx`: numbered from the head this process knows and written in one
/// statement when that is still the head and the fence holds (`append.rs`; one round trip
/// instead of two), otherwise from the head read under its lock.
async fn append_in(
    store: &PostgresStore,
    tx: &mut Tx,
    (tenant_id, session_id, fence): (&str, &str, &Option<ExecutionFence>),
    events: Vec<NewEvent>,
    now: u64,
) -> StoreResult<Numbered> {
    if let Some(head) = store.inner.heads.get(tenant_id, session_id) {
        let numbered = Numbered::new(store, head, events.clone());
        let queued = numbered.queued(tenant_id, session_id, fence.as_ref());
        if append_one(store, &queued, &mut **tx)
            .await
            .map_err(db_error)?
        {
            return Ok(numbered);
        }
        // Declined, nothing written: the head moved, or the fence is for the locked path.
    }
    let (lease_row, head) = lock_session_stream(tx, tenant_id, session_id, AGENT).await?;
    check_fence_row(store, lease_row.as_ref(), session_id, fence.as_ref(), now)?;
    let numbered = Numbered::new(store, head, events);
    store
        .insert_events(tx, tenant_id, session_id, &numbered)
        .await?;
    Ok(numbered)
}

/// What a request step's shared write holds: the store, `(tenant, session)`, the step, its fence.
type StepWrite = (
    PostgresStore,
    (String, String),
    RequestStep,
    Option<ExecutionFence>,
);

/// What a request step wrote: its numbered events, its journal entries, the transcript entries
/// it appended, and whether it completed its receipt.
type StepWritten = (
    Option<Numbered>,
    DurableAppendOutcome,
    Vec<TranscriptEntry>,
    bool,
);

/// The request step's statements on a (shared) transaction: its events, its journal entries with
/// the transcript change, and the receipt it completes.
async fn write_step(tx: &mut Tx, write: &Arc<StepWrite>) -> StoreResult<StepWritten> {
    let (store, (tenant, session), step, fence) = &**write;
    let now = store.now();
    let numbered = match step.events.is_empty() {
        true => None,
        false => {
            let events = step.events.clone();
            let writer = (tenant.as_str(), session.as_str(), fence);
            Some(append_in(store, tx, writer, events, now).await?)
        }
    };
    // The journal write checks the fence either way (it is never
    // empty), then writes the step's transcript change with its
    // coverage, in one statement.
    let writer = Writer {
        tenant_id: tenant,
        session_id: session,
        fence: fence.as_ref(),
        fence_checked: true,
    };
    let (journal, entries) = store
        .append_durable_known_in(tx, &writer, step.journal.clone(), step.transcript.clone())
        .await?;
    let receipt_completed = match &step.receipt {
        None => false,
        Some(receipt) => {
            let result = json_text(&receipt.result);
            let (command, lease) = (&receipt.command_id, &receipt.lease_id);
            let now = to_i64(now);
            complete_in(tx, tenant, command, lease, &result, now).await? == 1
        }
    };
    Ok((numbered, journal, entries, receipt_completed))
}
