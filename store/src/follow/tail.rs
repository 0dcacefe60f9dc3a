//! Shared tails: one reader of the store per followed session per process, however many
//! streams (SSE connections in a gateway, `Subscribe` streams in an executor) follow it.
//!
//! Without it every SSE connection reads the store on every wake-up: with N subscribers of one
//! session, each new event costs N store reads (N database queries on PostgreSQL), plus N empty
//! reads to learn that nothing else is new. Here a *pump* task per followed session waits on the
//! live signal, reads the new events once, keeps the most recent ones in memory and publishes the
//! sequence it has read up to. Followers then read:
//!
//! * events the tail holds: from memory;
//! * past the pump's head: nothing (they wait for the head to move, see [`LiveSignal`]);
//! * older events (a replay, a slow reader): from the store itself.
//!
//! Events are immutable once stored, so a copy is as good as the store's; the pump only ever
//! moves forward from the store's head at the time it started, so no event is skipped. A store
//! failure of the pump is reported to the followers, whose streams end as if they had read the
//! store themselves. A pump nobody has used for [`IDLE`] stops.
//!
//! Where the executor runs in this process (`serve`), its appends are also handed to the tails
//! as the store acknowledges them ([`AppendedEvents`]): a follower that was live when they were
//! appended reads them from memory even when retention trimmed them from the store before the
//! pump could read them. What does not join what a tail holds is left to the pump.
//!
//! Otherwise retention can overtake the pump: a burst longer than the retained log, appended
//! before the pump reads again (a busy process), trims events it has not read. Those are gone for
//! everyone, so this is not a failure of the tail: the pump starts again at the oldest retained
//! event, and a follower whose cursor is older gets the store's own `STALE_CURSOR`, as it would
//! alone.

use agent_runtime::sync::{Locked, ReadWriteLocked};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use agent_runtime::protocol::EventEnvelope;

use super::{AppendedEvents, FOLLOW_PAGE, LiveSignal};
use crate::error::{StoreError, StoreResult};
use crate::model::{EventPage, EventRange};
use crate::ports::EventReader;
use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Recent events kept per followed session, at most.
const RECENT: usize = 512;
/// Bytes of event JSON kept per followed session, at most (the newest event is always kept):
/// with events of up to a mebibyte (`executor.max_event_bytes`), the count alone would let one
/// session hold hundreds of them.
const RECENT_BYTES: usize = 8 << 20;
/// A pump without followers for this long stops.
const IDLE: Duration = Duration::from_secs(30);
/// Longest wait on the signal before the pump reads anyway (the safety net).
const RECHECK: Duration = Duration::from_secs(5);
/// Pause after a failed read.
const RETRY: Duration = Duration::from_millis(250);

type Key = (String, String);

/// The followed sessions of one gateway; an [`EventReader`] (reads go through the tails, everything
/// else straight to the store) and the [`LiveSignal`] of its SSE streams.
pub struct SharedTails {
    store: Arc<dyn EventReader>,
    signal: Arc<dyn LiveSignal>,
    tails: Mutex<HashMap<Key, Arc<Tail>>>,
    stop: CancellationToken,
}

struct Tail {
    /// Contiguous events up to the pump's head, the newest of them.
    recent: RwLock<Recent>,
    /// The last sequence the pump has read; `None` until it has read the store's head.
    head: watch::Sender<Option<u64>>,
    /// The pump's last read failed (cleared by the next success).
    failure: Mutex<Option<StoreError>>,
    last_used: Mutex<Instant>,
}

impl Tail {
    fn touch(&self) {
        *self.last_used.locked() = Instant::now();
    }

    fn idle(&self) -> bool {
        self.last_used.locked().elapsed() > IDLE
    }

    fn set_failure(&self, failure: Option<StoreError>) {
        let failed = failure.is_some();
        *self.failure.locked() = failure;
        if failed {
            // Wake the waiting followers: their next read reports the failure.
            self.head.send_modify(|_| ());
        }
    }

    fn failure(&self) -> Option<StoreError> {
        self.failure.locked().clone()
    }

