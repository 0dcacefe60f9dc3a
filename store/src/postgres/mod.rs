//! The PostgreSQL backend: every port of the store, shared by every gateway and executor of a
//! cluster (docs/storage.md §3).
//!
//! Contract and the rules that make it hold:
//! - **One behaviour** (decision S6): decisions come from [`crate::rules`] and
//!   [`crate::transcript`], the same functions the memory engine uses; this module only loads and
//!   stores rows. Every time the store compares comes from the injected clock and is passed as a
//!   parameter (epoch ms), never `NOW()`. A cluster injects a [`DatabaseClock`], so its processes
//!   share the database's time base while tests can still move time by hand.
//! - **Atomicity**: every write runs in one explicit transaction. A statement that fails before
//!   `COMMIT` leaves nothing behind (retry-safe); a failure *during* `COMMIT` is ambiguous and is
//!   reported as `Backend { retry_safe: false }` (the gateway answers `COMMAND_IN_PROGRESS`).
//! - **Cancellation**: a dropped future drops its `sqlx::Transaction`, which queues a `ROLLBACK`;
//!   the pool flushes it (and pings) before the connection is reused, so no connection goes back
//!   to the pool inside an open transaction. `BEGIN` itself runs in its own task, so a call
//!   cancelled during `BEGIN` still ends with a `Transaction` to drop (see `PostgresStore::begin`).
//! - **Deadlocks and serialization failures** (`40P01`, `40001`): PostgreSQL rolls the victim's
//!   transaction back whole, so a write transaction that is re-run from its `BEGIN` (its "now",
//!   its reads and its decisions included) is run again, up to [`CONFLICT_ATTEMPTS`] times with
//!   jittered exponential backoff ([`PostgresStore::retrying_conflicts`]); after that the caller
//!   gets a retry-safe `Backend` error (IDEM-14, PG-03).
//! - **Lock order** of fenced writes: the session's `execution` advisory lock, then its
//!   `execution_leases` row, then the stream head, then the transcript row (docs/storage.md §3.5).

mod append;
mod append_queue;
mod batch_queue;
mod commands;
mod commit_queue;
mod db_clock;
mod durable;
mod events;
mod health;
mod leases;
mod memories;
mod migrate;
mod notify;
mod pending_inputs;
mod portable;
mod request_step;
mod routes;
mod rows;
mod sessions;
mod shared_commit;
mod tenants;
#[cfg(any(test, feature = "testing"))]
mod test_hooks;
mod transcript_copy;
mod transcripts;
mod webhooks;
mod workers;

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_runtime::clock::{self, SharedClock};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, Postgres, Transaction};
use tokio::task::JoinHandle;

use crate::error::{StoreError, StoreResult};
use crate::model::{DEFAULT_MAX_DURABLE_EVENTS, ExecutionFence, ExecutionLease};
use crate::options::DEFAULT_MAX_EVENTS_PER_SESSION;

pub use db_clock::{DatabaseClock, RECALIBRATE_EVERY};
pub use migrate::{migrate, schema_version_of, target_schema_version};

/// What [`PostgresStore::connect`] does when the database schema is behind this build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SchemaPolicy {
    /// Apply the embedded migrations (under an advisory lock, so concurrent starts are safe).
    #[default]
    Migrate,
    /// Refuse to start unless the schema is exactly at this build's version; the message names
    /// `agent-runtime migrate`.
    RequireCurrent,
}

/// Construction options of [`PostgresStore`].
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// Source of "now" for every TTL, lease expiry and timestamp. Default: the system clock.
    pub clock: SharedClock,
    /// Agent events retained per session (decision S4). Default 10 000; values below 1 count as 1.
    pub max_events_per_session: u64,
    /// Quota of durable journal events per session. Default 100 000.
    pub max_durable_events_per_session: u64,
    /// Migrate at start-up, or require a current schema. Default: migrate.
    pub schema_policy: SchemaPolicy,
    /// Largest number of pooled connections. Default 10.
    pub max_connections: u32,
    /// How long a call waits for a pooled connection before failing with a retry-safe error
    /// (also bounds how long calls hang while the database is unreachable). Default 5 s.
    pub acquire_timeout: Duration,
    /// How long a connection may sit inside an open transaction without sending anything before
    /// the database ends its session. A writer that stalls mid-transaction (a paused process, a
    /// partitioned host) would otherwise hold its row locks forever and block the executor that
    /// adopted its sessions; its transaction rolls back, so a stalled writer loses nothing it was
    /// acknowledged for. Default 5 s.
    pub stalled_transaction_timeout: Duration,
    /// How long a statement of the store waits for a row or advisory lock (PostgreSQL's
    /// `lock_timeout`) before it fails with a retry-safe error. A transaction stuck while holding
    /// one session's locks then costs that session's writers this long, instead of blocking them
    /// (and the pooled connections they hold, which other tenants need) until it ends. Migrations
    /// wait without limit. Default 3 s.
    pub lock_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            clock: clock::system(),
            max_events_per_session: DEFAULT_MAX_EVENTS_PER_SESSION,
            max_durable_events_per_session: DEFAULT_MAX_DURABLE_EVENTS,
            schema_policy: SchemaPolicy::Migrate,
            max_connections: 10,
            acquire_timeout: Duration::from_secs(5),
            stalled_transaction_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(3),
        }
    }
}

