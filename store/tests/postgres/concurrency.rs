//! Concurrency guarantees of the PostgreSQL store under real contention: one claim wins, sequences
//! have no gaps or duplicates, one idempotency key yields one event, a stale fence is rejected.

use agent_runtime_store::EventReader;
use std::collections::HashSet;
use std::sync::Arc;

use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::{
    AcquireLease, CommandClaim, CommandReceipts, EventLog, ExecutionLease, ExecutionLeases,
    NewEvent, PostgresOptions, PostgresStore, RuntimeErrorCode, StoreError, TranscriptMutation,
    TranscriptStore,
};

const TENANT: &str = "tenant-a";
const SESSION: &str = "session-1";

async fn store() -> Arc<PostgresStore> {
    let url = fresh_database_url().await.expect("a test database");
    let options = PostgresOptions {
        max_connections: 20,
        ..PostgresOptions::default()
    };
    Arc::new(
        PostgresStore::connect(&url, options)
            .await
            .expect("connect"),
    )
}

fn event(text: &str) -> NewEvent {
    crate::support::text_event(SESSION, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_claims_of_one_command_yield_exactly_one_claimed() {
    let store = store().await;
    let claims = (0..50).map(|_| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .claim_command(TENANT, "command-1", "fp-1", 30_000)
                .await
                .expect("claim")
        })
    });
    let outcomes: Vec<CommandClaim> = futures_join(claims).await;
    let claimed = outcomes
        .iter()
        .filter(|c| matches!(c, CommandClaim::Claimed { .. }))
        .count();
    let in_progress = outcomes
        .iter()
        .filter(|c| matches!(c, CommandClaim::InProgress { .. }))
        .count();
    assert_eq!(claimed, 1, "{outcomes:?}");
    assert_eq!(in_progress, 49, "{outcomes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_appenders_get_sequences_without_gaps_or_duplicates() {
    let store = store().await;
    const APPENDERS: usize = 20;
    const PER_APPENDER: usize = 10;
    let appenders = (0..APPENDERS).map(|appender| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut sequences = Vec::new();
            for i in 0..PER_APPENDER {
                // Alternate single appends and batches of two (a group commit of deltas).
                if i % 2 == 0 {
                    let stored = store
                        .append_event(TENANT, event(&format!("{appender}-{i}")), None)
                        .await
                        .expect("append");
                    sequences.push(stored.sequence);
                } else {
                    let batch = vec![event("batch-a"), event("batch-b")];
                    let stored = store
                        .append_events(TENANT, SESSION, batch, None)
                        .await
                        .expect("append batch");
                    assert_eq!(
                        stored[1].sequence,
                        stored[0].sequence + 1,
                        "batch contiguous"
                    );
                    sequences.extend(stored.iter().map(|e| e.sequence));
                }
            }
            sequences
        })
    });
    let all: Vec<u64> = futures_join(appenders)
        .await
        .into_iter()
        .flatten()
        .collect();
    let expected = APPENDERS * (PER_APPENDER / 2) * 3;
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(all.len(), expected);
    assert_eq!(unique.len(), expected, "no duplicate sequence");
    assert_eq!(
        unique,
        (1..=expected as u64).collect(),
        "1..=N without gaps"
    );
    let range = store
        .event_stream_range(TENANT, SESSION)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(range.head_sequence, expected as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_with_one_idempotency_key_store_one_event() {
    let store = store().await;
    let appends = (0..20).map(|i| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .append_event(TENANT, event(&format!("attempt {i}")), Some("key-1"))
                .await
                .expect("append")
        })
    });
    let stored = futures_join(appends).await;
    let ids: HashSet<&str> = stored.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids.len(), 1, "every append returns the one stored event");
    let page = store.read_events(TENANT, SESSION, 0, 1000).await.unwrap();
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].event_id, stored[0].event_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_fence_is_rejected_while_the_new_holder_appends() {
    let store = store().await;
    let acquire = |lease_id: &str, owner: &str| AcquireLease {
        lease_id: lease_id.to_owned(),
        owner_id: owner.to_owned(),
        ttl_ms: 60_000,
    };
    let old = store
        .acquire_execution_lease(TENANT, SESSION, acquire("lease-old", "worker-a"))
        .await
        .unwrap();
    store
        .append_events(
            TENANT,
            SESSION,
            vec![event("old holder")],
            Some(&old.fence()),
        )
        .await
        .expect("the holder appends");
    store.release_execution_lease(TENANT, &old).await.unwrap();
    let new = store
        .acquire_execution_lease(TENANT, SESSION, acquire("lease-new", "worker-b"))
        .await
        .unwrap();
    assert!(new.fencing_token > old.fencing_token);

    // Both race: every stale append fails with LEASE_LOST, every new one succeeds.
    let stale = (0..10).map(|_| {
        let (store, fence) = (Arc::clone(&store), old.fence());
        tokio::spawn(async move {
            store
                .append_events(TENANT, SESSION, vec![event("stale")], Some(&fence))
                .await
        })
    });
    let fresh = (0..10).map(|_| {
        let (store, fence) = (Arc::clone(&store), new.fence());
        tokio::spawn(async move {
            store
                .append_events(TENANT, SESSION, vec![event("fresh")], Some(&fence))
                .await
        })
    });
    for outcome in futures_join(stale).await {
        assert_lease_lost(&outcome);
    }
    for outcome in futures_join(fresh).await {
        outcome.expect("the new holder appends");
    }
    let page = store.read_events(TENANT, SESSION, 0, 1000).await.unwrap();
    let texts: Vec<&str> = page
        .events
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.iter().filter(|t| **t == "stale").count(), 0);
    assert_eq!(texts.iter().filter(|t| **t == "fresh").count(), 10);
}

