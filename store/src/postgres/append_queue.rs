//! Event appends in the process's commit queue (`commit_queue.rs`): appends of many sessions share
//! one statement and one commit.
//!
//! A batch of appends alone goes out in one call of `append_agent_events_batch` (migration 0014),
//! committed on its own; with other writes, the same statement runs first in their transaction
//! (`shared_commit.rs`). Each append is answered after that commit. While a batch commits, the next
//! one fills, so the batch grows with the load and an append alone adds no wait (it is sent at
//! once, as a single statement). Each append is still decided on its own (its head, its fence): a
//! declined one changes nothing and takes the full transaction. A batch that the server refuses as
//! a whole (an append's unexpected error, a deadlock with another process) changed nothing: each of
//! its appends takes its own full transaction, so one bad append cannot fail the others; a batch
//! whose connection broke leaves every append of it unknown, each resolved by its own check
//! (`Attempt::Unknown`).

use std::sync::Arc;

use tokio::sync::oneshot;

use super::{PostgresStore, to_i64};
use crate::model::ExecutionFence;

/// One append, as `append_agent_events` takes it.
pub(super) struct QueuedAppend {
    pub tenant_id: String,
    pub session_id: String,
    pub from: (i64, i64),
    pub to: (i64, i64),
    pub sequences: Vec<i64>,
    pub envelopes: Vec<Arc<str>>,
    pub fence: Option<ExecutionFence>,
}

/// What became of a queued append.
pub(super) enum Sent {
    /// The server answered: whether it was made.
    Answered(bool),
    /// The server refused the statement (nothing of it was written).
    Refused(sqlx::Error),
    /// The connection broke: it may have committed.
    Broken(sqlx::Error),
}

pub(super) struct Waiting {
    append: QueuedAppend,
    reply: oneshot::Sender<Sent>,
}

impl Waiting {
    /// Tenant and session: the lock order.
    pub fn key(&self) -> (&str, &str) {
        (&self.append.tenant_id, &self.append.session_id)
    }

    pub fn answer(self, sent: Sent) {
        let _ = self.reply.send(sent);
    }
}

/// The answer of an append whose batch was dropped (its sender was cancelled): it may have been
/// sent, so it is unknown.
fn dropped() -> Sent {
    Sent::Broken(sqlx::Error::Protocol(
        "the append's batch was dropped while it was sent".into(),
    ))
}

impl PostgresStore {
    /// Appends through the commit queue; answers after the commit of the batch it went in.
    pub(super) async fn send_queued(&self, append: QueuedAppend) -> Sent {
        let (reply, answer) = oneshot::channel();
        self.queue_commit(Waiting { append, reply }, answer)
            .await
            .unwrap_or_else(dropped)
    }

