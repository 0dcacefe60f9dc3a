//! Writes that need a transaction of their own, in the process's commit queue
//! (`commit_queue.rs`): journal entries, transcript changes and receipt completions of many
//! sessions share one transaction, and the event appends queued with them its commit, so one
//! commit (one WAL flush) carries them all.
//!
//! Whoever gets the right to send runs everything queued in one transaction and answers each
//! write after its commit. While a batch commits, the next one fills, so the batch grows with the
//! load, and a write alone runs as a plain transaction (BEGIN, its statements, COMMIT). A write
//! that fails in a batch (a fence no longer held, a head that moved, a deadlock victim) is answered
//! with its error, and the batch is rolled back and run again without it: every write is a function
//! of what the store holds, so running it again on a fresh transaction is running it once. This
//! costs nothing while writes succeed, unlike a SAVEPOINT around each (two more round trips per
//! write). A batch whose commit fails leaves each of its writes unknown (`commit_error`), as a lone
//! COMMIT would.
//!
//! Writes run in the order of their sessions (stable, so one session's writes keep theirs), the
//! order every batch locks sessions in; a batch with appends takes all its sessions' locks first.

use std::any::Any;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use super::append_queue::{Sent, Waiting as Appending, append_in, sort_appends};
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
        let (reply, answer) = oneshot::channel();
        let work: Work<Erased> = Box::new(move |tx| {
            let run = work(tx);
            Box::pin(async move { Ok(Box::new(run.await?) as Erased) })
        });
        let waiting = Waiting {
            key: (tenant_id.to_owned(), session_id.to_owned()),
            work,
            reply,
        };
        let answered = self
            .queue_commit(waiting, answer)
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

    /// [`PostgresStore::in_shared_commit`] for a write over `state`, which every run of the
    /// write reads (a batch rolled back runs it again).
    pub(super) async fn shared_write<S, T, F>(
        &self,
        tenant_id: &str,
        session_id: &str,
        state: S,
        write: F,
    ) -> StoreResult<T>
    where
        S: Send + Sync + 'static,
        T: Send + 'static,
        F: for<'t> Fn(&'t mut Tx, &'t S) -> BoxFuture<'t, StoreResult<T>> + Send + Sync + 'static,
    {
        let shared = Arc::new((state, write));
        self.in_shared_commit(
            tenant_id,
            session_id,
            Box::new(move |tx| {
                let shared = Arc::clone(&shared);
                Box::pin(async move {
                    let (state, write) = &*shared;
                    write(tx, state).await
                })
            }),
        )
        .await
    }

    /// Runs `batch` and `appends` in one transaction (see the module docs); `appends` go first,
    /// in one statement, after the locks of every session of the batch.
    /// Stays whole: one transaction: locks, appends, writes, commit, and the re-run without a
    /// failed write.
    pub(super) async fn commit_batch(&self, mut batch: Vec<Waiting>, mut appends: Vec<Appending>) {
        batch.sort_by(|a, b| a.key.cmp(&b.key));
        sort_appends(&mut appends);
        while !batch.is_empty() || !appends.is_empty() {
            let mut tx = match self.begin().await {
                Ok(tx) => tx,
                Err(error) => {
                    for waiting in batch {
                        let _ = waiting.reply.send(Err(error.clone()));
                    }
                    // Nothing was sent: each append takes its own transaction.
                    for append in appends {
                        append.answer(Sent::Answered(false));
                    }
                    return;
                }
            };
            let appended = match self.append_first(&mut tx, &batch, &appends).await {
                Ok(appended) => appended,
                Err(Sent::Broken(error)) => {
                    let message = error.to_string();
                    for append in appends {
                        let error = sqlx::Error::Protocol(message.clone());
                        append.answer(Sent::Broken(error));
                    }
                    for waiting in batch {
                        let _ = waiting.reply.send(Err(dropped()));
                    }
                    return;
                }
                // Refused (an append's unexpected error, a deadlock victim): nothing of it was
                // written; each append takes its own transaction and the rest runs again.
                Err(_) => {
                    let _ = tx.rollback().await;
                    for append in appends.drain(..) {
                        append.answer(Sent::Answered(false));
                    }
                    continue;
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
            let shared = made.len() + appends.len() > 1;
            match self.commit(tx).await {
                Ok(()) => {
                    let counted = [
                        (shared, &self.inner.shared_batches),
                        (!appends.is_empty(), &self.inner.mixed_batches),
                    ];
                    for (_, counter) in counted.iter().filter(|(counts, _)| *counts) {
                        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    for (waiting, value) in batch.into_iter().zip(made) {
                        let _ = waiting.reply.send(Ok(value));
                    }
                    for (append, made) in appends.into_iter().zip(appended) {
                        append.answer(Sent::Answered(made));
                    }
                }
                Err(error) => {
                    for waiting in batch {
                        let _ = waiting.reply.send(Err(error.clone()));
                    }
                    for append in appends {
                        let unknown = sqlx::Error::Protocol(error.to_string());
                        append.answer(Sent::Broken(unknown));
                    }
                }
            }
            return;
        }
    }

    /// With appends: the locks of every session of the batch, in key order, then the appends
    /// in one statement; whether each was made.
    async fn append_first(
        &self,
        tx: &mut Tx,
        batch: &[Waiting],
        appends: &[Appending],
    ) -> Result<Vec<bool>, Sent> {
        if appends.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys: Vec<(&str, &str)> = batch
            .iter()
            .map(|waiting| (waiting.key.0.as_str(), waiting.key.1.as_str()))
            .chain(appends.iter().map(Appending::key))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.len() > 1 {
            let (tenants, sessions): (Vec<&str>, Vec<&str>) = keys.into_iter().unzip();
            let locked = sqlx::query("SELECT lock_sessions($1, $2)")
                .bind(tenants)
                .bind(sessions)
                .execute(&mut **tx)
                .await;
            if let Err(error) = locked {
                return Err(match error {
                    sqlx::Error::Database(_) => Sent::Refused(error),
                    error => Sent::Broken(error),
                });
            }
        }
        let appended = append_in(self, appends, tx).await?;
        if appended.len() != appends.len() {
            let error = sqlx::Error::Protocol("the batch's answer did not fit it".into());
            return Err(Sent::Broken(error));
        }
        Ok(appended)
    }
}