async fn futures_join<T: Send + 'static>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let handles: Vec<_> = tasks.collect();
    let mut results = Vec::with_capacity(handles.len());
    for handle in handles {
        results.push(handle.await.expect("task"));
    }
    results
}

/// Other processes hear of an append after it commits: the store sends the `NOTIFY` from a
/// connection of its own once the append committed — never inside the append's transaction,
/// where it would hold PostgreSQL's cluster-wide notify lock through the commit's flush —
/// on both append paths (the full transaction, then the one-statement append of a known head).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_are_announced_to_other_processes_after_they_commit() {
    let url = fresh_database_url().await.expect("a test database");
    let store = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .expect("connect");
    // Another process follows through the store, so appends are announced.
    let follower = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .expect("connect");
    follower
        .wait_for_events(TENANT, "another-session", 0)
        .await
        .expect("wait");
    let mut listener = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    listener.listen("agent_runtime_events").await.unwrap();
    for round in 0..2 {
        let appended = store
            .append_events(
                TENANT,
                SESSION,
                vec![event(&format!("{round}-a")), event(&format!("{round}-b"))],
                None,
            )
            .await
            .expect("append");
        let head = appended.last().unwrap().sequence;
        loop {
            let notification =
                tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
                    .await
                    .expect("a notification arrives")
                    .unwrap();
            let (tenant, session, announced): (String, String, u64) =
                serde_json::from_str(notification.payload()).unwrap();
            assert_eq!((tenant.as_str(), session.as_str()), (TENANT, SESSION));
            assert!(
                announced <= head,
                "announced {announced} past the head {head}"
            );
            if announced == head {
                break;
            }
        }
    }
}

