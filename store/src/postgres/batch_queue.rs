//! The commit queue's waiting writes and the right to send its next batch (`commit_queue.rs`).
//!
//! A write joins the queue; whoever gets the right to send starts a task that sends everything
//! queued and answers each write after its commit, so a writer that gives up waiting cannot
//! take the others' writes down with it. Every waiter keeps trying until it is answered. One
//! batch at a time lets the next one fill while it commits, so under load many writes share one
//! commit (one WAL flush). But a batch can wait on a session's locks (up to `lock_timeout`),
//! and every write queued behind it would wait too: a waiter that found no right for [`STALL`]
//! takes one of a few extra rights, so a stuck batch holds up only its own writes.

use agent_runtime::sync::Locked;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// A batch out longer than this is waiting (on a flush, or on a lock). A millisecond or two keeps
/// most writes sharing a commit; a much longer stall would serialise every write of the process
/// on one connection (measurements in bench/history.md).
const STALL: Duration = Duration::from_millis(1);

/// Batches in flight beside the first while it is slow.
const EXTRA: usize = 3;

struct Senders {
    first: Arc<Semaphore>,
    extra: Arc<Semaphore>,
}

impl Default for Senders {
    fn default() -> Self {
        Self {
            first: Arc::new(Semaphore::new(1)),
            extra: Arc::new(Semaphore::new(EXTRA)),
        }
    }
}

impl Senders {
    /// The right to send one batch (released when the permit drops).
    async fn acquire(&self) -> OwnedSemaphorePermit {
        let permit = tokio::select! {
            biased;
            permit = Arc::clone(&self.first).acquire_owned() => permit,
            permit = async {
                tokio::time::sleep(STALL).await;
                Arc::clone(&self.extra).acquire_owned().await
            } => permit,
        };
        permit.expect("the senders' semaphores are never closed")
    }
}

/// Writes of type `W` waiting for the next batch.
pub(super) struct BatchQueue<W> {
    waiting: Mutex<Vec<W>>,
    senders: Senders,
}

impl<W> Default for BatchQueue<W> {
    fn default() -> Self {
        Self {
            waiting: Mutex::new(Vec::new()),
            senders: Senders::default(),
        }
    }
}

impl<W> BatchQueue<W> {
    pub fn push(&self, write: W) {
        self.lock().push(write);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<W>> {
        self.waiting.locked()
    }

    /// Waits for `answer` of a write pushed before: either a batch in flight takes it along, or
    /// this task gets the right to send and sends everything queued (that write among it) with
    /// `send`. The batch runs in a task of its own: a waiter whose caller gives up (a request
    /// interrupted while it appends) must not take the other writes of its batch down with it.
    /// `None`: the write's batch was dropped while it was sent.
    pub async fn answer<A, F, Fut>(&self, mut answer: oneshot::Receiver<A>, send: F) -> Option<A>
    where
        F: Fn(Vec<W>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        loop {
            tokio::select! {
                biased;
                answered = &mut answer => return answered.ok(),
                sending = self.senders.acquire() => {
                    if let Ok(answered) = answer.try_recv() {
                        return Some(answered);
                    }
                    let batch = std::mem::take(&mut *self.lock());
                    if batch.is_empty() {
                        continue;
                    }
                    let sent = send(batch);
                    tokio::spawn(async move {
                        sent.await;
                        drop(sending);
                    });
                }
            }
        }
    }
}
