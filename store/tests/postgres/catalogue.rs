//! P0 entries of the reliability catalogue (docs/reliability.md: PG and SSE) against the
//! PostgreSQL store, with real connection faults from `testing::fault_proxy` (a TCP proxy that
//! cuts a connection on cue): PG-01, PG-02, PG-06 and the restart / second-gateway half of SSE-01.

use agent_runtime_store::EventReader;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::{T, text_event};
use agent_runtime::protocol::EventEnvelope;
use agent_runtime_store::testing::fault_proxy::{Fault, FaultProxy};
use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::{
    CommandClaim, CommandReceipts, EventLog, PostgresOptions, PostgresStore, StoreError,
    StoreLifecycle, TestHooks,
};
use serde_json::json;
use sqlx::{PgPool, Row};

const SESSION: &str = "s";

fn options() -> PostgresOptions {
    PostgresOptions {
        max_connections: 2,
        acquire_timeout: Duration::from_secs(10),
        ..PostgresOptions::default()
    }
}

/// A fresh database, a proxy in front of it, a store connected through the proxy, and a direct
/// pool (bypassing the proxy) to look at what really committed.
async fn proxied_store() -> (FaultProxy, PostgresStore, PgPool) {
    let url = fresh_database_url().await.expect("a test database");
    proxied_store_on(&url).await
}

async fn proxied_store_on(url: &str) -> (FaultProxy, PostgresStore, PgPool) {
    let url = url.to_owned();
    let proxy = FaultProxy::start(&url).await.unwrap();
    let store = PostgresStore::connect(&proxy.proxied_url(&url), options())
        .await
        .expect("connect through the proxy");
    let direct = PgPool::connect(&url).await.unwrap();
    (proxy, store, direct)
}

fn assert_retry_safe(outcome: Result<impl std::fmt::Debug, StoreError>, what: &str) {
    match outcome {
        Err(StoreError::Backend {
            retry_safe: true, ..
        }) => {}
        other => panic!("{what}: expected a retry-safe backend error, got {other:?}"),
    }
}

fn assert_ambiguous(outcome: Result<impl std::fmt::Debug, StoreError>, what: &str) {
    match outcome {
        Err(StoreError::Backend {
            retry_safe: false,
            message,
        }) => assert!(message.contains("unknown"), "{what}: {message}"),
        other => panic!("{what}: expected an ambiguous (not retry-safe) error, got {other:?}"),
    }
}

async fn command_rows(direct: &PgPool, command: &str) -> Vec<(String, String)> {
    sqlx::query_as("SELECT lease_id, status FROM commands WHERE tenant_id = $1 AND command_id = $2")
        .bind(T)
        .bind(command)
        .fetch_all(direct)
        .await
        .unwrap()
}

async fn stored_sequences(direct: &PgPool) -> Vec<i64> {
    let rows: Vec<(i64,)> = sqlx::query_as(
        "SELECT sequence FROM agent_events WHERE tenant_id = $1 AND session_id = $2 \
         ORDER BY sequence",
    )
    .bind(T)
    .bind(SESSION)
    .fetch_all(direct)
    .await
    .unwrap();
    rows.into_iter().map(|(sequence,)| sequence).collect()
}

/// A fresh database and two stores on it, as two processes would be.
async fn two_stores() -> (String, PostgresStore, PostgresStore) {
    let url = fresh_database_url().await.expect("a test database");
    let a = PostgresStore::connect(&url, options()).await.unwrap();
    let b = PostgresStore::connect(&url, options()).await.unwrap();
    (url, a, b)
}

/// Appends one text event to the test session, unfenced.
async fn append_text(store: &PostgresStore, text: &str) -> Vec<EventEnvelope> {
    store
        .append_events(T, SESSION, vec![text_event(SESSION, text)], None)
        .await
        .unwrap()
}

/// Waits (bounded) until no connection of the test database sits idle inside a transaction.
async fn assert_no_idle_in_transaction(direct: &PgPool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (open,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND state LIKE 'idle in transaction%'",
        )
        .fetch_one(direct)
        .await
        .unwrap();
        if open == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{open} connection(s) stay idle in transaction"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn claim(store: &PostgresStore, command: &str) -> Result<CommandClaim, StoreError> {
    store.claim_command(T, command, "fp", 30_000).await
}

