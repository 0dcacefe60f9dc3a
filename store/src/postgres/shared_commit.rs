//! The commit queue of writes that need a transaction of their own (issue 21 item 3, second
//! part): journal entries, transcript changes and receipt completions of many sessions share one
//! transaction, so one commit (one WAL flush) carries them all.
//!
//! A write joins the queue; whoever gets the right to send runs everything queued in one
//! transaction and answers each write after its commit. While a batch commits, the next one
//! fills, so the batch grows with the load, and a write alone runs exactly as before (BEGIN, its
//! statements, COMMIT). In a batch of several, each write runs inside its own SAVEPOINT: one that
//! fails (a fence no longer held, a head that moved, a deadlock victim) is rolled back alone and
//! answered at once, the others go on. A batch whose commit fails leaves each of its writes
//! unknown (`commit_error`), as a lone COMMIT would; one that breaks before its COMMIT changed
//! nothing, and each write is answered with a retry-safe error.
//!
//! Writes run in the order of their sessions (stable, so one session's writes keep theirs): the
//! order of the append queue's batches, so two batches never lock two sessions in opposite orders.

use std::any::Any;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use super::{PostgresStore, Tx, brief};
use crate::error::{StoreError, StoreResult};

/// A write: its statements on the batch's transaction.
pub(super) type Work<T> =
    Box<dyn for<'t> FnOnce(&'t mut Tx) -> BoxFuture<'t, StoreResult<T>> + Send>;

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

/// The answer of every write of a batch whose connection failed before its COMMIT.
fn not_committed(error: &sqlx::Error) -> StoreError {
    StoreError::Backend {
        message: format!(
            "PostgreSQL transaction failed before its commit ({}); nothing of it was applied",
            brief(error)
        ),
        retry_safe: true,
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
        let work: Work<Erased> =
            Box::new(move |tx| Box::pin(async move { Ok(Box::new(work(tx).await?) as Erased) }));
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
        let mut tx = match self.begin().await {
            Ok(tx) => tx,
            Err(error) => {
                for waiting in batch {
                    let _ = waiting.reply.send(Err(error.clone()));
                }
                return;
            }
        };
        let alone = batch.len() == 1;
        let mut made = Vec::with_capacity(batch.len());
        let mut pending = batch.into_iter();
        let mut broken = None;
        for waiting in pending.by_ref() {
            match run_one(&mut tx, waiting.work, alone).await {
                Ok(Ok(value)) => made.push((waiting.reply, value)),
                Ok(Err(error)) if alone => {
                    let _ = waiting.reply.send(Err(error));
                    return;
                }
                Ok(Err(error)) => {
                    let _ = waiting.reply.send(Err(error));
                }
                Err((error, work_error)) => {
                    let _ = waiting.reply.send(Err(work_error));
                    broken = Some(error);
                    break;
                }
            }
        }
        if let Some(error) = broken {
            for (reply, _) in made {
                let _ = reply.send(Err(not_committed(&error)));
            }
            for waiting in pending {
                let _ = waiting.reply.send(Err(not_committed(&error)));
            }
            return;
        }
        if made.is_empty() {
            return;
        }
        let shared = made.len() > 1;
        match self.commit(tx).await {
            Ok(()) => {
                if shared {
                    self.inner
                        .shared_batches
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                for (reply, value) in made {
                    let _ = reply.send(Ok(value));
                }
            }
            Err(error) => {
                for (reply, _) in made {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}

/// Runs one write. `Ok(answer)`: the write's own answer, the transaction usable; `Err`: the
/// transaction's connection failed (with the write's answer), nothing of the batch can commit.
async fn run_one(
    tx: &mut Tx,
    work: Work<Erased>,
    alone: bool,
) -> Result<StoreResult<Erased>, (sqlx::Error, StoreError)> {
    if alone {
        return Ok(work(tx).await);
    }
    if let Err(error) = sqlx::query("SAVEPOINT shared_write")
        .execute(&mut **tx)
        .await
    {
        let answer = not_committed(&error);
        return Err((error, answer));
    }
    let answer = work(tx).await;
    let end = match answer {
        Ok(_) => "RELEASE SAVEPOINT shared_write",
        Err(_) => "ROLLBACK TO SAVEPOINT shared_write",
    };
    match sqlx::query(end).execute(&mut **tx).await {
        Ok(_) => Ok(answer),
        Err(error) => {
            let answer = match answer {
                Ok(_) => not_committed(&error),
                Err(work_error) => work_error,
            };
            Err((error, answer))
        }
    }
}
