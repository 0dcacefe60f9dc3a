//! Following a session's event log: replay from the store in pages, then wait for a live signal
//! and read again. SSE streams (gateway) and `Subscribe` streams (executor) are both built on it.
//!
//! Events always come from the store, in sequence order, so a follower delivers every retained
//! event after its cursor exactly once no matter how wake-ups arrive. The signal only says *when*
//! to read (push, decision P9); a wait that ends without news is harmless.

use agent_runtime::sync::{Locked, ReadWriteLocked};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::protocol::{EventEnvelope, EventType};
use async_trait::async_trait;
use futures_util::Stream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use tail::{SharedTails, TailLog};

use crate::error::{StoreError, StoreResult};
use crate::model::EventPage;
use crate::ports::EventReader;

mod tail;

/// Events read from the store per page while catching up: the largest page a read may ask for,
/// so that a replay is as few round trips as possible (on PostgreSQL a replay's throughput grows
/// with the page size; docs/benchmarks.md, B4). What one catching-up connection holds stays
/// bounded: a page and the one read ahead, about 300 KB each.
pub const FOLLOW_PAGE: u32 = 1000;

/// Tells a follower that a session may have new events.
#[async_trait]
pub trait LiveSignal: Send + Sync {
    /// Resolves once an event with a sequence above `after` may exist, at once if one is already
    /// known to exist (a follower that has just caught up waits here without reading again).
    /// May resolve spuriously.
    async fn wait(&self, tenant_id: &str, session_id: &str, after: u64);

    /// The highest sequence announced so far, when this signal knows it: a follower that was
    /// handed every event up to it has nothing to read. `None`: unknown, read the store.
    fn announced(&self, _tenant_id: &str, _session_id: &str) -> Option<u64> {
        None
    }
}

/// The store's own wake-up (`wait_for_events`).
pub struct StoreSignal(pub Arc<dyn EventReader>);

