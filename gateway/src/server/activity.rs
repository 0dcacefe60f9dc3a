//! What one connection is doing, as far as its timeouts care: whether a request is in flight,
//! since when it has been idle, since when a request head has been arriving, and since when the
//! socket has refused more response data (the client's receive window and our send buffer are
//! full: the client is not reading).
//!
//! It also decides what the end of the client's byte stream means (a half-close, see
//! [`Activity::end_of_input`]).
//!
//! The socket wrapper and the per-request guard update it; the connection's watchdog reads it.
//! A write that is merely late (a busy process) never counts as blocked: only the kernel saying
//! "full" does. Times are milliseconds since the connection was accepted
//! (tokio's clock, so paused-time tests can move it).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Waker;
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::time::Instant;

const NONE: u64 = u64::MAX;

/// Why the watchdog closes a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// A request head (or a new connection's first one) did not arrive in time: a slow sender.
    HeaderTimeout,
    /// Kept alive with nothing in flight for too long; a normal end.
    Idle,
    /// A response frame has waited for the client too long: a reader that stopped reading.
    SlowReader,
}

/// The deadlines the watchdog applies.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    pub header_read: Duration,
    pub idle: Duration,
    pub write: Duration,
}

impl Deadlines {
    /// How often the watchdog looks: a quarter of the shortest deadline (so a deadline is
    /// enforced within 125 % of itself), at most once a second and at least every 5 ms.
    pub fn tick(&self) -> Duration {
        let shortest = self.header_read.min(self.idle).min(self.write);
        (shortest / 4).clamp(Duration::from_millis(5), Duration::from_secs(1))
    }
}

#[derive(Debug)]
pub struct Activity {
    epoch: Instant,
    in_flight: AtomicUsize,
    idle_since: AtomicU64,
    head_started: AtomicU64,
    write_blocked_since: AtomicU64,
    /// The client's byte stream has ended (it shut down its write half, or closed).
    input_ended: AtomicBool,
    /// The response in flight is a stream of unknown length (SSE), not a whole answer.
    streaming: AtomicBool,
    /// The socket's read, held back at the end of the input until the answer is out.
    held_read: AtomicWaker,
    /// A request body waiting for bytes that the ended input will never bring.
    waiting_body: AtomicWaker,
}

