//! Live-tail wake-ups: after an agent event append commits, this process wakes its own waiters
//! directly and hands the session's new head to its [`Notifier`], which sends the `NOTIFY`s of
//! all recent appends in one statement on a connection of its own; one `LISTEN` task per store
//! wakes the waiters of the sessions it hears about. The `NOTIFY` stays out of the append's
//! transaction: there it would hold PostgreSQL's cluster-wide notify lock until the commit
//! record is flushed, so every notifying append waited for the previous one's flush. A
//! notification is thus sent only after its append committed, and may be lost if the process
//! dies in between; when the listening connection drops, notifications may have been missed too,
//! so every waiter is woken (they re-read). `wait_for_events` resolves after [`POLL_FALLBACK`] in
//! any case.
//!
//! Only a process that follows through the store (`wait_for_events`) needs other processes'
//! `NOTIFY`s: `serve`, cluster executors and gateways follow through their own hand-offs. So a
//! follower registers (table `event_followers`, renewed while the process lives) and writers
//! send `NOTIFY`s only while one is registered. A writer may know of a new follower up to
//! [`FOLLOWERS_REFRESH`] late, so a follower trusts the heads it hears of only from
//! [`TRUST_AFTER`] after its registration committed (forgetting what it heard before), and stops
//! trusting them before its registration could expire unrenewed.

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use agent_runtime::protocol::EventEnvelope;

use super::PostgresStore;

/// The `NOTIFY` channel of agent event appends.
pub(super) const CHANNEL: &str = "agent_runtime_events";

/// A waiter re-reads after this long even without a notification (the safety net of decision S2).
pub(super) const POLL_FALLBACK: Duration = Duration::from_secs(1);

/// Pause before the listener reconnects after a failure.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// How long a follower's registration lasts unrenewed.
const FOLLOWER_TTL: Duration = Duration::from_secs(15);

/// How often a follower renews its registration.
const FOLLOWER_RENEW: Duration = Duration::from_secs(5);

/// How old a writer's answer to "is anyone registered?" may be before it asks again.
const FOLLOWERS_REFRESH: Duration = Duration::from_secs(1);

/// From a registration's commit until every writer has seen it, with a margin.
const TRUST_AFTER: Duration = Duration::from_secs(3);

/// A renewal keeps the heads trusted this long from when it was sent: its row expires later
/// (at the commit plus [`FOLLOWER_TTL`]), and a writer stops notifying only once it has expired.
const TRUSTED_FOR: Duration = FOLLOWER_TTL.saturating_sub(TRUST_AFTER);

/// At most one `NOTIFY` statement starts per this long: an idle process announces at once, a
/// busy one gathers what committed meanwhile into the next statement. Each statement is a
/// transaction with a round trip and the cluster-wide notify lock, so unpaced they would be a
/// large share of the transactions per command (measurements in bench/history.md). A follower in
/// another process waits at most this much more; this process's own followers are woken directly,
/// and a cluster gateway's by the executor's `Subscribe` stream, so only a follower reading the
/// store from another process (a fallback) waits for it.
const NOTIFY_PACE: Duration = Duration::from_millis(20);

type Key = (String, String);

/// Sessions whose known head is kept while nobody waits on them; past this many, those are
/// forgotten (their next wait asks the database).
const KEEP_IDLE_HEADS: usize = 1024;

/// Per-session wake-up channels carrying the newest head sequence known to be committed (0:
/// unknown).
///
/// A waiter whose cursor is at that head need not ask the database whether anything is newer
/// while the listener is connected: any later commit, of any process, wakes it (this process's
/// directly, others' by their `NOTIFY`). When the listener loses its connection, notifications
/// may be lost: every known head becomes unknown, so waiters ask the database again.
///
/// An append of this process reaches the listener as its own `NOTIFY`, often before the
/// appending task has handed the events to this process's followers; waking them then would send
/// them to the database for events this process holds. So while the process appends to a
/// session, a notification for it only records the head, and the append's own wake-up, which
/// comes after, wakes the waiters.
#[derive(Default)]
pub(super) struct Waiters {
    senders: Mutex<HashMap<Key, watch::Sender<u64>>>,
    listening: AtomicBool,
    /// Whether every writer announces its appends to this process (see [`Follower`]).
    trust: Mutex<Trust>,
    /// Appends of this process in flight, per session.
    appending: Mutex<HashMap<Key, InFlight>>,
}