/// `serve`, cluster executors and gateways follow through their own hand-offs, so a `NOTIFY`
/// per append was a transaction nobody needed: a store sends them only while some process
/// follows through the store (registered by its first `wait_for_events`), and that follower
/// reads another process's append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_are_announced_only_while_a_process_follows_through_the_store() {
    let url = fresh_database_url().await.expect("a test database");
    let writer = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .expect("connect");
    writer
        .append_events(TENANT, SESSION, vec![event("unheard")], None)
        .await
        .expect("append");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while writer.notifications() == (0, 0) {
        assert!(tokio::time::Instant::now() < deadline, "the notifier ran");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(writer.notifications().0, 0, "no follower: no NOTIFY sent");

    let follower = Arc::new(
        PostgresStore::connect(&url, PostgresOptions::default())
            .await
            .expect("connect"),
    );
    let head = writer
        .latest_event_sequence(TENANT, SESSION)
        .await
        .unwrap()
        .unwrap();
    let waiting = {
        let follower = Arc::clone(&follower);
        tokio::spawn(async move {
            loop {
                follower
                    .wait_for_events(TENANT, SESSION, head)
                    .await
                    .unwrap();
                let page = follower
                    .read_events(TENANT, SESSION, head, 10)
                    .await
                    .unwrap();
                if !page.events.is_empty() {
                    return page.events;
                }
            }
        })
    };
    // The writer learns of the follower within a second of its registration.
    while writer.notifications().0 == 0 {
        assert!(tokio::time::Instant::now() < deadline, "a NOTIFY was sent");
        writer
            .append_events(TENANT, SESSION, vec![event("heard")], None)
            .await
            .expect("append");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let events = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
        .await
        .expect("the follower reads the new event")
        .unwrap();
    assert_eq!(events[0].sequence, head + 1);
}

/// The commit queue: one-statement appends of many sessions that arrive while a batch commits share
/// the next statement and commit, and each is still decided alone. Sixteen sessions append twenty
/// times each at once; one of them appends under a fence that a takeover made stale. Every append
/// of the other fifteen is stored, in order and without gaps; every stale one fails with LEASE_LOST
/// and writes nothing; and appends did go out in shared batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appends_of_many_sessions_share_commits_and_each_is_decided_alone() {
    let store = store().await;
    let acquire = |lease_id: &str| AcquireLease {
        lease_id: lease_id.to_owned(),
        owner_id: "worker-a".to_owned(),
        ttl_ms: 60_000,
    };
    let sessions: Vec<String> = (0..16).map(|n| format!("session-{n}")).collect();
    let mut fences = Vec::new();
    for session in &sessions {
        let lease = store
            .acquire_execution_lease(TENANT, session, acquire(&format!("lease-{session}")))
            .await
            .unwrap();
        // The first append takes the full transaction; the store then knows the head.
        store
            .append_events(
                TENANT,
                session,
                vec![crate::support::text_event(session, "0")],
                Some(&lease.fence()),
            )
            .await
            .unwrap();
        fences.push(lease);
    }
    // A takeover: the first session's old holder keeps appending under its stale fence.
    let stale = fences[0].clone();
    store.release_execution_lease(TENANT, &stale).await.unwrap();
    store
        .acquire_execution_lease(TENANT, &sessions[0], acquire("lease-new"))
        .await
        .unwrap();

    let appenders = sessions.iter().zip(&fences).map(|(session, lease)| {
        let (store, session, fence) = (Arc::clone(&store), session.clone(), lease.fence());
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for n in 1..=20 {
                let event = crate::support::text_event(&session, &n.to_string());
                let appended = store
                    .append_events(TENANT, &session, vec![event], Some(&fence))
                    .await;
                outcomes.push(appended.map(|_| ()));
            }
            outcomes
        })
    });
    let outcomes = futures_join(appenders).await;

    for outcome in &outcomes[0] {
        assert_lease_lost(outcome);
    }
    for (session, outcomes) in sessions.iter().zip(&outcomes).skip(1) {
        assert!(
            outcomes.iter().all(Result::is_ok),
            "{session}: {outcomes:?}"
        );
        let page = store.read_events(TENANT, session, 0, 100).await.unwrap();
        let texts: Vec<&str> = page
            .events
            .iter()
            .map(|e| e.data["text"].as_str().unwrap())
            .collect();
        let expected: Vec<String> = (0..=20).map(|n| n.to_string()).collect();
        assert_eq!(texts, expected, "{session}");
        let sequences: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
        assert_eq!(sequences, (1..=21).collect::<Vec<u64>>(), "{session}");
    }
    let first = store
        .read_events(TENANT, &sessions[0], 0, 100)
        .await
        .unwrap();
    assert_eq!(first.events.len(), 1, "nothing stale was written");
    assert!(store.append_batches() > 0, "no append shared a commit");
}