impl Activity {
    /// A connection just accepted: it owes us a request head from now on.
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_started: AtomicU64::new(0),
            write_blocked_since: AtomicU64::new(NONE),
            input_ended: AtomicBool::new(false),
            streaming: AtomicBool::new(false),
            held_read: AtomicWaker::new(),
            waiting_body: AtomicWaker::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    /// Bytes came in. Between requests they are the start of the next head.
    pub fn bytes_arrived(&self) {
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            let now = self.now_ms();
            let _ =
                self.head_started
                    .compare_exchange(NONE, now, Ordering::SeqCst, Ordering::SeqCst);
        }
    }

    /// A whole request head arrived and the request is being handled.
    pub fn request_started(&self) {
        self.streaming.store(false, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.head_started.store(NONE, Ordering::SeqCst);
    }

    /// The response was written out (or abandoned).
    pub fn request_finished(&self) {
        self.idle_since.store(self.now_ms(), Ordering::SeqCst);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        // A held end of input can go through now: there is nothing left to answer.
        self.held_read.wake();
    }

    /// The response in flight is a stream of unknown length: the end of the input ends it.
    pub fn response_streams(&self) {
        self.streaming.store(true, Ordering::SeqCst);
        self.held_read.wake();
    }

    /// The socket read the end of the client's byte stream. Whether the connection should see
    /// it now (`false`), or only once the request in flight is answered (`true`: the read is
    /// pending and `waker` is woken when it may go through).
    ///
    /// A client that sent its request and shut down its write half (a half-close) still waits
    /// for the answer, so while a request with a whole answer (not a stream) is in flight the
    /// end is held back; hyper would otherwise take it for a client that went away and drop the
    /// answer. A stream ends at once (its slot is freed, no heartbeat has to fail first), and so
    /// does an idle connection. A request body still waiting for bytes is failed (see
    /// [`Self::input_ended`]), since none will come.
    pub fn end_of_input(&self, waker: &Waker) -> bool {
        self.held_read.register(waker);
        self.input_ended.store(true, Ordering::SeqCst);
        self.waiting_body.wake();
        self.in_flight.load(Ordering::SeqCst) > 0 && !self.streaming.load(Ordering::SeqCst)
    }

    /// Whether the client's byte stream has ended, for a request body that waits for more of it;
    /// `waker` is woken when it ends later.
    pub fn input_ended(&self, waker: &Waker) -> bool {
        self.waiting_body.register(waker);
        self.input_ended.load(Ordering::SeqCst)
    }

    /// The socket took no data: its send buffer is full.
    pub fn write_blocked(&self) {
        let now = self.now_ms();
        let _ = self.write_blocked_since.compare_exchange(
            NONE,
            now,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// The socket took data: the client is reading.
    pub fn write_progressed(&self) {
        self.write_blocked_since.store(NONE, Ordering::SeqCst);
    }

    /// The deadline this connection has passed, if any.
    pub fn expired(&self, deadlines: &Deadlines) -> Option<Expiry> {
        let now = self.now_ms();
        let passed = |since: u64, limit: Duration| {
            since != NONE && u128::from(now.saturating_sub(since)) >= limit.as_millis()
        };
        // Checked first: a response (or its last bytes) that cannot leave keeps the connection
        // busy whatever else it is doing.
        if passed(
            self.write_blocked_since.load(Ordering::SeqCst),
            deadlines.write,
        ) {
            return Some(Expiry::SlowReader);
        }
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let head_started = self.head_started.load(Ordering::SeqCst);
        if head_started != NONE {
            return passed(head_started, deadlines.header_read).then_some(Expiry::HeaderTimeout);
        }
        passed(self.idle_since.load(Ordering::SeqCst), deadlines.idle).then_some(Expiry::Idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINES: Deadlines = Deadlines {
        header_read: Duration::from_secs(10),
        idle: Duration::from_secs(60),
        write: Duration::from_secs(30),
    };

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_owes_a_head_within_the_header_timeout() {
        let activity = Activity::new();
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(activity.expired(&DEADLINES), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(activity.expired(&DEADLINES), Some(Expiry::HeaderTimeout));
    }

    #[tokio::test(start_paused = true)]
    async fn between_requests_the_idle_timeout_applies_until_bytes_arrive() {
        let activity = Activity::new();
        activity.request_started();
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(activity.expired(&DEADLINES), None, "a request is in flight");
        activity.request_finished();
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(activity.expired(&DEADLINES), None);
        activity.bytes_arrived();
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(activity.expired(&DEADLINES), None, "a head is arriving");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(activity.expired(&DEADLINES), Some(Expiry::HeaderTimeout));

        let idle = Activity::new();
        idle.request_started();
        idle.request_finished();
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(idle.expired(&DEADLINES), Some(Expiry::Idle));
    }

    #[tokio::test(start_paused = true)]
    async fn a_socket_that_stays_full_for_the_write_timeout_is_a_slow_reader() {
        let activity = Activity::new();
        activity.request_started();
        activity.write_blocked();
        tokio::time::advance(Duration::from_secs(20)).await;
        // The client read a little: the clock starts again at the next refusal.
        activity.write_progressed();
        tokio::time::advance(Duration::from_secs(200)).await;
        assert_eq!(
            activity.expired(&DEADLINES),
            None,
            "waiting for events is fine"
        );
        activity.write_blocked();
        tokio::time::advance(Duration::from_secs(15)).await;
        activity.write_blocked();
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(activity.expired(&DEADLINES), Some(Expiry::SlowReader));
        // Even once the response is handed over, unsent bytes that cannot leave count.
        activity.request_finished();
        assert_eq!(activity.expired(&DEADLINES), Some(Expiry::SlowReader));
    }

    #[test]
    fn the_end_of_input_is_held_only_while_a_whole_answer_is_due() {
        let waker = Waker::noop();
        let idle = Activity::new();
        assert!(!idle.end_of_input(waker), "nothing to answer: close");

        let answering = Activity::new();
        answering.request_started();
        assert!(!answering.input_ended(waker));
        assert!(
            answering.end_of_input(waker),
            "held while the answer is due"
        );
        assert!(answering.input_ended(waker), "a body still waiting fails");
        answering.request_finished();
        assert!(!answering.end_of_input(waker), "answered: close");

        let streaming = Activity::new();
        streaming.request_started();
        streaming.response_streams();
        assert!(!streaming.end_of_input(waker), "a stream ends at once");
        streaming.request_finished();
        streaming.request_started();
        assert!(
            streaming.end_of_input(waker),
            "the next request's whole answer is held again"
        );
    }

    #[test]
    fn the_watchdog_looks_often_enough_for_the_shortest_deadline() {
        assert_eq!(DEADLINES.tick(), Duration::from_secs(1));
        let short = Deadlines {
            write: Duration::from_millis(200),
            ..DEADLINES
        };
        assert_eq!(short.tick(), Duration::from_millis(50));
    }
}