#[derive(Default)]
struct InFlight {
    appends: usize,
    /// The highest head a notification only noted, and the highest the appends woke for: a
    /// notification of another process's append must not be left unannounced when ours fail.
    noted: u64,
    woken: u64,
}

/// An append of this process in flight (see [`Waiters`]); ends when dropped.
pub(super) struct Appending<'a> {
    waiters: &'a Waiters,
    key: Key,
}

impl Drop for Appending<'_> {
    fn drop(&mut self) {
        let mut appending = self.waiters.appending();
        let Some(in_flight) = appending.get_mut(&self.key) else {
            return;
        };
        in_flight.appends -= 1;
        if in_flight.appends > 0 {
            return;
        }
        let (noted, woken) = (in_flight.noted, in_flight.woken);
        appending.remove(&self.key);
        drop(appending);
        if noted > woken
            && let Some(sender) = self.waiters.senders().get(&self.key)
        {
            sender.send_modify(|known| *known = (*known).max(noted));
        }
    }
}

impl Waiters {
    fn senders(&self) -> std::sync::MutexGuard<'_, HashMap<Key, watch::Sender<u64>>> {
        // The map only holds channels; a panic elsewhere cannot leave it inconsistent.
        self.senders.locked()
    }

    pub fn subscribe(&self, tenant_id: &str, session_id: &str) -> watch::Receiver<u64> {
        let mut senders = self.senders();
        // A session nobody waits on keeps its known head for a while: its follower waits again
        // right after each read, and a head forgotten in between would cost a query per wait.
        if senders.len() >= KEEP_IDLE_HEADS {
            senders.retain(|_, sender| sender.receiver_count() > 0);
        }
        senders
            .entry((tenant_id.to_owned(), session_id.to_owned()))
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    fn appending(&self) -> std::sync::MutexGuard<'_, HashMap<Key, InFlight>> {
        self.appending.locked()
    }

    /// Marks an append of this process to the session as in flight until the guard drops.
    pub fn appending_to(&self, tenant_id: &str, session_id: &str) -> Appending<'_> {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        self.appending().entry(key.clone()).or_default().appends += 1;
        Appending { waiters: self, key }
    }

    /// After an append of this process committed up to `head`: wakes the session's waiters.
    pub fn wake(&self, tenant_id: &str, session_id: &str, head: u64) {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        if let Some(in_flight) = self.appending().get_mut(&key) {
            in_flight.woken = in_flight.woken.max(head);
        }
        if let Some(sender) = self.senders().get(&key) {
            sender.send_modify(|known| *known = (*known).max(head));
        }
    }

    /// A notification that `head` is committed: wakes the waiters if it is news. While an append
    /// of this process to the session is in flight, it is only noted: the append's own wake-up
    /// follows, and the note is applied when the last append ends without reaching it.
    fn notified(&self, tenant_id: &str, session_id: &str, head: u64) {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        if let Some(in_flight) = self.appending().get_mut(&key) {
            in_flight.noted = in_flight.noted.max(head);
            return;
        }
        if let Some(sender) = self.senders().get(&key) {
            sender.send_if_modified(|known| {
                let news = head > *known;
                *known = (*known).max(head);
                news
            });
        }
    }

    /// The session's log restarted (a test hook): its known head starts over too.
    #[cfg(any(test, feature = "testing"))]
    pub fn reset(&self, tenant_id: &str, session_id: &str) {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        if let Some(sender) = self.senders().get(&key) {
            sender.send_replace(0);
        }
    }

    /// Forgets every known head and wakes every waiter (they re-read).
    pub fn wake_all(&self) {
        for sender in self.senders().values() {
            sender.send_replace(0);
        }
    }

    /// Whether `after` is the newest head committed to the session, as far as this process can
    /// know without asking: it is the known head and notifications are arriving, so any later
    /// commit of any process wakes the session's waiters (the same proof `wait_for_events`
    /// relies on before it sleeps).
    pub fn at_known_head(&self, tenant_id: &str, session_id: &str, after: u64) -> bool {
        if after == 0 || !self.listening() {
            return false;
        }
        let key = (tenant_id.to_owned(), session_id.to_owned());
        self.senders()
            .get(&key)
            .is_some_and(|sender| *sender.borrow() == after)
    }

    /// Whether notifications are arriving and every writer sends them (so a known head is the
    /// newest one).
    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::Acquire) && self.trust.locked().holds(Instant::now())
    }

    fn set_listening(&self, listening: bool) {
        self.listening.store(listening, Ordering::Release);
    }
}