/// A pooled connection idle at least this long is pinged before it is handed out.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The PostgreSQL store. Cheap to clone; clones share one pool.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    options: PostgresOptions,
    waiters: Arc<notify::Waiters>,
    /// The agent stream head of each session's last append here (one-statement appends).
    heads: append::KnownHeads,
    /// The durable stream head each session's last request step here left (one-statement
    /// journal entries: `durable.rs`).
    durable_heads: append::KnownHeads,
    /// The transcript document each session's last write here left (one-statement writes).
    transcripts: transcript_copy::TranscriptCopies,
    /// The process's one commit queue: appends, journal, transcript and receipt writes waiting
    /// for the next batch (`commit_queue.rs`).
    commits: batch_queue::BatchQueue<commit_queue::Queued>,
    /// Batches of more than one append sent (diagnostics and tests).
    append_batches: std::sync::atomic::AtomicU64,
    /// Transactions committed with appends and other writes (diagnostics and tests).
    mixed_batches: std::sync::atomic::AtomicU64,
    /// Journal entries of request steps written in one statement from a known head (tests).
    known_head_journal_writes: std::sync::atomic::AtomicU64,
    /// Shared transactions committed with more than one write (diagnostics and tests).
    shared_batches: std::sync::atomic::AtomicU64,
    listener: JoinHandle<()>,
    /// Sends this process's appends' notifications after they commit.
    notifier: Arc<notify::Notifier>,
    notifier_task: JoinHandle<()>,
    /// This process's registration as a follower through the store (its first wait makes it).
    follower: notify::Follower,
    closed: AtomicBool,
    /// Set by [`PostgresStore::disable_fencing_for_testing`] only.
    #[cfg(any(test, feature = "testing"))]
    fencing_disabled: AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.listener.abort();
        self.notifier_task.abort();
    }
}

pub(crate) type Tx = Transaction<'static, Postgres>;

/// Parses a database URL without ever echoing it (it may carry a password).
pub(crate) fn connect_options(url: &str) -> StoreResult<PgConnectOptions> {
    PgConnectOptions::from_str(url)
        .map_err(|_| StoreError::invalid("The PostgreSQL database URL is invalid"))
}

