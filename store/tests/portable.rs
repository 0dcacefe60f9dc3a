//! Sessions and tenant records moved between backends (`agent_runtime_store::portable`): a JSONL
//! store's data imported into PostgreSQL and from there into a memory store exports the same
//! entries at every step, reads back through the ordinary ports exactly as it did (cursors, a
//! stale cursor, an event key whose event was trimmed, pending inputs, receipts that replay),
//! goes on where it stopped, notifies no webhook endpoint, and imports again as a no-op; a
//! session changed on the target is refused as a conflict.

use std::sync::Arc;

use agent_runtime::protocol::{EventType, JsonObject};
use agent_runtime_store::portable::MAX_EXPORT_PAGE;
use agent_runtime_store::testing::postgres::fresh_database_url;
use agent_runtime_store::{
    AcquireLease, CommandClaim, CommandTarget, DeliveryStatus, DurableEventDraft, ExpectedSequence,
    ImportOutcome, JournalEntry, JsonlStore, MemoryRecord, MemoryStore, NewEvent, Portable,
    PostgresOptions, PostgresStore, SessionRecord, Store, StoreError, StoreLifecycle, StoreOptions,
    TranscriptMutation, WebhookOutbox, WebhookSubscription,
};
use serde_json::json;

const RETENTION: u64 = 3;

trait Backend: Store + Portable {}
impl<T: Store + Portable> Backend for T {}

fn object(value: serde_json::Value) -> JsonObject {
    value.as_object().cloned().expect("an object")
}

fn record(tenant: &str, session: &str) -> SessionRecord {
    SessionRecord {
        tenant_id: tenant.to_owned(),
        created_by: "alice".to_owned(),
        session_id: session.to_owned(),
        status: agent_runtime::protocol::SessionStatus::Active,
        created_at: "2026-01-01T00:00:00.000Z".to_owned(),
        updated_at: "2026-01-01T00:00:01.000Z".to_owned(),
        metadata: Some(object(
            json!({ "title": "moved", "nested": { "b": 1, "a": [1, 2] } }),
        )),
        profile: Some("default".to_owned()),
    }
}

fn event(session: &str, event_type: EventType, text: &str) -> NewEvent {
    NewEvent {
        session_id: session.to_owned(),
        request_id: Some("req-1".to_owned()),
        occurred_at: String::new(),
        event_type,
        data: object(json!({ "type": "content", "text": text, "z": 1, "a": 2 })),
    }
}

/// Two tenants with a session each under the same id (one with empty metadata), one of them with five events past a
/// retention of three (the first keyed), a transcript with a queued input, a durable journal
/// ending a request, an execution lease, receipts in every state and a memory; and a closed
/// session without events.
async fn populate(store: &dyn Backend) {
    store.put_session(&record("t1", "s1")).await.unwrap();
    // Empty metadata, which PostgreSQL reads back as none.
    let mut empty = record("t2", "s1");
    empty.metadata = Some(JsonObject::new());
    store.put_session(&empty).await.unwrap();
    let mut closed = record("t1", "s0-closed");
    closed.status = agent_runtime::protocol::SessionStatus::Closed;
    store.put_session(&closed).await.unwrap();
    store
        .append_event(
            "t1",
            event("s1", EventType::PermissionRequested, "e1"),
            Some("key-1"),
        )
        .await
        .unwrap();
    for text in ["e2", "e3", "e4"] {
        store
            .append_event("t1", event("s1", EventType::SessionStream, text), None)
            .await
            .unwrap();
    }
    store
        .append_event(
            "t1",
            event("s1", EventType::SessionStream, "e5"),
            Some("key-5"),
        )
        .await
        .unwrap();
    store.create_transcript("t1", "s1", None).await.unwrap();
    let messages = vec![
        object(json!({ "role": "user", "content": "hello" })),
        object(json!({ "role": "assistant", "content": "hi", "tool_calls": [] })),
    ];
    store
        .mutate_transcript(
            "t1",
            "s1",
            TranscriptMutation::AppendMessages(messages),
            None,
        )
        .await
        .unwrap();
    let queued = object(json!({ "inputId": "in-2", "input": { "type": "text", "text": "next" } }));
    store
        .mutate_transcript("t1", "s1", TranscriptMutation::EnqueueInput(queued), None)
        .await
        .unwrap();
    let draft = |kind: &str| DurableEventDraft {
        event_type: kind.to_owned(),
        data: object(json!({ "requestId": "req-1" })),
        occurred_at: None,
        correlation: Default::default(),
    };
    store
        .append_durable(
            "t1",
            "s1",
            vec![draft("request_accepted"), draft("request_completed")],
            ExpectedSequence::Any,
            None,
        )
        .await
        .unwrap();
    store
        .acquire_execution_lease(
            "t1",
            "s1",
            AcquireLease {
                lease_id: "lease-1".to_owned(),
                owner_id: "executor-a".to_owned(),
                ttl_ms: 60_000,
            },
        )
        .await
        .unwrap();
    let target = CommandTarget::new("input.submit", Some("s1"));
    for command in ["c-claimed", "c-sealed", "c-done", "c-abandoned"] {
        let CommandClaim::Claimed { lease_id } = store
            .claim_command("t1", command, &format!("fp-{command}"), 60_000)
            .await
            .unwrap()
        else {
            panic!("claimed");
        };
        if command == "c-claimed" {
            continue;
        }
        store
            .seal_command("t1", command, &lease_id, &target)
            .await
            .unwrap();
        match command {
            "c-done" => store
                .complete_command("t1", command, &lease_id, &json!({ "ok": true, "n": [1] }))
                .await
                .unwrap(),
            "c-abandoned" => {
                store
                    .abandon_command("t1", command, "lost with its executor")
                    .await
                    .unwrap();
            }
            _ => {}
        }
    }
    let memory = MemoryRecord {
        scope: "project".to_owned(),
        name: "style-guide".to_owned(),
        description: "How we write".to_owned(),
        memory_type: "project".to_owned(),
        body: "Short sentences.".to_owned(),
        updated_at_ms: 0,
    };
    store.save_memory("t2", memory, 10).await.unwrap();
}