/// Whether this process's registration as a follower is seen by every writer.
#[derive(Debug, Default)]
struct Trust {
    /// Set once the registration is old enough and the heads heard before it were forgotten.
    trusted: bool,
    /// When the last renewal stops covering the registration.
    until: Option<Instant>,
}

impl Trust {
    fn holds(&self, now: Instant) -> bool {
        self.trusted && self.until.is_some_and(|until| now < until)
    }

    /// A renewal sent at `sent` succeeded just now. Whether the trust goes on (it held until
    /// now, so the registration never expired); if not, it starts over (untrusted until
    /// [`Trust::begin`]).
    fn renewed(&mut self, sent: Instant) -> bool {
        let goes_on = self.holds(Instant::now());
        self.trusted = goes_on;
        self.until = Some(sent + TRUSTED_FOR);
        goes_on
    }

    fn begin(&mut self) {
        self.trusted = true;
    }
}

/// This process's registration as a follower through the store: made by its first
/// `wait_for_events`, renewed until the store is dropped.
#[derive(Default)]
pub(super) struct Follower {
    registered: tokio::sync::OnceCell<()>,
    renewals: std::sync::OnceLock<JoinHandle<()>>,
}

impl Follower {
    /// Registers this process (once; the first call waits for the first attempt).
    pub async fn register(&self, pool: &PgPool, waiters: &Arc<Waiters>) {
        self.registered
            .get_or_init(|| async {
                let id = format!(
                    "{:016x}{:016x}",
                    rand::random::<u64>(),
                    rand::random::<u64>()
                );
                let sent = Instant::now();
                let first = renew(pool, &id).await.ok().map(|()| sent);
                let (pool, waiters) = (pool.clone(), Arc::clone(waiters));
                let _ = self
                    .renewals
                    .set(tokio::spawn(follow(pool, waiters, id, first)));
            })
            .await;
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        if let Some(renewals) = self.renewals.get() {
            renewals.abort();
        }
    }
}

/// Keeps the registration `id` renewed; `first` is when its first renewal was sent, if it
/// succeeded.
async fn follow(pool: PgPool, waiters: Arc<Waiters>, id: String, mut renewed: Option<Instant>) {
    loop {
        if let Some(sent) = renewed.take()
            && !waiters.trust.locked().renewed(sent)
        {
            // A writer may have skipped a NOTIFY until it saw the registration: heads heard
            // until then may be stale.
            tokio::time::sleep(TRUST_AFTER).await;
            waiters.wake_all();
            waiters.trust.locked().begin();
        }
        tokio::time::sleep(FOLLOWER_RENEW).await;
        let sent = Instant::now();
        match renew(&pool, &id).await {
            Ok(()) => renewed = Some(sent),
            Err(error) => {
                tracing::debug!(error = %super::brief(&error), "event follower registration not renewed");
            }
        }
    }
}

/// Registers or renews the follower `id` until [`FOLLOWER_TTL`] from now (the database's
/// clock), and drops registrations that expired long ago.
async fn renew(pool: &PgPool, id: &str) -> Result<(), sqlx::Error> {
    let ttl = i64::try_from(FOLLOWER_TTL.as_millis()).unwrap_or(i64::MAX);
    sqlx::query(
        "WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms), \
         gone AS (DELETE FROM event_followers WHERE expires_at_ms < (SELECT ms FROM now) - 60000) \
         INSERT INTO event_followers (follower_id, expires_at_ms) \
         SELECT $1, ms + $2 FROM now \
         ON CONFLICT (follower_id) DO UPDATE SET expires_at_ms = EXCLUDED.expires_at_ms",
    )
    .bind(id)
    .bind(ttl)
    .execute(pool)
    .await?;
    Ok(())
}