/// The shared transaction: journal entries, transcript changes and receipt completions of many
/// sessions that arrive while a batch commits share the next transaction, each still decided alone
/// in its own savepoint. Sixteen sessions each write ten journal entries and ten transcript
/// messages at once, one of them under a fence a takeover made stale, while sixteen commands are
/// completed. Every write of the other fifteen is stored, in order and without gaps; every stale
/// one fails with LEASE_LOST and writes nothing; every command answers its own result; and writes
/// did share commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appends_journal_transcript_and_receipt_writes_share_commits_and_each_is_decided_alone() {
    use agent_runtime_store::{
        Correlation, DurableEventDraft, DurableJournal, ExpectedSequence, TranscriptMutation,
        TranscriptStore,
    };
    let store = store().await;
    let acquire = |lease_id: &str| AcquireLease {
        lease_id: lease_id.to_owned(),
        owner_id: "worker-a".to_owned(),
        ttl_ms: 60_000,
    };
    let sessions: Vec<String> = (0..16).map(|n| format!("session-{n}")).collect();
    let mut leases = Vec::new();
    for session in &sessions {
        let lease = store
            .acquire_execution_lease(TENANT, session, acquire(&format!("lease-{session}")))
            .await
            .unwrap();
        store
            .create_transcript(TENANT, session, Some(&lease.fence()))
            .await
            .unwrap();
        leases.push(lease);
    }
    // A takeover: the first session's old holder keeps writing under its stale fence.
    store
        .release_execution_lease(TENANT, &leases[0])
        .await
        .unwrap();
    store
        .acquire_execution_lease(TENANT, &sessions[0], acquire("lease-new"))
        .await
        .unwrap();

    let writers = sessions.iter().zip(&leases).map(|(session, lease)| {
        let (store, session, fence) = (Arc::clone(&store), session.clone(), lease.fence());
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for n in 1..=10 {
                let draft = DurableEventDraft {
                    event_type: "request_accepted".to_owned(),
                    data: crate::support::object(serde_json::json!({ "n": n })),
                    occurred_at: None,
                    correlation: Correlation::default(),
                };
                let journalled = store
                    .append_durable(
                        TENANT,
                        &session,
                        vec![draft],
                        ExpectedSequence::Any,
                        Some(&fence),
                    )
                    .await;
                outcomes.push(journalled.map(|_| ()));
                let message = crate::support::object(
                    serde_json::json!({ "role": "user", "content": n.to_string() }),
                );
                let written = store
                    .mutate_transcript(
                        TENANT,
                        &session,
                        TranscriptMutation::AppendMessages(vec![message]),
                        Some(&fence),
                    )
                    .await;
                outcomes.push(written.map(|_| ()));
                let appended = store
                    .append_events(
                        TENANT,
                        &session,
                        vec![crate::support::text_event(&session, &n.to_string())],
                        Some(&fence),
                    )
                    .await;
                outcomes.push(appended.map(|_| ()));
            }
            outcomes
        })
    });
    let completions = (0..16).map(|n| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let id = format!("command-{n}");
            let CommandClaim::Claimed { lease_id } = store
                .claim_command(TENANT, &id, "fp", 30_000)
                .await
                .unwrap()
            else {
                panic!("a fresh command is claimed");
            };
            let result = serde_json::json!({ "ok": true, "commandId": id });
            store
                .complete_command(TENANT, &id, &lease_id, &result)
                .await
                .unwrap();
            (id, result)
        })
    });
    let (outcomes, completed) = tokio::join!(futures_join(writers), futures_join(completions));

    for outcome in &outcomes[0] {
        assert_lease_lost(outcome);
    }
    for (session, outcomes) in sessions.iter().zip(&outcomes).skip(1) {
        assert!(
            outcomes.iter().all(Result::is_ok),
            "{session}: {outcomes:?}"
        );
        let journal = store.read_durable(TENANT, session, 0, 100).await.unwrap();
        let journalled: Vec<(u64, i64)> = journal
            .events
            .iter()
            .map(|e| (e.sequence, e.data["n"].as_i64().unwrap()))
            .collect();
        let expected: Vec<(u64, i64)> = (1..=10).map(|n| (n as u64, n)).collect();
        assert_eq!(journalled, expected, "{session}");
        let transcript = store
            .load_transcript(TENANT, session)
            .await
            .unwrap()
            .unwrap();
        let texts: Vec<String> = transcript
            .entries
            .iter()
            .map(|entry| entry.message["content"].as_str().unwrap().to_owned())
            .collect();
        let expected: Vec<String> = (1..=10).map(|n| n.to_string()).collect();
        assert_eq!(texts, expected, "{session}");
        let events = store.read_events(TENANT, session, 0, 100).await.unwrap();
        let appended: Vec<(u64, &str)> = events
            .events
            .iter()
            .map(|e| (e.sequence, e.data["text"].as_str().unwrap()))
            .collect();
        let expected: Vec<(u64, String)> = (1..=10).map(|n| (n, n.to_string())).collect();
        let expected: Vec<(u64, &str)> = expected.iter().map(|(n, t)| (*n, t.as_str())).collect();
        assert_eq!(appended, expected, "{session}");
    }
    let stale = store
        .read_durable(TENANT, &sessions[0], 0, 100)
        .await
        .unwrap();
    assert!(stale.events.is_empty(), "nothing stale was journalled");
    let stale = store
        .load_transcript(TENANT, &sessions[0])
        .await
        .unwrap()
        .unwrap();
    assert!(stale.entries.is_empty(), "nothing stale was written");
    let stale = store
        .read_events(TENANT, &sessions[0], 0, 100)
        .await
        .unwrap();
    assert!(stale.events.is_empty(), "nothing stale was appended");
    for (id, result) in completed {
        let claim = store
            .claim_command(TENANT, &id, "fp", 30_000)
            .await
            .unwrap();
        assert!(
            matches!(&claim, CommandClaim::Completed { result: stored } if *stored == result),
            "{id}: {claim:?}"
        );
    }
    assert!(store.shared_batches() > 0, "no write shared a commit");
    assert!(
        store.mixed_batches() > 0,
        "no append shared a commit with another write"
    );
}

