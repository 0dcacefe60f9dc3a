//! The commit queue of writes that need a transaction of their own (issue 21 item 3, second
//! part): journal entries, transcript changes and receipt completions of many sessions share one
//! transaction, so one commit (one WAL flush) carries them all.
//!
//! A write joins the queue; whoever gets the right to send runs everything queued in one
//! transaction and answers each write after its commit. While a batch commits, the next one
//! fills, so the batch grows with the load, and a write alone runs exactly as before (BEGIN, its
//! statements, COMMIT). A write that fails in a batch (a fence no longer held, a head that
//! moved, a deadlock victim) is answered with its error, and the batch is rolled back and run
//! again without it: every write is a function of what the store holds, so running it again on
//! a fresh transaction is running it once. This costs nothing while writes succeed, unlike a
//! SAVEPOINT around each (two more round trips per write). A batch whose commit fails leaves
//! each of its writes unknown (`commit_error`), as a lone COMMIT would.
//!
//! Writes run in the order of their sessions (stable, so one session's writes keep theirs): the
//! order of the append queue's batches, so two batches never lock two sessions in opposite orders.

use std::any::Any;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use super::{PostgresStore, Tx};
use crate::error::{StoreError, StoreResult};

/// A write: its statements on the batch's transaction; run again if the batch is rolled back.
pub(super) type Work<T> =
    Box<dyn for<'t> Fn(&'t mut Tx) -> BoxFuture<'t, StoreResult<T>> + Send + Sync>;

type Erased = Box<dyn Any + Send>;

pub(super) struct Waiting {
    /// Tenant and session: the batch's lock order.
    key: (String, String),
    work: Work<Erased>,
    reply: oneshot::Sender<StoreResult<Erased>>,
}

/// The answer of a write whose batch was dropped mid-way (its sender was cancelled): its COMMIT
/// may have gone out.
fn dropped() -> StoreError {
    StoreError::Backend {
        message: "a write's shared transaction was dropped while it ran; its outcome is unknown"
            .to_owned(),
        retry_safe: false,
    }
}

impl PostgresStore {
    /// Runs `work` in the shared transaction of the next batch; answers after its commit.
    pub(super) async fn in_shared_commit<T: Send + 'static>(
        &self,
        tenant_id: &str,
        session_id: &str,
        work: Work<T>,
    ) -> StoreResult<T> {
        self.ensure_open()?;
        let queue = &self.inner.shared_commits;
        let (reply, answer) = oneshot::channel();
        let work: Work<Erased> = Box::new(move |tx| {
            let run = work(tx);
            Box::pin(async move { Ok(Box::new(run.await?) as Erased) })
        });
        queue.push(Waiting {
            key: (tenant_id.to_owned(), session_id.to_owned()),
            work,
            reply,
        });
        let answered = queue
            .answer(answer, |batch| self.commit_batch(batch))
            .await
            .unwrap_or_else(|| Err(dropped()));
        match answered?.downcast::<T>() {
            Ok(value) => Ok(*value),
            // Unreachable: `work` above boxes a `T`.
            Err(_) => Err(StoreError::Backend {
                message: "a shared write answered with another type".to_owned(),
                retry_safe: false,
            }),
        }
    }

    async fn commit_batch(&self, mut batch: Vec<Waiting>) {
        batch.sort_by(|a, b| a.key.cmp(&b.key));
        while !batch.is_empty() {
            let mut tx = match self.begin().await {
                Ok(tx) => tx,
                Err(error) => {
                    for waiting in batch {
                        let _ = waiting.reply.send(Err(error.clone()));
                    }
                    return;
                }
            };
            let mut made = Vec::with_capacity(batch.len());
            let mut failed = None;
            for (at, waiting) in batch.iter().enumerate() {
                match (waiting.work)(&mut tx).await {
                    Ok(value) => made.push(value),
                    Err(error) => {
                        failed = Some((at, error));
                        break;
                    }
                }
            }
            if let Some((at, error)) = failed {
                // Nothing of this transaction is kept: the others run again without the write
                // that failed.
                let _ = tx.rollback().await;
                let _ = batch.remove(at).reply.send(Err(error));
                continue;
            }
            let shared = made.len() > 1;
            match self.commit(tx).await {
                Ok(()) => {
                    if shared {
                        self.inner
                            .shared_batches
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    for (waiting, value) in batch.into_iter().zip(made) {
                        let _ = waiting.reply.send(Ok(value));
                    }
                }
                Err(error) => {
                    for waiting in batch {
                        let _ = waiting.reply.send(Err(error.clone()));
                    }
                }
            }
            return;
        }
    }
}