/// Whether some process follows through the store now (the database's clock).
async fn followers_registered(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM event_followers \
         WHERE expires_at_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint)",
    )
    .fetch_one(pool)
    .await
}

/// The newest committed head of each session this process appended to and has not announced to
/// other processes yet (a burst of appends to one session costs one notification).
#[derive(Default)]
pub(super) struct Notifier {
    pending: Mutex<HashMap<Key, u64>>,
    wake: Notify,
    /// `NOTIFY` statements sent, and batches of notifications dropped because no process
    /// followed through the store (diagnostics and tests).
    pub sent: AtomicU64,
    pub skipped: AtomicU64,
}

impl Notifier {
    /// After an append committed up to `head`: queues its notification.
    pub fn committed(&self, tenant_id: &str, session_id: &str, head: u64) {
        let mut pending = self.pending.locked();
        let known = pending
            .entry((tenant_id.to_owned(), session_id.to_owned()))
            .or_default();
        *known = (*known).max(head);
        drop(pending);
        self.wake.notify_one();
    }

    fn take(&self) -> HashMap<Key, u64> {
        std::mem::take(&mut *self.pending.locked())
    }
}

/// Sends the queued notifications until aborted: one statement for everything queued meanwhile,
/// at most one per [`NOTIFY_PACE`].
/// A failed send is not retried (the waiters elsewhere re-read after [`POLL_FALLBACK`]).
pub(super) fn spawn_notifier(pool: PgPool, notifier: Arc<Notifier>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last_sent: Option<tokio::time::Instant> = None;
        // Whether a follower was registered, and when that was asked.
        let mut followers: Option<(Instant, bool)> = None;
        loop {
            notifier.wake.notified().await;
            if let Some(sent) = last_sent {
                tokio::time::sleep_until(sent + NOTIFY_PACE).await;
            }
            let payloads: Vec<String> = notifier
                .take()
                .into_iter()
                .map(|((tenant, session), head)| payload(&tenant, &session, head))
                .collect();
            if payloads.is_empty() {
                continue;
            }
            let registered = match followers {
                Some((asked, registered)) if asked.elapsed() < FOLLOWERS_REFRESH => registered,
                _ => {
                    let asked = Instant::now();
                    // Unknown counts as registered: a NOTIFY too many costs less than a follower
                    // missing one.
                    let registered = followers_registered(&pool).await.unwrap_or(true);
                    followers = Some((asked, registered));
                    registered
                }
            };
            if !registered {
                notifier.skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            last_sent = Some(tokio::time::Instant::now());
            let sent = sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
                .bind(CHANNEL)
                .bind(&payloads)
                .execute(&pool)
                .await;
            match sent {
                Ok(_) => {
                    notifier.sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => {
                    tracing::debug!(error = %super::brief(&error), "event notifications not sent");
                    tokio::time::sleep(RECONNECT_DELAY).await;
                }
            }
        }
    })
}

/// What a notification of a new head carries.
pub(super) fn payload(tenant_id: &str, session_id: &str, head: u64) -> String {
    serde_json::json!([tenant_id, session_id, head]).to_string()
}

fn parse_payload(payload: &str) -> Option<(String, String, u64)> {
    serde_json::from_str(payload).ok()
}

/// Listens until aborted, reconnecting after failures.
pub(super) fn spawn_listener(pool: PgPool, waiters: Arc<Waiters>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Err(error) = listen(&pool, &waiters).await;
            tracing::debug!(error = %super::brief(&error), "event listener reconnecting");
            waiters.set_listening(false);
            waiters.wake_all();
            tokio::time::sleep(RECONNECT_DELAY).await;
        }
    })
}

/// One listening connection; returns only with the error that ended it.
async fn listen(pool: &PgPool, waiters: &Waiters) -> Result<std::convert::Infallible, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    // Whatever was appended while nobody listened: wake everyone to re-read.
    waiters.wake_all();
    waiters.set_listening(true);
    loop {
        match listener.try_recv().await? {
            Some(notification) => {
                waiters.set_listening(true);
                if let Some((tenant, session, head)) = parse_payload(notification.payload()) {
                    waiters.notified(&tenant, &session, head);
                }
            }
            // The connection dropped (it reconnects on the next call): anything sent meanwhile
            // is lost, so every waiter re-reads, and asks the database until a notification
            // arrives again.
            None => {
                waiters.set_listening(false);
                waiters.wake_all();
            }
        }
    }
}