/// Everything a store holds, as bundles carry it: per tenant, its sessions, then its receipts
/// and memories.
async fn export_all(store: &dyn Backend) -> Vec<Vec<JournalEntry>> {
    let mut parts = Vec::new();
    for tenant in store.list_tenants(None, MAX_EXPORT_PAGE).await.unwrap() {
        for session in store
            .list_session_ids(&tenant, None, MAX_EXPORT_PAGE)
            .await
            .unwrap()
        {
            parts.push(
                store
                    .export_session(&tenant, &session)
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        let mut records = store
            .export_receipts(&tenant, None, MAX_EXPORT_PAGE)
            .await
            .unwrap();
        records.extend(store.export_memories(&tenant).await.unwrap());
        parts.push(records);
    }
    parts
}

fn as_values(parts: &[Vec<JournalEntry>]) -> Vec<serde_json::Value> {
    parts
        .iter()
        .flatten()
        .map(|entry| serde_json::to_value(entry).unwrap())
        .collect()
}

/// Imports every part; returns the outcomes of the sessions and the record counts.
async fn import_all(
    store: &dyn Backend,
    parts: &[Vec<JournalEntry>],
) -> (Vec<ImportOutcome>, u64, u64) {
    let mut sessions = Vec::new();
    let (mut imported, mut unchanged) = (0, 0);
    for part in parts {
        if matches!(part.first(), Some(JournalEntry::Session { .. })) {
            sessions.push(store.import_session(part.clone()).await.unwrap());
        } else {
            let counts = store.import_records(part.clone()).await.unwrap();
            assert!(counts.conflicts.is_empty(), "{:?}", counts.conflicts);
            imported += counts.imported;
            unchanged += counts.unchanged;
        }
    }
    (sessions, imported, unchanged)
}

async fn postgres() -> PostgresStore {
    let url = fresh_database_url().await.expect("a test database");
    let options = PostgresOptions {
        max_events_per_session: RETENTION,
        ..PostgresOptions::default()
    };
    PostgresStore::connect(&url, options).await.unwrap()
}

fn options() -> StoreOptions {
    StoreOptions {
        max_events_per_session: RETENTION,
        ..StoreOptions::default()
    }
}

/// What a client and an executor find after the move.
async fn reads_back_as_before(store: &dyn Backend) {
    let range = store.event_stream_range("t1", "s1").await.unwrap().unwrap();
    assert_eq!((range.first_sequence, range.head_sequence), (3, 5));
    let page = store.read_events("t1", "s1", 3, 10).await.unwrap();
    let sequences: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [4, 5]);
    assert!(matches!(
        store.read_events("t1", "s1", 1, 10).await,
        Err(StoreError::StaleCursor { .. })
    ));
    let trimmed = store
        .get_event_by_idempotency_key("t1", "s1", "key-1")
        .await
        .unwrap()
        .expect("the key of a trimmed event travels");
    assert_eq!(trimmed.sequence, 1);
    let transcript = store.load_transcript("t1", "s1").await.unwrap().unwrap();
    assert_eq!(transcript.entries.len(), 2);
    assert_eq!(transcript.pending_inputs[0]["inputId"], "in-2");
    assert_eq!(store.durable_head("t1", "s1").await.unwrap(), Some(2));
    match store
        .claim_command("t1", "c-done", "fp-c-done", 1000)
        .await
        .unwrap()
    {
        CommandClaim::Completed { result } => assert_eq!(result, json!({ "ok": true, "n": [1] })),
        other => panic!("a completed command replays after the move: {other:?}"),
    }
    assert!(matches!(
        store
            .claim_command("t1", "c-abandoned", "fp-c-abandoned", 1000)
            .await
            .unwrap(),
        CommandClaim::Abandoned { .. }
    ));
    let lease = store
        .get_execution_lease("t1", "s1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.fencing_token, 1);
    assert_eq!(store.list_memories("t2", "project").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_deployment_moves_from_jsonl_to_postgresql_and_on_to_memory_unchanged() {
    let directory = tempfile::tempdir().unwrap();
    let jsonl = JsonlStore::open(directory.path(), options()).await.unwrap();
    populate(&jsonl).await;
    let exported = export_all(&jsonl).await;
    assert_eq!(
        exported.len(),
        5,
        "t1: two sessions and records; t2: one and records"
    );

    let postgres = postgres().await;
    // An endpoint that wants what the history holds: importing it notifies nobody.
    let wants = ["permission.requested", "request.completed"].map(str::to_owned);
    postgres
        .sync_webhook_endpoints(&[WebhookSubscription {
            tenant_id: "t1".to_owned(),
            endpoint_id: "hook".to_owned(),
            event_types: wants.to_vec(),
        }])
        .await
        .unwrap();
    let (sessions, imported, _) = import_all(&postgres, &exported).await;
    assert_eq!(sessions, vec![ImportOutcome::Imported; 3]);
    assert_eq!(imported, 5, "four receipts and a memory");
    assert_eq!(
        as_values(&export_all(&postgres).await),
        as_values(&exported)
    );
    reads_back_as_before(&postgres).await;
    let queued = postgres
        .list_webhook_deliveries("t1", "hook", None::<DeliveryStatus>, 0, 100)
        .await
        .unwrap();
    assert!(queued.is_empty(), "imported history notified: {queued:?}");

    // Importing the same again changes nothing.
    let (sessions, imported, unchanged) = import_all(&postgres, &exported).await;
    assert_eq!(sessions, vec![ImportOutcome::Unchanged; 3]);
    assert_eq!((imported, unchanged), (0, 5));

    // And back out of PostgreSQL into another backend, still the same.
    let from_postgres = export_all(&postgres).await;
    let memory = MemoryStore::new(options());
    import_all(&memory, &from_postgres).await;
    assert_eq!(as_values(&export_all(&memory).await), as_values(&exported));
    reads_back_as_before(&memory).await;
    jsonl.close().await.unwrap();
    let reopened = JsonlStore::open(directory.path(), options()).await.unwrap();
    reads_back_as_before(&reopened).await;
}

#[tokio::test]
async fn a_moved_session_goes_on_where_it_stopped_and_a_changed_one_is_a_conflict() {
    let source = MemoryStore::new(options());
    populate(&source).await;
    let exported = export_all(&source).await;
    let targets: [Arc<dyn Backend>; 2] = [
        Arc::new(postgres().await),
        Arc::new(MemoryStore::new(options())),
    ];
    for target in targets {
        import_all(&*target, &exported).await;
        // The next event takes the next sequence, and retention goes on trimming.
        let next = target
            .append_event("t1", event("s1", EventType::SessionStream, "e6"), None)
            .await;
        // The session holds an execution lease: unfenced appends are refused, as before.
        assert!(next.is_err(), "an unfenced append to a leased session");
        let appended = target
            .append_events(
                "t2",
                "s1",
                vec![event("s1", EventType::SessionStream, "t2-e1")],
                None,
            )
            .await
            .unwrap();
        assert_eq!(appended[0].sequence, 1);
        let (sessions, _, _) = import_all(&*target, &exported).await;
        let conflicts: Vec<&ImportOutcome> = sessions
            .iter()
            .filter(|outcome| matches!(outcome, ImportOutcome::Conflict(_)))
            .collect();
        assert_eq!(conflicts.len(), 1, "{sessions:?}");
        let ImportOutcome::Conflict(why) = conflicts[0] else {
            unreachable!()
        };
        assert!(why.contains("s1") && why.contains("t2"), "{why}");
    }
}

#[tokio::test]
async fn entries_that_are_not_one_sessions_are_refused_and_write_nothing() {
    let source = MemoryStore::new(options());
    populate(&source).await;
    let mut part = source.export_session("t1", "s1").await.unwrap().unwrap();
    let target = MemoryStore::new(options());
    // An event of another session slipped into the part.
    let mut foreign = part.clone();
    if let JournalEntry::Event { session_id, .. } = &mut foreign[1] {
        *session_id = "s-other".to_owned();
    }
    assert!(matches!(
        target.import_session(foreign).await,
        Err(StoreError::InvalidArgument(_))
    ));
    // A gap in the event sequences.
    part.remove(2);
    assert!(matches!(
        target.import_session(part).await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(target.list_tenants(None, 10).await.unwrap().is_empty());
}