    /// Events after `after` if the tail can answer: `Some(page)` from memory (empty when `after`
    /// is at or past the pump's head), `None` when the store must.
    fn read(&self, after: u64, limit: usize) -> Option<EventPage> {
        let head = (*self.head.borrow())?;
        if after >= head {
            return Some(EventPage {
                events: Vec::new(),
                has_more: false,
            });
        }
        let recent = self.recent.read_locked();
        let first = recent.front()?.sequence;
        if after + 1 < first {
            return None;
        }
        let skip = usize::try_from(after + 1 - first).unwrap_or(usize::MAX);
        let events: Vec<EventEnvelope> = recent.iter().skip(skip).take(limit).cloned().collect();
        let has_more = recent.len() > skip.saturating_add(limit);
        Some(EventPage { events, has_more })
    }

    /// The pump's head, else the newest event held (handed over before the pump started).
    fn known(&self, recent: &VecDeque<EventEnvelope>) -> Option<u64> {
        let head = *self.head.borrow();
        head.max(recent.back().map(|event| event.sequence))
    }

    /// Adds events the pump read: what is already held is skipped, and after a skip over
    /// trimmed events what is held no longer joins what follows, so it is dropped.
    fn push(&self, events: Vec<EventEnvelope>) {
        let mut recent = self.recent.write_locked();
        let known = self.known(&recent);
        let fresh: Vec<EventEnvelope> = events
            .into_iter()
            .filter(|event| known.is_none_or(|known| event.sequence > known))
            .collect();
        let Some(last) = fresh.last().map(|event| event.sequence) else {
            return;
        };
        if known.is_some_and(|known| known + 1 != fresh[0].sequence) {
            recent.clear();
        }
        recent.extend(fresh);
        drop(recent);
        self.head.send_replace(Some(last));
    }

    /// Adds events this process appended, handed over as the store acknowledged them. Only
    /// what joins what is held is taken; anything else the pump reads from the store.
    fn offer(&self, events: &[EventEnvelope]) {
        let mut recent = self.recent.write_locked();
        let known = self.known(&recent);
        let fresh: Vec<EventEnvelope> = events
            .iter()
            .filter(|event| known.is_none_or(|known| event.sequence > known))
            .cloned()
            .collect();
        let Some(last) = fresh.last().map(|event| event.sequence) else {
            return;
        };
        if known.is_some_and(|known| known + 1 != fresh[0].sequence) {
            return;
        }
        recent.extend(fresh);
        let started = self.head.borrow().is_some();
        drop(recent);
        if started {
            self.head.send_replace(Some(last));
        }
    }

    /// The pump starts at the store's `head`: events handed over before it are kept when they
    /// end exactly there (they join what it reads next), dropped otherwise.
    fn start_at(&self, head: u64) {
        let mut recent = self.recent.write_locked();
        let head = match recent.back().map(|event| event.sequence) {
            Some(held) if held >= head => held,
            Some(_) => {
                recent.clear();
                head
            }
            None => head,
        };
        drop(recent);
        self.head.send_replace(Some(head));
    }

    fn head(&self) -> Option<u64> {
        *self.head.borrow()
    }
}

/// The newest events of a tail, at most [`RECENT`] of them and [`RECENT_BYTES`] of JSON.
#[derive(Default)]
struct Recent {
    events: VecDeque<EventEnvelope>,
    bytes: usize,
}

impl Recent {
    fn extend(&mut self, events: Vec<EventEnvelope>) {
        for event in events {
            self.bytes += event.json().len();
            self.events.push_back(event);
        }
        while self.events.len() > RECENT || (self.bytes > RECENT_BYTES && self.events.len() > 1) {
            if let Some(oldest) = self.events.pop_front() {
                self.bytes -= oldest.json().len();
            }
        }
    }

    fn clear(&mut self) {
        self.events.clear();
        self.bytes = 0;
    }
}

impl std::ops::Deref for Recent {
    type Target = VecDeque<EventEnvelope>;