impl PostgresStore {
    /// After an append of `events` committed and left the stream at `head`: remembers the head
    /// for the next one-statement append (`append.rs`) and wakes this process's waiters.
    pub(super) fn announce_appended(
        &self,
        tenant_id: &str,
        session_id: &str,
        head: super::rows::Head,
        events: &[EventEnvelope],
    ) {
        self.inner.heads.remember(tenant_id, session_id, head);
        let Some(last) = events.last().map(|event| event.sequence) else {
            return;
        };
        self.inner.waiters.wake(tenant_id, session_id, last);
        self.inner.notifier.committed(tenant_id, session_id, last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the receiver was woken since it last looked, and the head it holds.
    fn woken(receiver: &mut watch::Receiver<u64>) -> (bool, u64) {
        let changed = receiver.has_changed().unwrap();
        (changed, *receiver.borrow_and_update())
    }

    /// A registration is trusted only once begun (after every writer has seen it), for as long
    /// as renewals keep it from expiring; one that lapsed starts over untrusted.
    #[test]
    fn known_heads_are_trusted_only_while_every_writer_announces_to_this_process() {
        let waiters = Waiters::default();
        waiters.set_listening(true);
        assert!(!waiters.listening(), "not registered");

        let sent = Instant::now();
        assert!(!waiters.trust.locked().renewed(sent), "a new registration");
        assert!(!waiters.listening(), "not every writer has seen it yet");
        waiters.trust.locked().begin();
        assert!(waiters.listening());
        assert!(
            waiters.trust.locked().renewed(Instant::now()),
            "renewed in time"
        );
        assert!(waiters.listening());

        let mut lapsed = Trust {
            trusted: true,
            until: Some(sent),
        };
        assert!(!lapsed.holds(Instant::now()), "past its renewal's cover");
        assert!(!lapsed.renewed(Instant::now()), "renewed after it lapsed");
        assert!(!lapsed.holds(Instant::now()), "starts over untrusted");

        waiters.set_listening(false);
        assert!(!waiters.listening(), "the listener is down");
    }

    #[test]
    fn notifications_wake_only_for_news_and_wait_for_this_process_appends() {
        let waiters = Waiters::default();
        let mut receiver = waiters.subscribe("t", "s");
        waiters.notified("t", "s", 3);
        assert_eq!(woken(&mut receiver), (true, 3));
        // Our own append's notification after its wake-up: no news.
        waiters.wake("t", "s", 4);
        assert_eq!(woken(&mut receiver), (true, 4));
        waiters.notified("t", "s", 4);
        assert_eq!(woken(&mut receiver), (false, 4));

        // Our append in flight: its notification is only noted; its own wake-up wakes, once.
        let appending = waiters.appending_to("t", "s");
        waiters.notified("t", "s", 5);
        assert_eq!(woken(&mut receiver), (false, 4));
        waiters.wake("t", "s", 5);
        drop(appending);
        assert_eq!(woken(&mut receiver), (true, 5));

        // Our append failed while another process appended: the note wakes when ours ends.
        let appending = waiters.appending_to("t", "s");
        waiters.notified("t", "s", 6);
        assert_eq!(woken(&mut receiver), (false, 5));
        drop(appending);
        assert_eq!(woken(&mut receiver), (true, 6));
    }

    #[test]
    fn a_lost_connection_forgets_every_known_head() {
        let waiters = Waiters::default();
        let mut receiver = waiters.subscribe("t", "s");
        waiters.wake("t", "s", 7);
        let _ = woken(&mut receiver);
        waiters.wake_all();
        assert_eq!(woken(&mut receiver), (true, 0));
    }

    #[test]
    fn a_session_keeps_its_known_head_between_waits() {
        let waiters = Waiters::default();
        drop(waiters.subscribe("t", "s"));
        waiters.wake("t", "s", 9);
        // Other sessions' waits do not forget it while few sessions are known.
        drop(waiters.subscribe("t", "other"));
        assert_eq!(*waiters.subscribe("t", "s").borrow(), 9);
    }
}
