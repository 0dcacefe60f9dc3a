//! Fixtures shared by the store's integration tests.
#![allow(dead_code)]

use agent_runtime::protocol::EventEnvelope;
use agent_runtime::protocol::{EventType, JsonObject};
use agent_runtime_store::conformance::support::{CREATED_AT, active_session};
use agent_runtime_store::{
    ClaimSession, CommandClaim, CommandReceipts, Correlation, DurableEventDraft, EnqueueOptions,
    EventRange, ExpectedSequence, NewEvent, RegisterWorker, SessionRecord, Store, TestHooks,
    TranscriptMutation,
};
use serde_json::{Value, json};

pub const T: &str = "tenant";

pub fn session(id: &str) -> SessionRecord {
    active_session(T, id, CREATED_AT)
}

pub fn event(session: &str) -> NewEvent {
    NewEvent {
        session_id: session.into(),
        request_id: None,
        occurred_at: "2026-01-01T00:00:00.000Z".into(),
        event_type: EventType::SessionStream,
        data: JsonObject::new(),
    }
}

/// A `session.stream` content event carrying `text`, stamped by the store.
pub fn text_event(session: &str, text: &str) -> NewEvent {
    NewEvent {
        session_id: session.into(),
        request_id: None,
        occurred_at: String::new(),
        event_type: EventType::SessionStream,
        data: object(serde_json::json!({ "type": "content", "text": text })),
    }
}

pub fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// Claims `command` and returns its lease id, failing the test otherwise.
pub async fn lease_of(store: &impl CommandReceipts, command: &str, ttl_ms: u64) -> String {
    match store.claim_command(T, command, "fp", ttl_ms).await.unwrap() {
        CommandClaim::Claimed { lease_id } => lease_id,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// Cases 32 and 36, first half: a session, a sealed command and three events (the first keyed
/// `terminal`) in a store retaining two events. Returns the keyed event.
pub async fn write_retention_scenario(store: &impl Store) -> EventEnvelope {
    store.put_session(&session("s")).await.unwrap();
    let lease = lease_of(store, "sealed", 30_000).await;
    store
        .seal_command(T, "sealed", &lease, &sealing())
        .await
        .unwrap();
    let terminal = store
        .append_event(T, event("s"), Some("terminal"))
        .await
        .unwrap();
    store.append_event(T, event("s"), None).await.unwrap();
    store.append_event(T, event("s"), None).await.unwrap();
    terminal
}

/// Cases 32 and 36, second half: what a restored or reopened store must show, 10 s later.
pub async fn assert_retention_scenario_restored(store: &impl Store, terminal: &EventEnvelope) {
    assert_eq!(store.get_session(T, "s").await.unwrap(), Some(session("s")));
    assert_eq!(
        store.event_stream_range(T, "s").await.unwrap(),
        Some(EventRange {
            first_sequence: 2,
            head_sequence: 3
        })
    );
    let page = store.read_events(T, "s", 1, 100).await.unwrap();
    let sequences: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [2, 3]);
    let stale = store.read_events(T, "s", 0, 100).await.unwrap_err();
    assert!(stale.to_string().contains("stale"), "{stale}");
    let by_key = store.get_event_by_idempotency_key(T, "s", "terminal").await;
    assert_eq!(by_key.unwrap().as_ref(), Some(terminal));
    let repeat = store
        .append_event(T, event("s"), Some("terminal"))
        .await
        .unwrap();
    assert_eq!(&repeat, terminal);
    assert_eq!(
        store.claim_command(T, "sealed", "fp", 100).await.unwrap(),
        CommandClaim::InProgress {
            retry_after_ms: 1000
        }
    );
    let next = store.append_event(T, event("s"), None).await.unwrap();
    assert_eq!(next.sequence, 4);
}

/// Writes something through every port, so a restart can be compared against it.
pub async fn exercise_every_port(store: &(impl Store + TestHooks)) {
    store.put_session(&session("s")).await.unwrap();
    store.put_session(&session("closed")).await.unwrap();
    store.append_event(T, event("s"), Some("k1")).await.unwrap();
    store
        .append_events(T, "s", vec![event("s"), event("s")], None)
        .await
        .unwrap();
    store
        .trim_agent_events_for_testing(T, "trimmed")
        .await
        .unwrap();
    store
        .append_event(T, event("trimmed"), Some("old"))
        .await
        .unwrap();
    store
        .trim_agent_events_for_testing(T, "trimmed")
        .await
        .unwrap();
    store.append_event(T, event("trimmed"), None).await.unwrap();

    let done = lease_of(store, "done", 30_000).await;
    store
        .seal_command(T, "done", &done, &sealing())
        .await
        .unwrap();
    store
        .complete_command(T, "done", &done, &json!({"ok": true}))
        .await
        .unwrap();
    lease_of(store, "claimed", 30_000).await;
    let abandoned = lease_of(store, "abandoned", 30_000).await;
    store
        .seal_command(T, "abandoned", &abandoned, &sealing())
        .await
        .unwrap();
    store.abandon_command(T, "abandoned", "gone").await.unwrap();

    store.create_transcript(T, "s", None).await.unwrap();
    let messages = vec![object(json!({"role": "user", "content": "hi"}))];
    store
        .mutate_transcript(T, "s", TranscriptMutation::AppendMessages(messages), None)
        .await
        .unwrap();
    store.fork_transcript(T, "s", "fork", None).await.unwrap();

    let worker = RegisterWorker {
        worker_id: "w".into(),
        capacity: 2,
        ttl_ms: 60_000,
        metadata: JsonObject::new(),
    };
    store.register_worker(worker).await.unwrap();
    store
        .enqueue_session(
            T,
            "routed",
            EnqueueOptions {
                priority: 3,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let claim = ClaimSession {
        owner_id: "w".into(),
        lease_id: "lease-r".into(),
        ttl_ms: 60_000,
        tenant_id: None,
        session_id: None,
        orphans_only: false,
    };
    let claimed = store.claim_session(claim).await.unwrap().unwrap();
    let fence = claimed.lease.fence();
    let draft = DurableEventDraft {
        event_type: "session_created".into(),
        data: JsonObject::new(),
        occurred_at: None,
        correlation: Correlation::default(),
    };
    store
        .append_durable(
            T,
            "routed",
            vec![draft.clone(), draft],
            ExpectedSequence::Empty,
            Some(&fence),
        )
        .await
        .unwrap();
    store
        .append_events(T, "routed", vec![event("routed")], Some(&fence))
        .await
        .unwrap();
}

/// What these receipts are sealed as acting on (it does not matter here).
fn sealing() -> agent_runtime_store::CommandTarget {
    agent_runtime_store::CommandTarget::new("session.close", None)
}