    fn deref(&self) -> &VecDeque<EventEnvelope> {
        &self.events
    }
}

impl SharedTails {
    pub fn new(
        store: Arc<dyn EventReader>,
        signal: Arc<dyn LiveSignal>,
        stop: CancellationToken,
    ) -> Arc<SharedTails> {
        Arc::new(SharedTails {
            store,
            signal,
            tails: Mutex::new(HashMap::new()),
            stop,
        })
    }

    /// The session's tail, its pump started if it was not running.
    fn tail(self: &Arc<Self>, tenant_id: &str, session_id: &str) -> Arc<Tail> {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        let mut tails = self.tails.locked();
        if let Some(tail) = tails.get(&key) {
            tail.touch();
            return Arc::clone(tail);
        }
        let tail = Arc::new(Tail {
            recent: RwLock::new(Recent::default()),
            head: watch::Sender::new(None),
            failure: Mutex::new(None),
            last_used: Mutex::new(Instant::now()),
        });
        tails.insert(key.clone(), Arc::clone(&tail));
        tokio::spawn(Arc::clone(self).pump(key, Arc::clone(&tail)));
        tail
    }

    /// Reads the session's new events into its tail until nobody follows it any more.
    async fn pump(self: Arc<Self>, key: Key, tail: Arc<Tail>) {
        let (tenant_id, session_id) = &key;
        // Start at the store's head: what came before is read from the store by whoever wants it.
        let mut head = loop {
            match self
                .store
                .latest_event_sequence(tenant_id, session_id)
                .await
            {
                Ok(head) => break head.unwrap_or(0),
                Err(error) => tail.set_failure(Some(error)),
            }
            if self.pause(&tail, RETRY).await {
                return self.forget(&key, &tail);
            }
        };
        tail.set_failure(None);
        tail.start_at(head);
        let mut read = true;
        loop {
            if tail.idle() || self.stop.is_cancelled() {
                return self.forget(&key, &tail);
            }
            // Events handed over since the last read need not be read again.
            head = head.max(tail.head().unwrap_or(head));
            // Not when woken only for events that were all handed over.
            if read {
                match self
                    .store
                    .read_events(tenant_id, session_id, head, FOLLOW_PAGE)
                    .await
                {
                    Ok(page) if !page.events.is_empty() => {
                        tail.set_failure(None);
                        head = page.events.last().map_or(head, |event| event.sequence);
                        let more = page.has_more;
                        tail.push(page.events);
                        if more {
                            continue;
                        }
                        // Caught up: no read that would come back empty; the wait returns at once
                        // if the head moved meanwhile.
                    }
                    Ok(_) => tail.set_failure(None),
                    Err(StoreError::StaleCursor(_)) if self.skip_trimmed(&key, &mut head).await => {
                        continue;
                    }
                    Err(error) => {
                        tail.set_failure(Some(error));
                        if self.pause(&tail, RETRY).await {
                            return self.forget(&key, &tail);
                        }
                        continue;
                    }
                }
            }
            let woken = self.signal.wait(tenant_id, session_id, head);
            let signalled = tokio::select! {
                () = woken => true,
                () = tokio::time::sleep(RECHECK) => false,
                () = self.stop.cancelled() => false,
            };
            // The recheck always reads; a wake-up only for what was not handed over.
            let held = head.max(tail.head().unwrap_or(head));
            read = !signalled
                || self
                    .signal
                    .announced(tenant_id, session_id)
                    .is_none_or(|announced| announced > held);
        }
    }

    /// Retention trimmed events after `head` before the pump read them: moves `head` to just
    /// before the oldest retained event. `false` when the store has nothing to skip to (the
    /// cursor is not behind the retained log), which the caller treats as a failure.
    async fn skip_trimmed(&self, (tenant_id, session_id): &Key, head: &mut u64) -> bool {
        match self.store.event_stream_range(tenant_id, session_id).await {
            Ok(Some(range)) if range.first_sequence.saturating_sub(1) > *head => {
                tracing::debug!(
                    session_id = %session_id,
                    from = *head,
                    to = range.first_sequence - 1,
                    "retention overtook the shared tail; it continues from the oldest retained event"
                );
                *head = range.first_sequence - 1;
                true
            }
            _ => false,
        }
    }