    /// A batch of appends alone: one statement, committed on its own.
    pub(super) async fn send_batch(&self, mut batch: Vec<Waiting>) {
        if batch.len() == 1 {
            let Waiting { append, reply } = batch.remove(0);
            let sent = match classify(append_one(self, &append, self.pool()).await) {
                Ok(made) => Sent::Answered(made),
                Err(failed) => failed,
            };
            let _ = reply.send(sent);
            return;
        }
        sort_appends(&mut batch);
        match self.send_many(&batch, self.pool()).await {
            Ok(done) if done.len() == batch.len() => {
                for (waiting, made) in batch.into_iter().zip(done) {
                    let _ = waiting.reply.send(Sent::Answered(made));
                }
            }
            // Refused whole (one append's unexpected error, a deadlock victim): nothing of it was
            // written, so each append takes its own full transaction, outside this sender.
            Err(Sent::Refused(_)) => {
                for waiting in batch {
                    let _ = waiting.reply.send(Sent::Answered(false));
                }
            }
            // An answer that does not fit the batch cannot be read: each append checks its own.
            Ok(_) => {
                for waiting in batch {
                    let error = sqlx::Error::Protocol("the batch's answer did not fit it".into());
                    let _ = waiting.reply.send(Sent::Broken(error));
                }
            }
            Err(Sent::Broken(error)) => {
                let message = error.to_string();
                for waiting in batch {
                    let error = sqlx::Error::Protocol(message.clone());
                    let _ = waiting.reply.send(Sent::Broken(error));
                }
            }
            Err(Sent::Answered(_)) => unreachable!("a failed batch is refused or broken"),
        }
        self.inner
            .append_batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The appends of `batch` (sorted) in one statement on `executor`: whether each was made.
    pub(super) async fn send_many<'c>(
        &self,
        batch: &[Waiting],
        executor: impl sqlx::PgExecutor<'c>,
    ) -> Result<Vec<bool>, Sent> {
        let appends = || batch.iter().map(|waiting| &waiting.append);
        let tenants: Vec<&str> = appends().map(|a| a.tenant_id.as_str()).collect();
        let sessions: Vec<&str> = appends().map(|a| a.session_id.as_str()).collect();
        let first: Vec<i64> = appends().map(|a| a.from.0).collect();
        let next: Vec<i64> = appends().map(|a| a.from.1).collect();
        let new_first: Vec<i64> = appends().map(|a| a.to.0).collect();
        let new_next: Vec<i64> = appends().map(|a| a.to.1).collect();
        let counts: Vec<i32> = appends().map(|a| a.sequences.len() as i32).collect();
        let sequences: Vec<i64> = appends()
            .flat_map(|a| a.sequences.iter().copied())
            .collect();
        let envelopes: Vec<&str> = appends()
            .flat_map(|a| a.envelopes.iter().map(|text| &**text))
            .collect();
        let lease_ids: Vec<Option<&str>> = appends()
            .map(|a| a.fence.as_ref().map(|fence| fence.lease_id.as_str()))
            .collect();
        let tokens: Vec<Option<i64>> = appends()
            .map(|a| a.fence.as_ref().map(|fence| to_i64(fence.fencing_token)))
            .collect();
        let outcome: Result<(Vec<bool>,), sqlx::Error> = sqlx::query_as(
            "SELECT append_agent_events_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(tenants)
        .bind(sessions)
        .bind(first)
        .bind(next)
        .bind(new_first)
        .bind(new_next)
        .bind(counts)
        .bind(sequences)
        .bind(envelopes)
        .bind(lease_ids)
        .bind(tokens)
        .bind(to_i64(self.now()))
        .fetch_one(executor)
        .await;
        classify(outcome).map(|(done,)| done)
    }
}

/// One lock order for every process's batches (stable: one session's appends keep theirs).
pub(super) fn sort_appends(batch: &mut [Waiting]) {
    batch.sort_by(|a, b| {
        (&a.append.tenant_id, &a.append.session_id)
            .cmp(&(&b.append.tenant_id, &b.append.session_id))
    });
}

/// The appends of `batch` (sorted) on `tx`, in one statement: whether each was made.
pub(super) async fn append_in(
    store: &PostgresStore,
    batch: &[Waiting],
    tx: &mut super::Tx,
) -> Result<Vec<bool>, Sent> {
    match batch {
        [one] => classify(append_one(store, &one.append, &mut **tx).await).map(|made| vec![made]),
        many => store.send_many(many, &mut **tx).await,
    }
}

/// One append in one statement on `executor`: whether it was made.
pub(super) async fn append_one<'c>(
    store: &PostgresStore,
    append: &QueuedAppend,
    executor: impl sqlx::PgExecutor<'c>,
) -> Result<bool, sqlx::Error> {
    let envelopes: Vec<&str> = append.envelopes.iter().map(|text| &**text).collect();
    let (made,): (bool,) = sqlx::query_as(
        "SELECT append_agent_events($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(&append.tenant_id)
    .bind(&append.session_id)
    .bind(append.from.0)
    .bind(append.from.1)
    .bind(append.to.0)
    .bind(append.to.1)
    .bind(&append.sequences)
    .bind(envelopes)
    .bind(append.fence.as_ref().map(|fence| fence.lease_id.as_str()))
    .bind(
        append
            .fence
            .as_ref()
            .map(|fence| to_i64(fence.fencing_token)),
    )
    .bind(to_i64(store.now()))
    // No channel: the notification is sent after the commit (`notify.rs`).
    .bind(None::<&str>)
    .bind(None::<&str>)
    .fetch_one(executor)
    .await?;
    Ok(made)
}

/// Sorts a statement's failure: the server refused it (or it never left: nothing was written),
/// or its connection broke (it may have committed).
fn classify<T>(outcome: Result<T, sqlx::Error>) -> Result<T, Sent> {
    outcome.map_err(|error| match error {
        sqlx::Error::Database(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
            Sent::Refused(error)
        }
        error => Sent::Broken(error),
    })
}