impl PostgresStore {
    /// Connects, applies or checks the schema according to `options.schema_policy`, and starts the
    /// `LISTEN` task that wakes live tails. The URL never appears in errors or logs.
    pub async fn connect(url: &str, options: PostgresOptions) -> StoreResult<Self> {
        let stalled_ms = options
            .stalled_transaction_timeout
            .as_millis()
            .max(1)
            .to_string();
        let lock_ms = options.lock_timeout.as_millis().max(1).to_string();
        let connect = connect_options(url)?.options([
            ("idle_in_transaction_session_timeout", stalled_ms.as_str()),
            ("lock_timeout", lock_ms.as_str()),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(options.acquire_timeout)
            // A pooled connection that sat idle is pinged before reuse, so connections broken by
            // a database restart are replaced instead of failing the next call. One used moments
            // ago is not: a ping per call was a round trip on every read and transaction.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_AFTER_IDLE {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(connect)
            .await
            .map_err(db_error)?;
        match options.schema_policy {
            SchemaPolicy::Migrate => migrate::run(&pool).await?,
            SchemaPolicy::RequireCurrent => migrate::require_current(&pool).await?,
        }
        let waiters = Arc::new(notify::Waiters::default());
        let listener = notify::spawn_listener(pool.clone(), Arc::clone(&waiters));
        let notifier = Arc::new(notify::Notifier::default());
        let notifier_task = notify::spawn_notifier(pool.clone(), Arc::clone(&notifier));
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                options,
                waiters,
                heads: append::KnownHeads::default(),
                durable_heads: append::KnownHeads::default(),
                transcripts: transcript_copy::TranscriptCopies::default(),
                commits: batch_queue::BatchQueue::default(),
                append_batches: std::sync::atomic::AtomicU64::new(0),
                mixed_batches: std::sync::atomic::AtomicU64::new(0),
                known_head_journal_writes: std::sync::atomic::AtomicU64::new(0),
                shared_batches: std::sync::atomic::AtomicU64::new(0),
                listener,
                notifier,
                notifier_task,
                follower: notify::Follower::default(),
                closed: AtomicBool::new(false),
                #[cfg(any(test, feature = "testing"))]
                fencing_disabled: AtomicBool::new(false),
            }),
        })
    }

    /// How many batches of more than one append this store has sent in one statement.
    pub fn append_batches(&self) -> u64 {
        self.inner
            .append_batches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many transactions this store has committed with event appends and other writes.
    pub fn mixed_batches(&self) -> u64 {
        self.inner
            .mixed_batches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many `NOTIFY` statements this store has sent, and how many batches of notifications
    /// it dropped because no process followed through the store.
    pub fn notifications(&self) -> (u64, u64) {
        let notifier = &self.inner.notifier;
        (
            notifier.sent.load(std::sync::atomic::Ordering::Relaxed),
            notifier.skipped.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// How many shared transactions of more than one write (journal, transcript, receipt) this
    /// store has committed.
    pub fn shared_batches(&self) -> u64 {
        self.inner
            .shared_batches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many transcript changes this store wrote in one statement, from the document its
    /// previous write left (`transcript_copy.rs`).
    pub fn transcript_copy_writes(&self) -> u64 {
        self.inner.transcripts.written()
    }

    /// How many request steps this store journalled in one statement, from the durable head its
    /// previous step of the session left (`durable.rs`).
    pub fn known_head_journal_writes(&self) -> u64 {
        self.inner
            .known_head_journal_writes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The connection pool (tests and diagnostics).
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    pub(crate) fn now(&self) -> u64 {
        self.inner.options.clock.now_ms()
    }

    fn transcript_copies(&self) -> &transcript_copy::TranscriptCopies {
        &self.inner.transcripts
    }

    pub(crate) fn options(&self) -> &PostgresOptions {
        &self.inner.options
    }

    pub(crate) fn ensure_open(&self) -> StoreResult<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(StoreError::NotOpen("PostgresStore is closed".into()));
        }
        Ok(())
    }

    /// Starts a read-write transaction (READ COMMITTED; writers serialise on row and advisory
    /// locks).
    pub(crate) async fn begin(&self) -> StoreResult<Tx> {
        self.begin_with("BEGIN").await
    }

    /// A transaction whose COMMIT does not wait for its WAL flush (`synchronous_commit = off`),
    /// for the receipt's claim and seal only. Nothing is acknowledged on their strength alone:
    /// the effect they guard commits after them, durably, and flushing its commit flushes theirs
    /// (the WAL is written in order); every side effect outside the database waits for such a
    /// durable write first. A PostgreSQL crash can therefore only lose a claim or a seal whose
    /// command had no durable effect, and a retry then runs it.
    pub(crate) async fn begin_unflushed(&self) -> StoreResult<Tx> {
        self.begin_with("BEGIN; SET LOCAL synchronous_commit = off")
            .await
    }

    async fn begin_with(&self, statement: &'static str) -> StoreResult<Tx> {
        self.ensure_open()?;
        // sqlx 0.8.6 forgets its ROLLBACK when a `begin()` future is dropped after BEGIN went
        // out and before the reply (launchbadge/sqlx#4385): the connection goes back to the pool
        // inside an open transaction and the next borrower inherits it (catalogue PG-06). BEGIN
        // therefore runs in its own task, which finishes even when the caller is cancelled; the
        // transaction nobody took is then dropped, and rolled back, like any other.
        // A pooled connection the server had ended fails its BEGIN, which did nothing: the
        // transaction starts on another one (see `reading`).
        let pool = self.inner.pool.clone();
        let max_retries = self.max_retries();
        tokio::spawn(async move {
            again_on_lost_connection(max_retries, || pool.begin_with(statement)).await
        })
        .await
        .map_err(|error| StoreError::Backend {
            message: format!("starting a PostgreSQL transaction panicked: {error}"),
            retry_safe: true,
        })?
        .map_err(db_error)
    }

    /// Runs a read, again on another connection when the one it got had been ended by the server
    /// (a restart, `pg_terminate_backend`, a failover). The pool only notices such a connection
    /// when the first statement sent on it fails; an SSE stream or a command should not fail for
    /// that. Each failed attempt drops its dead connection, so the attempts are bounded by the
    /// pool's size; a database that is really gone fails at once (no connection to be had).
    pub(crate) async fn reading<T, F, Fut>(&self, read: F) -> StoreResult<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        again_on_lost_connection(self.max_retries(), read)
            .await
            .map_err(db_error)
    }

    /// At most one retry per pooled connection.
    pub(crate) fn max_retries(&self) -> u32 {
        self.inner.options.max_connections.max(2)
    }

    /// Commits. A failure here is ambiguous: the commit may or may not have happened.
    pub(crate) async fn commit(&self, tx: Tx) -> StoreResult<()> {
        tx.commit().await.map_err(commit_error)
    }
}

/// How many times a write transaction is run when PostgreSQL aborts it as a deadlock victim
/// (`40P01`) or for a serialization failure (`40001`) before the caller gets a retry-safe error.
pub const CONFLICT_ATTEMPTS: u32 = 4;

/// Backoff before the second attempt; doubled for each further one, with full jitter.
const CONFLICT_BACKOFF: Duration = Duration::from_millis(10);

impl PostgresStore {
    /// Runs a whole write transaction (`BEGIN` to `COMMIT`) again when PostgreSQL aborted it
    /// with `40001` or `40P01` before the commit, at most [`CONFLICT_ATTEMPTS`] times in all, with
    /// jittered exponential backoff between attempts. Only for transactions that are safe to
    /// re-run from the start: they read "now" and everything they decide on inside the attempt.
    /// Gives up with a retry-safe `Backend` error (nothing of any attempt was committed).
    pub(crate) async fn retrying_conflicts<T, F, Fut>(&self, run: F) -> StoreResult<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = StoreResult<T>>,
    {
        let mut attempt = 1;
        loop {
            match run().await {
                Err(StoreError::Conflict(_)) => {
                    if attempt >= CONFLICT_ATTEMPTS {
                        tracing::warn!(
                            attempts = attempt,
                            "PostgreSQL kept aborting a write transaction (deadlock or serialization failure)"
                        );
                        return Err(StoreError::Backend {
                            message: format!(
                                "PostgreSQL aborted the transaction {attempt} times (deadlock or \
                                 serialization failure); nothing was written, retrying is safe"
                            ),
                            retry_safe: true,
                        });
                    }
                    tokio::time::sleep(conflict_backoff(attempt)).await;
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    }
}

/// A random wait in `0..=CONFLICT_BACKOFF * 2^(attempt - 1)` ("full jitter"), so transactions that
/// deadlocked each other do not meet again at the same moment.
fn conflict_backoff(attempt: u32) -> Duration {
    let cap = CONFLICT_BACKOFF.saturating_mul(1 << attempt.saturating_sub(1).min(8));
    let cap_us = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(rand::random_range(0..=cap_us))
}

/// The SQLSTATE of a transaction PostgreSQL rolled back to break a deadlock or a serialization
/// conflict.
fn is_conflict_code(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("40001" | "40P01")))
}

/// The connection was ended by the server or broke: the statement sent on it did not run (or,
/// for a reply lost on the way back, was a read or a BEGIN, which change nothing).
fn connection_was_lost(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) => true,
        // Class 57P: operator intervention (admin or crash shutdown); class 08: connection.
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("57P") || code.starts_with("08")),
        _ => false,
    }
}