fn said(text: &str) -> TranscriptMutation {
    let message = serde_json::json!({ "role": "user", "content": text });
    let serde_json::Value::Object(message) = message else {
        unreachable!("an object literal")
    };
    TranscriptMutation::AppendMessages(vec![message])
}

/// The contents of a transcript's entries, and whether each names the one before as its parent.
async fn said_so_far(store: &PostgresStore, session: &str) -> (Vec<String>, bool) {
    let transcript = store
        .load_transcript(TENANT, session)
        .await
        .unwrap()
        .unwrap();
    let texts = transcript
        .entries
        .iter()
        .map(|entry| {
            let message = serde_json::to_value(&entry.message).unwrap();
            message["content"].as_str().unwrap().to_owned()
        })
        .collect();
    let chained = transcript.entries.iter().enumerate().all(|(at, entry)| {
        let before = at
            .checked_sub(1)
            .map(|at| transcript.entries[at].id.clone());
        entry.parent_message_id == before
    });
    (texts, chained)
}

/// Two stores on one fresh database (two processes), the first holding `SESSION`'s lease, with
/// its transcript created.
async fn two_processes_on_a_leased_session() -> (PostgresStore, PostgresStore, ExecutionLease) {
    let url = fresh_database_url().await.expect("a test database");
    let connect = || PostgresStore::connect(&url, PostgresOptions::default());
    let (ours, theirs) = (connect().await.unwrap(), connect().await.unwrap());
    let lease = ours
        .acquire_execution_lease(TENANT, SESSION, lease_request("lease-1"))
        .await
        .unwrap();
    ours.create_transcript(TENANT, SESSION, Some(&lease.fence()))
        .await
        .unwrap();
    (ours, theirs, lease)
}