#[async_trait]
impl LiveSignal for StoreSignal {
    async fn wait(&self, tenant_id: &str, session_id: &str, after: u64) {
        if self
            .0
            .wait_for_events(tenant_id, session_id, after)
            .await
            .is_err()
        {
            // The next read reports the failure; do not spin on a broken store.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Per-session "latest sequence" notices, fed by whoever knows first: an executor after its own
/// appends, or a gateway hub from its upstream subscription.
///
/// Bounded: once more than [`UNWATCHED_KEPT`] sessions are held, those nobody waits on are
/// dropped (their heads are only a shortcut: a follower that starts later reads the store first).
#[derive(Default)]
pub struct LocalSignals {
    heads: Mutex<Heads>,
}

/// Sessions whose head is kept although nobody waits on it, at least.
const UNWATCHED_KEPT: usize = 4096;

#[derive(Default)]
struct Heads {
    sessions: HashMap<(String, String), watch::Sender<u64>>,
    /// The size at which unwatched sessions are dropped next.
    prune_at: usize,
}

impl Heads {
    fn sender(&mut self, tenant_id: &str, session_id: &str) -> watch::Sender<u64> {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        if let Some(sender) = self.sessions.get(&key) {
            return sender.clone();
        }
        if self.sessions.len() >= self.prune_at.max(UNWATCHED_KEPT) {
            self.sessions
                .retain(|_, sender| sender.receiver_count() > 0);
            // Amortised: the next pass waits until the map has doubled again.
            self.prune_at = self.sessions.len() * 2;
        }
        self.sessions
            .entry(key)
            .or_insert_with(|| watch::Sender::new(0))
            .clone()
    }
}

impl LocalSignals {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn sender(&self, tenant_id: &str, session_id: &str) -> watch::Sender<u64> {
        self.heads.locked().sender(tenant_id, session_id)
    }

    /// Records that `sequence` is stored and wakes the session's followers.
    pub fn notify(&self, tenant_id: &str, session_id: &str, sequence: u64) {
        self.sender(tenant_id, session_id).send_if_modified(|head| {
            if sequence > *head {
                *head = sequence;
                true
            } else {
                false
            }
        });
    }

    /// The highest sequence notified for a session (0 when none was).
    pub fn announced(&self, tenant_id: &str, session_id: &str) -> u64 {
        let heads = self.heads.locked();
        heads
            .sessions
            .get(&(tenant_id.to_owned(), session_id.to_owned()))
            .map_or(0, |head| *head.borrow())
    }

    /// Forgets a session nobody follows any more.
    pub fn forget(&self, tenant_id: &str, session_id: &str) {
        let mut heads = self.heads.locked();
        let key = (tenant_id.to_owned(), session_id.to_owned());
        if heads
            .sessions
            .get(&key)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            heads.sessions.remove(&key);
        }
    }
}

#[async_trait]
impl LiveSignal for LocalSignals {
    async fn wait(&self, tenant_id: &str, session_id: &str, after: u64) {
        let mut receiver = self.sender(tenant_id, session_id).subscribe();
        // Ok(_) once the head passes `after`; Err only if the sender is gone, i.e. never here.
        let _ = receiver.wait_for(|head| *head > after).await;
    }

    fn announced(&self, tenant_id: &str, session_id: &str) -> Option<u64> {
        Some(LocalSignals::announced(self, tenant_id, session_id))
    }
}

/// Receives the events this process appended, as soon as the store acknowledged them.
pub trait AppendedEvents: Send + Sync {
    fn appended(&self, tenant_id: &str, events: &[EventEnvelope]);
}

/// Hands the events a process appends to that process's own followers (the gateway's shared
/// tails in `serve`): a follower that was live when they were appended receives them even when
/// retention trims them from the store before anyone could read them there. Built before both
/// ends exist (the executor is assembled before the gateway), connected once the followers are.
#[derive(Default)]
pub struct HandOff {
    target: std::sync::RwLock<Option<std::sync::Weak<dyn AppendedEvents>>>,
}

impl HandOff {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn connect(&self, target: &Arc<dyn AppendedEvents>) {
        *self.target.write_locked() = Some(Arc::downgrade(target));
    }

    /// Called by the appender after the store acknowledged `events` (all of one session).
    pub fn appended(&self, tenant_id: &str, events: &[EventEnvelope]) {
        let target = self
            .target
            .read_locked()
            .as_ref()
            .and_then(std::sync::Weak::upgrade);
        if let Some(target) = target {
            target.appended(tenant_id, events);
        }
    }
}

/// What a follower yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    Event(EventEnvelope),
    /// Nothing happened for a whole idle period (SSE sends a heartbeat).
    Idle,
}

/// How a follower behaves.
#[derive(Clone)]
pub struct FollowOptions {
    /// When `stop` fires after this did (a drain, not a revoked credential), what is stored by
    /// then is still sent before the stream ends.
    pub flush_on_stop: Option<CancellationToken>,
    /// Silence after which `Followed::Idle` is yielded.
    pub idle: Duration,
    /// Longest wait on the signal before reading the store anyway (the safety net).
    pub recheck: Duration,
    /// Ends the stream (shutdown).
    pub stop: CancellationToken,
}

struct State {
    log: Arc<dyn EventReader>,
    signal: Arc<dyn LiveSignal>,
    tenant_id: String,
    session_id: String,
    after: u64,
    buffered: VecDeque<EventEnvelope>,
    /// The next page of a catch-up, read while the buffered one is being sent.
    read_ahead: Option<ReadAhead>,
    /// The last page reached the head: wait for news before reading again.
    caught_up: bool,
    options: FollowOptions,
    finished: bool,
    /// Stopped with a flush: reading what is stored up to the head, then ending.
    flushing: bool,
}

/// A page read in the background; dropping it (the follower went away) stops the read.
struct ReadAhead(tokio::task::JoinHandle<StoreResult<EventPage>>);

impl ReadAhead {
    fn start(state: &State, after: u64) -> Self {
        let log = Arc::clone(&state.log);
        let (tenant_id, session_id) = (state.tenant_id.clone(), state.session_id.clone());
        ReadAhead(tokio::spawn(async move {
            log.read_events(&tenant_id, &session_id, after, FOLLOW_PAGE)
                .await
        }))
    }

