//! The process's one commit queue: every fenced write of every session — event appends
//! (`append_queue.rs`) and the writes that need a transaction (journal entries, transcript changes,
//! receipt completions: `shared_commit.rs`) — waits here for the next batch, and one batch is one
//! commit (one WAL flush).
//!
//! A batch of appends alone is one statement, committed on its own; a batch of other writes
//! alone is one transaction. A batch with both is one transaction that first takes the locks of
//! all its sessions in key order (`lock_sessions`, migration 0018), then makes the appends in one
//! statement, then the other writes: after the first statement it only takes locks it holds, so
//! two batches in flight cannot deadlock, whatever sessions they share. Each write is still
//! decided alone: a declined append takes its own full transaction, a write that fails is
//! answered with its error and the rest runs again without it, and a batch whose commit outcome
//! is unknown leaves each of its writes unknown, resolved by its own check.

use tokio::sync::oneshot;

use super::PostgresStore;
use super::{append_queue, shared_commit};

/// A write waiting for the next batch.
pub(super) enum Queued {
    Append(append_queue::Waiting),
    Shared(shared_commit::Waiting),
}

impl From<append_queue::Waiting> for Queued {
    fn from(append: append_queue::Waiting) -> Queued {
        Queued::Append(append)
    }
}

impl From<shared_commit::Waiting> for Queued {
    fn from(write: shared_commit::Waiting) -> Queued {
        Queued::Shared(write)
    }
}

impl PostgresStore {
    /// Queues `write` for the next batch and waits for `answer`, sending batches while it is
    /// this caller's turn; `None`: the batch it went in was dropped mid-way.
    pub(super) async fn queue_commit<A>(
        &self,
        write: impl Into<Queued>,
        answer: oneshot::Receiver<A>,
    ) -> Option<A> {
        let queue = &self.inner.commits;
        queue.push(write.into());
        queue
            .answer(answer, |batch| {
                let store = self.clone();
                async move { store.send_commits(batch).await }
            })
            .await
    }

    /// Sends one batch of the queue (see the module docs).
    pub(super) async fn send_commits(&self, batch: Vec<Queued>) {
        let (mut appends, mut shared) = (Vec::new(), Vec::new());
        for queued in batch {
            match queued {
                Queued::Append(append) => appends.push(append),
                Queued::Shared(write) => shared.push(write),
            }
        }
        if shared.is_empty() {
            if !appends.is_empty() {
                self.send_batch(appends).await;
            }
            return;
        }
        self.commit_batch(shared, appends).await;
    }
}