fn lease_request(lease_id: &str) -> AcquireLease {
    AcquireLease {
        lease_id: lease_id.to_owned(),
        owner_id: "worker-a".to_owned(),
        ttl_ms: 60_000,
    }
}

/// `ours` releases its lease and `theirs` takes the session: the new holder's lease.
async fn hand_over(
    ours: &PostgresStore,
    theirs: &PostgresStore,
    lease: &ExecutionLease,
) -> ExecutionLease {
    ours.release_execution_lease(TENANT, lease).await.unwrap();
    theirs
        .acquire_execution_lease(TENANT, SESSION, lease_request("lease-2"))
        .await
        .unwrap()
}

fn assert_lease_lost<T: std::fmt::Debug>(outcome: &Result<T, StoreError>) {
    assert!(
        matches!(
            outcome,
            Err(StoreError::Runtime {
                code: RuntimeErrorCode::LeaseLost,
                ..
            })
        ),
        "a stale fence must be rejected, got {outcome:?}"
    );
}

/// A session's next transcript change is written from the document its previous write left, in
/// one statement (`transcript_copy.rs`), and only while the row is that very write: a write of
/// another process, a deleted and re-created transcript and a lost lease are each seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transcript_writes_from_the_kept_copy_never_overwrite_another_write() {
    let (ours, theirs, lease) = two_processes_on_a_leased_session().await;
    let fence = Some(lease.fence());
    for text in ["one", "two", "three"] {
        ours.mutate_transcript(TENANT, SESSION, said(text), fence.as_ref())
            .await
            .unwrap();
    }
    assert!(
        ours.transcript_copy_writes() >= 2,
        "the writes after the first use the kept copy"
    );

    // Another process writes: our copy no longer matches the row, and nothing of theirs is lost.
    theirs
        .mutate_transcript(TENANT, SESSION, said("theirs"), fence.as_ref())
        .await
        .unwrap();
    ours.mutate_transcript(TENANT, SESSION, said("four"), fence.as_ref())
        .await
        .unwrap();
    let (texts, chained) = said_so_far(&ours, SESSION).await;
    assert_eq!(texts, ["one", "two", "three", "theirs", "four"]);
    assert!(chained, "each entry names the one before it");

    // Deleted and created again: the copy of the old row is not the new one.
    ours.delete_transcript(TENANT, SESSION).await.unwrap();
    ours.create_transcript(TENANT, SESSION, fence.as_ref())
        .await
        .unwrap();
    ours.mutate_transcript(TENANT, SESSION, said("again"), fence.as_ref())
        .await
        .unwrap();
    assert_eq!(
        said_so_far(&ours, SESSION).await,
        (vec!["again".to_owned()], true)
    );

    // The lease is lost: the copy is still ours, the fence is not.
    let next = hand_over(&ours, &theirs, &lease).await;
    let stale = ours
        .mutate_transcript(TENANT, SESSION, said("stale"), fence.as_ref())
        .await;
    assert_lease_lost(&stale);
    theirs
        .mutate_transcript(TENANT, SESSION, said("new holder"), Some(&next.fence()))
        .await
        .unwrap();
    let (texts, chained) = said_so_far(&theirs, SESSION).await;
    assert_eq!(texts, ["again", "new holder"]);
    assert!(chained);
}

