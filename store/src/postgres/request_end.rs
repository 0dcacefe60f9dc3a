//! A request's terminal writes in one commit (issue 21 item 3, R1): its terminal events (the
//! `result`), its terminal journal entry and the transcript's coverage that entry updates. Two
//! commits had left a seam: a crash or a lost lease between them made the next load close the
//! request again, and clients saw a second `result` for a request that had ended.
//!
//! One write of the shared transaction (`shared_commit.rs`): the agent stream head under the
//! session's execution lock, the events numbered from it, then the journal's own locks (the lock
//! order of storage.md §3.5: execution, agent stream, durable stream, transcript). The events
//! are announced after the commit, as every append's are.

use std::sync::Arc;

use agent_runtime::protocol::EventEnvelope;

use super::append::Numbered;
use super::events::{AGENT, lock_session_stream};
use super::{PostgresStore, check_fence_row};
use crate::error::StoreResult;
use crate::model::{
    DurableAppendOutcome, DurableEventDraft, ExecutionFence, ExpectedSequence, NewEvent,
};
use crate::rules::{check_batch_session, check_durable_append, check_event_ids};

impl PostgresStore {
    pub(super) async fn end_request_in_one_commit(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        drafts: Vec<DurableEventDraft>,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<(Vec<EventEnvelope>, DurableAppendOutcome)> {
        check_event_ids(tenant_id, session_id)?;
        check_batch_session(&events, session_id)?;
        check_durable_append(tenant_id, session_id, &drafts)?;
        let _appending = self.inner.waiters.appending_to(tenant_id, session_id);
        let write = Arc::new((
            self.clone(),
            (tenant_id.to_owned(), session_id.to_owned()),
            events,
            drafts,
            fence.cloned(),
        ));
        let ended = self
            .retrying_conflicts(|| {
                let write = Arc::clone(&write);
                self.in_shared_commit(
                    tenant_id,
                    session_id,
                    Box::new(move |tx| {
                        let write = Arc::clone(&write);
                        Box::pin(async move {
                            let (store, (tenant, session), events, drafts, fence) = &*write;
                            let now = store.now();
                            let (lease_row, head) =
                                lock_session_stream(tx, tenant, session, AGENT).await?;
                            check_fence_row(
                                store,
                                lease_row.as_ref(),
                                session,
                                fence.as_ref(),
                                now,
                            )?;
                            let numbered = Numbered::new(store, head, events.clone());
                            store.insert_events(tx, tenant, session, &numbered).await?;
                            let journalled = store
                                .append_durable_in(
                                    tx,
                                    tenant,
                                    session,
                                    drafts.clone(),
                                    ExpectedSequence::Any,
                                    fence.as_ref(),
                                )
                                .await?;
                            Ok((numbered, journalled))
                        })
                    }),
                )
            })
            .await;
        match ended {
            Ok((numbered, journalled)) => {
                self.announce_appended(tenant_id, session_id, numbered.to, &numbered.stored);
                Ok((numbered.stored, journalled))
            }
            Err(error) => {
                // The head this process knew may be gone with the transaction.
                self.inner.heads.forget(tenant_id, session_id);
                Err(error)
            }
        }
    }
}