/// Runs `call` again, up to `max_retries` times, while it fails because its connection was lost
/// (see [`connection_was_lost`]); only for calls that change nothing before they succeed.
pub(crate) async fn again_on_lost_connection<T, F, Fut>(
    max_retries: u32,
    call: F,
) -> Result<T, sqlx::Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let mut attempts = 0;
    loop {
        match call().await {
            Err(error) if connection_was_lost(&error) && attempts < max_retries => {
                attempts += 1;
                tracing::debug!(%error, "a pooled connection was gone; trying another");
            }
            outcome => return outcome,
        }
    }
}

/// The JSON text of a document for a `json` column (bound as text, cast with `::json` in the
/// statement): sqlx's `Json` binds `jsonb`, which refuses strings holding NUL.
pub(crate) fn json_text<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("documents of the store always serialise")
}

/// A failure before `COMMIT`: nothing was written, so the caller may retry.
pub(crate) fn db_error(error: sqlx::Error) -> StoreError {
    if is_conflict_code(&error) {
        tracing::info!(%error, "PostgreSQL aborted a transaction");
        return StoreError::Conflict(format!(
            "PostgreSQL transaction aborted by a deadlock or serialization failure ({}); \
             retrying is safe",
            brief(&error)
        ));
    }
    if matches!(&error, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03")) {
        tracing::warn!(%error, "PostgreSQL lock wait timed out");
        return StoreError::Backend {
            message: format!(
                "PostgreSQL lock wait timed out: another transaction holds this session's lock \
                 ({}); retrying is safe",
                brief(&error)
            ),
            retry_safe: true,
        };
    }
    tracing::warn!(%error, "PostgreSQL call failed");
    StoreError::Backend {
        message: format!(
            "PostgreSQL is unavailable or failed ({}); retrying is safe",
            brief(&error)
        ),
        retry_safe: true,
    }
}