/// A request step (`write_request_step`) of the session's journal and agent stream, as the
/// executor writes its start.
fn started(request: &str) -> agent_runtime_store::RequestStep {
    use agent_runtime_store::{Correlation, DurableEventDraft, RequestStep, RequestStepKind};
    RequestStep {
        kind: RequestStepKind::Start,
        events: vec![event(request)],
        journal: vec![DurableEventDraft {
            event_type: "request_accepted".to_owned(),
            data: crate::support::object(serde_json::json!({ "input": request })),
            occurred_at: None,
            correlation: Correlation {
                request_id: Some(request.to_owned()),
                ..Correlation::default()
            },
        }],
        transcript: Some(said(request)),
        receipt: None,
    }
}

/// The journal's and the agent stream's sequences of the session, as stored.
async fn stream_sequences(store: &PostgresStore) -> (Vec<u64>, Vec<u64>) {
    use agent_runtime_store::DurableJournal;
    let journal = store.read_durable(TENANT, SESSION, 0, 100).await.unwrap();
    let events = store.read_events(TENANT, SESSION, 0, 100).await.unwrap();
    (
        journal.events.iter().map(|e| e.sequence).collect(),
        events.events.iter().map(|e| e.sequence).collect(),
    )
}

/// A request step's events and journal entry are written in one statement each from the heads
/// this process's previous step left (`request_step.rs`, `append_durable_events`, migration 19),
/// and only while those are still the heads and the fence holds: another process's writes in
/// between and a lost lease are each seen, and nothing is skipped, written twice or written
/// under a stale fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn request_steps_from_known_heads_never_overwrite_another_write() {
    use agent_runtime_store::{Correlation, DurableEventDraft, DurableJournal, ExpectedSequence};
    let (ours, theirs, lease) = two_processes_on_a_leased_session().await;
    let fence = Some(lease.fence());
    for request in ["one", "two", "three"] {
        ours.write_request_step(TENANT, SESSION, started(request), fence.as_ref())
            .await
            .unwrap();
    }
    assert!(
        ours.known_head_journal_writes() >= 2,
        "the steps after the first use the known heads"
    );

    // Another process writes both streams: our heads are no longer theirs, and nothing of
    // theirs is lost.
    let draft = DurableEventDraft {
        event_type: "request_accepted".to_owned(),
        data: crate::support::object(serde_json::json!({ "input": "theirs" })),
        occurred_at: None,
        correlation: Correlation::default(),
    };
    theirs
        .append_durable(
            TENANT,
            SESSION,
            vec![draft],
            ExpectedSequence::Any,
            fence.as_ref(),
        )
        .await
        .unwrap();
    theirs
        .append_events(TENANT, SESSION, vec![event("theirs")], fence.as_ref())
        .await
        .unwrap();
    ours.write_request_step(TENANT, SESSION, started("four"), fence.as_ref())
        .await
        .unwrap();
    let five: Vec<u64> = (1..=5).collect();
    assert_eq!(stream_sequences(&ours).await, (five.clone(), five.clone()));

    // The lease is lost: the heads are still ours, the fence is not.
    let next = hand_over(&ours, &theirs, &lease).await;
    let stale = ours
        .write_request_step(TENANT, SESSION, started("stale"), fence.as_ref())
        .await;
    assert_lease_lost(&stale);
    assert_eq!(stream_sequences(&ours).await, (five.clone(), five));
    theirs
        .write_request_step(TENANT, SESSION, started("new holder"), Some(&next.fence()))
        .await
        .unwrap();
    let six: Vec<u64> = (1..=6).collect();
    assert_eq!(stream_sequences(&theirs).await, (six.clone(), six));
    let (texts, chained) = said_so_far(&theirs, SESSION).await;
    assert_eq!(texts, ["one", "two", "three", "four", "new holder"]);
    assert!(chained);
}