fn lease_of(claim: CommandClaim) -> String {
    match claim {
        CommandClaim::Claimed { lease_id } => lease_id,
        other => panic!("expected a claim, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_01_connection_drop_mid_transaction_rolls_back() {
    let url = fresh_database_url().await.expect("a test database");
    let (proxy, store, direct) = proxied_store_on(&url).await;
    // Appended by another store, so that the proxied one does not know the head and appends in
    // the full transaction (the one-statement append has its own test below).
    let other = PostgresStore::connect(&url, options()).await.unwrap();
    let first = other
        .append_event(T, text_event(SESSION, "before"), None)
        .await
        .unwrap();
    assert_eq!(first.sequence, 1);

    // A multi-statement transaction (fence lock, head lock, INSERT of the batch, head UPDATE):
    // the connection dies after the INSERT, before the head moves and before COMMIT.
    proxy.arm(Fault::ResetBefore(
        "UPDATE stream_heads SET first_sequence".into(),
    ));
    let batch = || {
        vec![
            text_event(SESSION, "one"),
            text_event(SESSION, "two"),
            text_event(SESSION, "three"),
        ]
    };
    let cut = store.append_events(T, SESSION, batch(), None).await;
    assert_eq!(proxy.fired(), 1, "the fault fired");
    assert_retry_safe(cut, "append cut mid-transaction");
    assert_eq!(stored_sequences(&direct).await, [1], "no partial batch");
    assert_no_idle_in_transaction(&direct).await;

    // The same call again succeeds once, right after the rolled-back attempt.
    let retried = store
        .append_events(T, SESSION, batch(), None)
        .await
        .expect("the retry succeeds");
    let sequences: Vec<u64> = retried.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [2, 3, 4]);
    assert_eq!(stored_sequences(&direct).await, [1, 2, 3, 4]);

    // A command claim cut mid-transaction (after BEGIN, at its INSERT) leaves no claim behind,
    // and the retry with the same command id claims exactly once.
    proxy.arm(Fault::ResetBefore("INSERT INTO commands".into()));
    assert_retry_safe(claim(&store, "c-1").await, "claim cut mid-transaction");
    assert_eq!(proxy.fired(), 2);
    assert!(
        command_rows(&direct, "c-1").await.is_empty(),
        "no half claim"
    );
    let lease = lease_of(claim(&store, "c-1").await.unwrap());
    assert!(matches!(
        claim(&store, "c-1").await.unwrap(),
        CommandClaim::InProgress { .. }
    ));
    assert_eq!(
        command_rows(&direct, "c-1").await,
        [(lease, "claimed".to_owned())]
    );
    assert_no_idle_in_transaction(&direct).await;
    assert!(store.health_check().await.ready);
}

/// PG-01/PG-02 for the one-statement append (migration 0007), which commits without a COMMIT of
/// its own: a statement cut before the server saw it appends in the full transaction instead; one
/// whose reply was lost after it committed is found in the log and answered, never stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_01_one_statement_append_cut_either_side_of_the_server_stores_once() {
    let (proxy, store, direct) = proxied_store().await;
    let first = store
        .append_event(T, text_event(SESSION, "before"), None)
        .await
        .unwrap();
    assert_eq!(first.sequence, 1);
    let batch = |text: &str| {
        vec![
            text_event(SESSION, &format!("{text}-1")),
            text_event(SESSION, &format!("{text}-2")),
        ]
    };

    // The same append under a fault: it succeeds either way.
    let append_under = |fault: Fault, text: &'static str| {
        let (store, proxy) = (&store, &proxy);
        async move {
            proxy.arm(fault);
            store
                .append_events(T, SESSION, batch(text), None)
                .await
                .expect("the append succeeds, whichever side of the server it was cut")
        }
    };
    let sequences =
        |events: &[EventEnvelope]| events.iter().map(|e| e.sequence).collect::<Vec<_>>();

    // Cut before the server saw it: appended by the full transaction instead.
    let cut = append_under(Fault::ResetBefore("append_agent_events".into()), "cut").await;
    assert_eq!(proxy.fired(), 1, "the fault fired");
    assert_eq!(sequences(&cut), [2, 3]);
    assert_eq!(stored_sequences(&direct).await, [1, 2, 3]);

    // Committed, its reply lost: found in the log.
    let lost = append_under(Fault::DropReplyAfter("append_agent_events".into()), "lost").await;
    assert_eq!(proxy.fired(), 2, "the fault fired");
    assert_eq!(sequences(&lost), [4, 5]);
    assert_eq!(
        stored_sequences(&direct).await,
        [1, 2, 3, 4, 5],
        "stored once"
    );
    let ids: Vec<(String,)> = sqlx::query_as(
        "SELECT envelope->>'eventId' FROM agent_events WHERE tenant_id = $1 AND session_id = $2 \
         AND sequence >= 4 ORDER BY sequence",
    )
    .bind(T)
    .bind(SESSION)
    .fetch_all(&direct)
    .await
    .unwrap();
    let answered: Vec<String> = lost.iter().map(|e| e.event_id.clone()).collect();
    assert_eq!(
        ids.into_iter().map(|(id,)| id).collect::<Vec<_>>(),
        answered
    );

    // The next append goes on from there, in one statement again.
    let next = store
        .append_events(T, SESSION, batch("next"), None)
        .await
        .unwrap();
    assert_eq!(next[0].sequence, 6);
    assert_no_idle_in_transaction(&direct).await;
}