    /// Sleeps; `true` when the pump should stop instead.
    async fn pause(&self, tail: &Tail, pause: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(pause) => tail.idle(),
            () = self.stop.cancelled() => true,
        }
    }

    fn forget(&self, key: &Key, tail: &Arc<Tail>) {
        let mut tails = self.tails.locked();
        if tails.get(key).is_some_and(|held| Arc::ptr_eq(held, tail)) {
            tails.remove(key);
        }
    }

    /// Events after `after`: see the module docs.
    pub async fn read(
        self: &Arc<Self>,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<EventPage> {
        // Once the pumps stop (streams end on a drain) the tails fall behind: the streams' last
        // reads, which send what is stored before they end, go to the store.
        if self.stop.is_cancelled() {
            return self
                .store
                .read_events(tenant_id, session_id, after, limit)
                .await;
        }
        let tail = self.tail(tenant_id, session_id);
        if let Some(error) = tail.failure() {
            return Err(error);
        }
        match tail.read(after, limit as usize) {
            Some(page) => Ok(page),
            None => {
                self.store
                    .read_events(tenant_id, session_id, after, limit)
                    .await
            }
        }
    }

    /// Makes the session followed now (its tail exists, its pump starting). An SSE stream calls
    /// this before it answers: from then on the events this process appends are handed to the
    /// tail, so a client that has the response head misses none of them, even those retention
    /// trims from the store before the stream's first read.
    pub fn follow(self: &Arc<Self>, tenant_id: &str, session_id: &str) {
        if !self.stop.is_cancelled() {
            self.tail(tenant_id, session_id);
        }
    }

    /// Resolves once the pump has read past `after` (or failed).
    pub async fn wait(self: &Arc<Self>, tenant_id: &str, session_id: &str, after: u64) {
        let tail = self.tail(tenant_id, session_id);
        let mut head = tail.head.subscribe();
        let _ = head
            .wait_for(|head| head.is_some_and(|head| head > after) || tail.failure().is_some())
            .await;
    }

    /// Followed sessions (for tests and metrics).
    pub fn followed(&self) -> usize {
        self.tails.locked().len()
    }
}

impl AppendedEvents for SharedTails {
    fn appended(&self, tenant_id: &str, events: &[EventEnvelope]) {
        let Some(first) = events.first() else {
            return;
        };
        let key = (tenant_id.to_owned(), first.session_id.clone());
        let tail = self.tails.locked().get(&key).cloned();
        if let Some(tail) = tail {
            tail.offer(events);
        }
    }
}

/// The event log of SSE streams: reads through the tails, everything else to the store.
pub struct TailLog(pub Arc<SharedTails>);

#[async_trait]
impl EventReader for TailLog {
    async fn get_event_by_idempotency_key(
        &self,
        tenant_id: &str,
        session_id: &str,
        idempotency_key: &str,
    ) -> StoreResult<Option<EventEnvelope>> {
        self.0
            .store
            .get_event_by_idempotency_key(tenant_id, session_id, idempotency_key)
            .await
    }

    async fn read_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<EventPage> {
        self.0.read(tenant_id, session_id, after, limit).await
    }

    async fn latest_event_sequence(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<u64>> {
        self.0
            .store
            .latest_event_sequence(tenant_id, session_id)
            .await
    }

    async fn event_stream_range(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<EventRange>> {
        self.0.store.event_stream_range(tenant_id, session_id).await
    }

    async fn wait_for_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
    ) -> StoreResult<()> {
        self.0.wait(tenant_id, session_id, after).await;
        Ok(())
    }
}

#[async_trait]
impl LiveSignal for TailLog {
    async fn wait(&self, tenant_id: &str, session_id: &str, after: u64) {
        self.0.wait(tenant_id, session_id, after).await;
    }
}

#[cfg(test)]
mod tests;