/// A failure during `COMMIT`: the outcome is unknown.
pub(crate) fn commit_error(error: sqlx::Error) -> StoreError {
    tracing::error!(%error, "PostgreSQL COMMIT failed; the outcome is unknown");
    StoreError::Backend {
        message: format!(
            "PostgreSQL commit outcome is unknown ({}); retrying may apply the change twice",
            brief(&error)
        ),
        retry_safe: false,
    }
}

/// A short, secret-free description of a database error (never the URL or the password).
pub(crate) fn brief(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => {
            "connection failure".into()
        }
        sqlx::Error::PoolTimedOut => "no connection available in time".into(),
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => "connection pool closed".into(),
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("database error {code}"),
            None => "database error".into(),
        },
        sqlx::Error::Configuration(_) => "invalid configuration".into(),
        _ => "database client error".into(),
    }
}

/// Takes the transaction-scoped `execution` lock of a session, then locks its lease row and
/// returns it (one round trip: `lock_session` in migration 0004). Every lease, route and fenced
/// write of the session holds the execution lock, so a fence check and the write it guards are
/// atomic even when the lease row does not exist yet (an unfenced write racing the first acquire).
pub(crate) async fn lock_session(
    tx: &mut Tx,
    tenant_id: &str,
    session_id: &str,
) -> StoreResult<Option<ExecutionLease>> {
    session_lease(
        tx,
        "SELECT * FROM lock_session($1, $2)",
        tenant_id,
        session_id,
    )
    .await
}

/// The lease row one of the session-lock functions returns.
async fn session_lease(
    tx: &mut Tx,
    function: &'static str,
    tenant_id: &str,
    session_id: &str,
) -> StoreResult<Option<ExecutionLease>> {
    let row: Option<rows::LeaseRow> = sqlx::query_as(function)
        .bind(tenant_id)
        .bind(session_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
    Ok(row.map(ExecutionLease::from))
}

/// Execution lock, lease row (read, not locked: migration 16), then the fencing rule
/// (docs/storage.md §4.2), in the caller's transaction: the write that follows commits only if the
/// fence still held. Every change of the session's holder takes the execution lock too.
pub(crate) async fn check_fence_in(
    store: &PostgresStore,
    tx: &mut Tx,
    tenant_id: &str,
    session_id: &str,
    fence: Option<&ExecutionFence>,
    now: u64,
) -> StoreResult<()> {
    let function = "SELECT * FROM read_session_lease($1, $2)";
    let row = session_lease(tx, function, tenant_id, session_id).await?;
    check_fence_row(store, row.as_ref(), session_id, fence, now)
}

/// The fencing rule on a lease row the caller locked.
pub(crate) fn check_fence_row(
    store: &PostgresStore,
    row: Option<&ExecutionLease>,
    session_id: &str,
    fence: Option<&ExecutionFence>,
    now: u64,
) -> StoreResult<()> {
    #[cfg(any(test, feature = "testing"))]
    if store.inner.fencing_disabled.load(Ordering::Relaxed) && fence.is_some() {
        return Ok(());
    }
    #[cfg(not(any(test, feature = "testing")))]
    let _ = store;
    crate::rules::check_fence(row, fence, session_id, now)
}

pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