/// Two processes append to one session: the head one of them remembers is stale, its
/// one-statement append declines and the full transaction numbers the batch from the real head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_from_a_stale_known_head_number_from_the_real_one() {
    let (url, a, b) = two_stores().await;
    let direct = PgPool::connect(&url).await.unwrap();
    let append = async |store, text| append_text(store, text).await[0].sequence;
    assert_eq!(append(&a, "a-1").await, 1);
    assert_eq!(append(&a, "a-2").await, 2);
    assert_eq!(append(&b, "b-1").await, 3);
    assert_eq!(append(&a, "a-3").await, 4);
    assert_eq!(append(&b, "b-2").await, 5);
    assert_eq!(stored_sequences(&direct).await, [1, 2, 3, 4, 5]);
}

/// The retention trim deletes from the old first sequence only (migration 0008): every row below
/// the head's first is still gone, whichever path appended (one statement from a known head, or
/// the transaction from another store's stale one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trims_from_either_append_path_leave_only_the_retained_rows() {
    let url = fresh_database_url().await.expect("a test database");
    let retaining_three = || PostgresOptions {
        max_events_per_session: 3,
        ..options()
    };
    let a = PostgresStore::connect(&url, retaining_three())
        .await
        .unwrap();
    let b = PostgresStore::connect(&url, retaining_three())
        .await
        .unwrap();
    let direct = PgPool::connect(&url).await.unwrap();
    for round in 0..4 {
        append_text(&a, &format!("a-{round}")).await;
        append_text(&a, &format!("a-{round}-again")).await;
        append_text(&b, &format!("b-{round}")).await;
    }
    let batch = (0..5)
        .map(|n| text_event(SESSION, &format!("batch-{n}")))
        .collect();
    a.append_events(T, SESSION, batch, None).await.unwrap();
    assert_eq!(stored_sequences(&direct).await, [15, 16, 17]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_02_ambiguous_commit_never_executes_twice() {
    let (proxy, store, direct) = proxied_store().await;
    let commit_lost_reply = || Fault::DropReplyAfter("COMMIT".into());

    // Claim: COMMIT reaches the server and commits; its reply is lost. The store does not guess
    // (not retry-safe); a retry re-reads the receipt and answers in progress, never a second
    // claim that would run the command twice.
    proxy.arm(commit_lost_reply());
    assert_ambiguous(claim(&store, "c-claim").await, "claim");
    assert_eq!(proxy.fired(), 1);
    let rows = command_rows(&direct, "c-claim").await;
    assert_eq!(rows.len(), 1, "the claim committed: {rows:?}");
    assert_eq!(rows[0].1, "claimed");
    assert!(matches!(
        claim(&store, "c-claim").await.unwrap(),
        CommandClaim::InProgress { .. }
    ));

    // Claim whose COMMIT never reached the server: equally ambiguous to the client; nothing
    // committed, so the retry claims exactly once.
    proxy.arm(Fault::ResetBefore("COMMIT".into()));
    assert_ambiguous(claim(&store, "c-lost").await, "claim, COMMIT not delivered");
    assert!(command_rows(&direct, "c-lost").await.is_empty());
    lease_of(claim(&store, "c-lost").await.unwrap());
    assert!(matches!(
        claim(&store, "c-lost").await.unwrap(),
        CommandClaim::InProgress { .. }
    ));

    // Seal: the seal committed, the caller saw a failure and releases its claim (what the
    // gateway does); the release cannot undo a seal, so the command stays fail-closed in
    // progress and is never dispatched again.
    let lease = lease_of(claim(&store, "c-seal").await.unwrap());
    proxy.arm(commit_lost_reply());
    assert_ambiguous(
        store.seal_command(T, "c-seal", &lease, &sealing()).await,
        "seal",
    );
    store.release_command(T, "c-seal", &lease).await.unwrap();
    assert_eq!(
        command_rows(&direct, "c-seal").await,
        [(lease, "sealed".to_owned())]
    );
    assert_eq!(
        claim(&store, "c-seal").await.unwrap(),
        CommandClaim::InProgress {
            retry_after_ms: 1000
        }
    );

    // Complete: the result committed, its acknowledgement was lost; the retry with the same
    // command id replays the stored result (exactly one result, no re-execution).
    let lease = lease_of(claim(&store, "c-done").await.unwrap());
    store
        .seal_command(T, "c-done", &lease, &sealing())
        .await
        .unwrap();
    proxy.arm(commit_lost_reply());
    let result = json!({"sessionId": "s-1"});
    assert_ambiguous(
        store.complete_command(T, "c-done", &lease, &result).await,
        "complete",
    );
    assert_eq!(
        claim(&store, "c-done").await.unwrap(),
        CommandClaim::Completed { result }
    );
    assert_eq!(proxy.fired(), 4);
    assert_no_idle_in_transaction(&direct).await;
}

/// Checks every connection of the store's pool at once (so each is seen by a "next borrower"):
/// none inherited a transaction.
async fn assert_no_connection_inherits_a_transaction(store: &PostgresStore, iteration: usize) {
    let pool = store.pool();
    let mut held = Vec::new();
    // The store's `LISTEN` task holds one pooled connection for good; the rest serve calls.
    for _ in 1..pool.options().get_max_connections() {
        held.push(pool.acquire().await.expect("a pooled connection"));
    }
    for connection in &mut held {
        // `now()` is the transaction's start; it equals the statement's start only when this
        // statement began the transaction, i.e. none was left open on the connection. (A simple
        // query: the extended protocol restamps the statement at Bind and Execute.)
        let row = sqlx::Executor::fetch_one(
            &mut **connection,
            "SELECT pg_current_xact_id_if_assigned()::text, now() = statement_timestamp()",
        )
        .await
        .unwrap_or_else(|error| panic!("iteration {iteration}: {error}"));
        let (xid, fresh): (Option<String>, bool) = (row.get(0), row.get(1));
        assert_eq!(
            xid, None,
            "iteration {iteration}: an inherited transaction id"
        );
        assert!(
            fresh,
            "iteration {iteration}: an inherited open transaction"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_06_cancellation_during_begin_cannot_poison_the_pool() {
    // `max_connections: 2` is the store's smallest pool: one connection is its `LISTEN` task's,
    // so every call shares the one other connection, the catalogue's pool of 1. 300 cancellations
    // instead of 10,000, scaled to run in seconds.
    let (proxy, store, direct) = proxied_store().await;
    // 1 ms per client chunk: BEGIN, each statement and COMMIT take at least one round trip, so
    // the random deadlines below land in every phase, BEGIN included.
    proxy.set_latency(Duration::from_millis(1));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    for iteration in 0..300 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let deadline = Duration::from_micros(seed % 4_000);
        let command = format!("c-{iteration}");
        let outcome = tokio::time::timeout(deadline, claim(&store, &command)).await;
        match outcome {
            Err(_elapsed) => {
                cancelled.fetch_add(1, Ordering::SeqCst);
            }
            Ok(Ok(_)) => {}
            Ok(Err(error)) => panic!("iteration {iteration}: {error}"),
        }
        assert_no_connection_inherits_a_transaction(&store, iteration).await;
        // The next borrower works: a claim of a fresh id succeeds (no 25P02 "current transaction
        // is aborted", no other error).
        let next = claim(&store, &format!("next-{iteration}")).await;
        assert!(
            matches!(next, Ok(CommandClaim::Claimed { .. })),
            "iteration {iteration}: {next:?}"
        );
    }
    assert!(
        cancelled.load(Ordering::SeqCst) > 50,
        "most deadlines cut a claim short"
    );
    assert_no_idle_in_transaction(&direct).await;
}

/// Appends from `writers` concurrent writers on `store` until it refuses (closed under them) or
/// each made `calls` calls; returns what was acknowledged.
async fn appenders(
    gateway: &'static str,
    store: PostgresStore,
    writers: usize,
    calls: usize,
    progress: Arc<AtomicUsize>,
) -> Vec<EventEnvelope> {
    let tasks: Vec<_> = (0..writers)
        .map(|writer| {
            let store = store.clone();
            let progress = Arc::clone(&progress);
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for n in 0..calls {
                    let text = format!("{gateway}-w{writer}-{n}");
                    let stored = if n % 2 == 0 {
                        store
                            .append_event(T, text_event(SESSION, &text), Some(&text))
                            .await
                            .map(|e| vec![e])
                    } else {
                        let batch = vec![text_event(SESSION, &text), text_event(SESSION, &text)];
                        store.append_events(T, SESSION, batch, None).await
                    };
                    match stored {
                        Ok(events) => {
                            progress.fetch_add(events.len(), Ordering::SeqCst);
                            acknowledged.extend(events);
                        }
                        // Closed under the call: before its transaction (NotOpen) or while
                        // the pool shut down (retry-safe: nothing was written).
                        Err(StoreError::NotOpen(_))
                        | Err(StoreError::Backend {
                            retry_safe: true, ..
                        }) => break,
                        Err(other) => panic!("unexpected append failure: {other}"),
                    }
                }
                acknowledged
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for task in tasks {
        acknowledged.extend(task.await.unwrap());
    }
    acknowledged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_01_sequences_are_gapless_across_a_restart_and_a_second_gateway_on_postgres() {
    let url = fresh_database_url().await.expect("a test database");
    let connect = || PostgresStore::connect(&url, PostgresOptions::default());
    let first = connect().await.unwrap();
    let second = connect().await.unwrap();
    let progress = Arc::new(AtomicUsize::new(0));
    // 10 writers on each of two gateways (20 in all); the first gateway restarts mid-load.
    let on_first = tokio::spawn(appenders(
        "first",
        first.clone(),
        10,
        1_000,
        Arc::clone(&progress),
    ));
    let on_second = tokio::spawn(appenders(
        "second",
        second.clone(),
        10,
        8,
        Arc::clone(&progress),
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress.load(Ordering::SeqCst) < 40 {
        assert!(Instant::now() < deadline, "the writers made no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.close().await.unwrap();
    let mut acknowledged = on_first.await.unwrap();
    drop(first);
    let restarted = connect().await.unwrap();
    let head_at_restart = restarted
        .latest_event_sequence(T, SESSION)
        .await
        .unwrap()
        .unwrap();
    let after_restart =
        appenders("restarted", restarted.clone(), 10, 6, Arc::clone(&progress)).await;
    acknowledged.extend(on_second.await.unwrap());
    assert!(
        after_restart.iter().all(|e| e.sequence > head_at_restart),
        "no sequence is handed out again after the restart"
    );
    acknowledged.extend(after_restart);

    acknowledged.sort_by_key(|e| e.sequence);
    let total = acknowledged.len() as u64;
    let sequences: Vec<u64> = acknowledged.iter().map(|e| e.sequence).collect();
    assert_eq!(
        sequences,
        (1..=total).collect::<Vec<_>>(),
        "gapless, each once"
    );
    for gateway in [&second, &restarted] {
        let mut stored = Vec::new();
        let mut after = 0;
        loop {
            let page = gateway.read_events(T, SESSION, after, 1000).await.unwrap();
            stored.extend(page.events);
            after = stored.last().map_or(0, |e| e.sequence);
            if !page.has_more {
                break;
            }
        }
        assert_eq!(
            stored, acknowledged,
            "every gateway reads what was acknowledged"
        );
    }
}

/// A follower's read right after this process appended sees what the database holds, whoever
/// appended, and a trim of the log is never hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_after_local_appends_match_the_database_whoever_appended() {
    let (_url, a, b) = two_stores().await;
    let append = append_text;
    let texts = |events: &[EventEnvelope]| -> Vec<String> {
        events
            .iter()
            .map(|e| e.data["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    append(&a, "a-1").await;
    let first = a.read_events(T, SESSION, 0, 100).await.unwrap();
    assert_eq!(texts(&first.events), ["a-1"]);
    let stored = append(&a, "a-2").await;
    let page = a.read_events(T, SESSION, 1, 100).await.unwrap();
    assert_eq!(texts(&page.events), texts(&stored));
    assert_eq!(page.events[0].event_id, stored[0].event_id);

    // Another process appends: `a` reads it after its own.
    append(&b, "b-1").await;
    let page = a.read_events(T, SESSION, 2, 100).await.unwrap();
    assert_eq!(texts(&page.events), ["b-1"]);
    let all = a.read_events(T, SESSION, 0, 100).await.unwrap();
    assert_eq!(texts(&all.events), ["a-1", "a-2", "b-1"]);

    // The log is rewritten by the test hook: the old cursor is refused.
    a.trim_agent_events_for_testing(T, SESSION).await.unwrap();
    let after_trim = a.read_events(T, SESSION, 1, 100).await;
    assert!(after_trim.is_err(), "{after_trim:?}");
}

/// What these receipts are sealed as acting on (it does not matter here).
fn sealing() -> agent_runtime_store::CommandTarget {
    agent_runtime_store::CommandTarget::new("session.close", None)
}
