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

use super::PostgresStore;
use super::{append_queue, shared_commit};

/// A write waiting for the next batch.
pub(super) enum Queued {
    Append(append_queue::Waiting),
    Shared(shared_commit::Waiting),
}

impl PostgresStore {
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