    async fn page(mut self) -> StoreResult<EventPage> {
        match (&mut self.0).await {
            Ok(page) => page,
            // Panicked (never cancelled: only dropping `self` aborts it).
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Events after `after`, then live ones; ends after `session.closed`, on `stop`, or after the
/// first store error (yielded once).
pub fn follow(
    log: Arc<dyn EventReader>,
    signal: Arc<dyn LiveSignal>,
    tenant_id: String,
    session_id: String,
    after: u64,
    options: FollowOptions,
) -> impl Stream<Item = Result<Followed, StoreError>> + Send + 'static {
    let state = State {
        log,
        signal,
        tenant_id,
        session_id,
        after,
        buffered: VecDeque::new(),
        read_ahead: None,
        caught_up: false,
        options,
        finished: false,
        flushing: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        if state.finished {
            return None;
        }
        match next(&mut state).await {
            Ok(Some(item)) => Some((Ok(item), state)),
            Ok(None) => None,
            Err(error) => {
                state.finished = true;
                Some((Err(error), state))
            }
        }
    })
}

async fn next(state: &mut State) -> Result<Option<Followed>, StoreError> {
    let idle_deadline = tokio::time::Instant::now() + state.options.idle;
    loop {
        if let Some(event) = state.buffered.pop_front() {
            state.after = event.sequence;
            if event.event_type == EventType::SessionClosed {
                state.finished = true;
            }
            return Ok(Some(Followed::Event(event)));
        }
        if state.options.stop.is_cancelled() {
            let flush = state
                .options
                .flush_on_stop
                .as_ref()
                .is_some_and(CancellationToken::is_cancelled);
            if !flush || (state.flushing && state.caught_up) {
                return Ok(None);
            }
            if !state.flushing {
                // One more pass up to the head, whatever the last read said.
                state.flushing = true;
                state.caught_up = false;
            }
        }
        if !std::mem::take(&mut state.caught_up) {
            let page = match state.read_ahead.take() {
                Some(read_ahead) => read_ahead.page().await?,
                None => {
                    state
                        .log
                        .read_events(
                            &state.tenant_id,
                            &state.session_id,
                            state.after,
                            FOLLOW_PAGE,
                        )
                        .await?
                }
            };
            if let Some(last) = page.events.last() {
                if page.has_more {
                    // Catching up: the store prepares the next page while this one is sent.
                    state.read_ahead = Some(ReadAhead::start(state, last.sequence));
                } else {
                    state.caught_up = true;
                }
                state.buffered.extend(page.events);
                continue;
            }
            if state.flushing {
                return Ok(None);
            }
        }
        let now = tokio::time::Instant::now();
        if now >= idle_deadline {
            return Ok(Some(Followed::Idle));
        }
        let wait_until = idle_deadline.min(now + state.options.recheck);
        let signal = state
            .signal
            .wait(&state.tenant_id, &state.session_id, state.after);
        // Either way the store is read again before anything is declared idle.
        tokio::select! {
            () = signal => {}
            () = tokio::time::sleep_until(wait_until) => {}
            // Round the loop: it ends the stream, after a flush when one is due.
            () = state.options.stop.cancelled() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_heads_of_sessions_nobody_waits_on_stay_bounded() {
        let signals = LocalSignals::new();
        let waiting = Arc::clone(&signals);
        let watched = tokio::spawn(async move { waiting.wait("t", "watched", 0).await });
        while signals
            .heads
            .locked()
            .sessions
            .get(&("t".to_owned(), "watched".to_owned()))
            .is_none_or(|sender| sender.receiver_count() == 0)
        {
            tokio::task::yield_now().await;
        }
        for index in 0..20_000 {
            signals.notify("t", &format!("s-{index}"), 1);
        }
        assert!(signals.heads.locked().sessions.len() <= UNWATCHED_KEPT + 1);
        // The session someone waits on was kept, and its waiter is woken.
        signals.notify("t", "watched", 1);
        tokio::time::timeout(Duration::from_secs(5), watched)
            .await
            .expect("the waiter is woken")
            .unwrap();
    }
}
