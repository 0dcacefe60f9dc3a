//! The durable execution journal: compare-and-set appends, contiguous batches, validation, the
//! per-session quota, cursors, and no retention (docs/storage.md §3.3, §7.1; case 61).

use agent_runtime::timefmt::is_iso_datetime;
use serde_json::json;

use super::support::*;
use super::{Factory, Harness, StoreConfigForTest};
use crate::error::{RuntimeErrorCode, StoreResult};
use crate::model::*;

async fn append(
    h: &Harness,
    count: usize,
    expected: ExpectedSequence,
) -> StoreResult<DurableAppendOutcome> {
    h.store
        .append_durable(TENANT, SESSION, drafts(count), expected, None)
        .await
}

async fn head(h: &Harness) -> Option<u64> {
    h.store
        .durable_head(TENANT, SESSION)
        .await
        .expect("durable head")
}

fn durable_sequences(events: &[DurableEvent]) -> Vec<u64> {
    events.iter().map(|event| event.sequence).collect()
}

/// Case 61 and the envelope of every stored event.
pub async fn durable_appends_are_contiguous_from_1(factory: Factory) {
    let h = factory.start().await;

    let first = append(&h, 2, ExpectedSequence::Empty).await.unwrap();
    let second = append(&h, 1, ExpectedSequence::At(2)).await.unwrap();

    assert_eq!(durable_sequences(&first.events), vec![1, 2]);
    assert_eq!((first.previous_sequence, first.last_sequence), (None, 2));
    assert_eq!(durable_sequences(&second.events), vec![3]);
    assert_eq!(
        (second.previous_sequence, second.last_sequence),
        (Some(2), 3)
    );
    assert_eq!(head(&h).await, Some(3));
    let event = &first.events[0];
    assert_eq!(event.schema_version, DURABLE_SCHEMA_VERSION);
    assert_eq!(
        (event.session_id.as_str(), event.event_type.as_str()),
        (SESSION, "step_0")
    );
    assert!(is_iso_datetime(&event.recorded_at), "{}", event.recorded_at);
    assert_ne!(first.events[0].event_id, first.events[1].event_id);
    assert_eq!(first.events[0].recorded_at, first.events[1].recorded_at);
}

/// `Empty` and `At(n)` are compare-and-set conditions; a mismatch writes nothing.
pub async fn durable_expected_sequence_mismatch_conflicts(factory: Factory) {
    let h = factory.start().await;
    let on_empty = append(&h, 1, ExpectedSequence::At(1)).await;
    expect_runtime(on_empty, RuntimeErrorCode::DurableSequenceConflict);
    append(&h, 2, ExpectedSequence::Any).await.unwrap();

    let not_empty = append(&h, 1, ExpectedSequence::Empty).await;
    let behind = append(&h, 1, ExpectedSequence::At(1)).await;
    let ahead = append(&h, 1, ExpectedSequence::At(5)).await;

    for result in [not_empty, behind, ahead] {
        expect_runtime(result, RuntimeErrorCode::DurableSequenceConflict);
    }
    assert_eq!(head(&h).await, Some(2));
    let any = append(&h, 1, ExpectedSequence::Any).await.unwrap();
    assert_eq!(any.last_sequence, 3);
}

/// An empty batch, or a draft with a blank type, is `DURABLE_EVENT_INVALID_APPEND`.
pub async fn invalid_durable_append_is_rejected(factory: Factory) {
    let h = factory.start().await;

    let empty = append(&h, 0, ExpectedSequence::Any).await;
    let blank_type = h
        .store
        .append_durable(
            TENANT,
            SESSION,
            vec![draft(" ")],
            ExpectedSequence::Any,
            None,
        )
        .await;

    expect_runtime(empty, RuntimeErrorCode::DurableInvalidAppend);
    expect_runtime(blank_type, RuntimeErrorCode::DurableInvalidAppend);
    assert_eq!(head(&h).await, None);
}

/// `(head or 0) + batch > quota` is `RUNTIME_STORE_QUOTA_EXCEEDED` and writes nothing.
pub async fn durable_quota_is_enforced(factory: Factory) {
    let config = StoreConfigForTest::default().with_max_durable_events(3);
    let h = factory.start_with(config).await;
    append(&h, 2, ExpectedSequence::Any).await.unwrap();

    let over = append(&h, 2, ExpectedSequence::Any).await;

    expect_runtime(over, RuntimeErrorCode::QuotaExceeded);
    assert_eq!(head(&h).await, Some(2));
    let last = append(&h, 1, ExpectedSequence::Any).await.unwrap();
    assert_eq!(last.last_sequence, 3);
    let full = append(&h, 1, ExpectedSequence::Any).await;
    expect_runtime(full, RuntimeErrorCode::QuotaExceeded);
}

/// `after` is exclusive, pages are bounded, `has_more` and `head_sequence` describe the rest.
pub async fn read_durable_pages_after_a_cursor(factory: Factory) {
    let h = factory.start().await;
    append(&h, 5, ExpectedSequence::Empty).await.unwrap();

    let first = h.store.read_durable(TENANT, SESSION, 0, 2).await.unwrap();
    let last = h.store.read_durable(TENANT, SESSION, 4, 10).await.unwrap();
    let at_head = h.store.read_durable(TENANT, SESSION, 5, 10).await.unwrap();

    assert_eq!(durable_sequences(&first.events), vec![1, 2]);
    assert!(first.has_more);
    assert_eq!(first.head_sequence, Some(5));
    assert_eq!(durable_sequences(&last.events), vec![5]);
    assert!(!last.has_more);
    assert!(at_head.events.is_empty() && !at_head.has_more);
}

/// A cursor beyond the head and a page size outside 1..=1000 are
/// `DURABLE_EVENT_INVALID_CURSOR`.
pub async fn durable_cursor_and_limit_are_validated(factory: Factory) {
    let h = factory.start().await;
    append(&h, 2, ExpectedSequence::Empty).await.unwrap();

    let ahead = h.store.read_durable(TENANT, SESSION, 3, 10).await;
    let zero = h.store.read_durable(TENANT, SESSION, 0, 0).await;
    let too_many = h
        .store
        .read_durable(TENANT, SESSION, 0, MAX_EVENT_PAGE + 1)
        .await;

    for result in [ahead, zero, too_many] {
        expect_runtime(result, RuntimeErrorCode::DurableInvalidCursor);
    }
}

/// A session without a journal has no head and an empty first page.
pub async fn durable_read_of_an_unknown_session_is_empty(factory: Factory) {
    let h = factory.start().await;

    let page = h.store.read_durable(TENANT, SESSION, 0, 10).await.unwrap();

    assert!(page.events.is_empty() && !page.has_more);
    assert_eq!(page.head_sequence, None);
    assert_eq!(head(&h).await, None);
}

/// `occurredAt` defaults to the commit time; data and correlation ids round-trip.
pub async fn durable_event_keeps_its_content(factory: Factory) {
    let h = factory.start().await;
    let correlation = Correlation {
        command_id: Some("command-1".to_owned()),
        request_id: Some("request-1".to_owned()),
        turn_id: Some("turn-1".to_owned()),
        ..Correlation::default()
    };
    let explicit = DurableEventDraft {
        event_type: "request_accepted".to_owned(),
        data: obj(json!({ "inputId": "input-1", "input": "hello", "priority": "now" })),
        occurred_at: Some("2026-01-01T00:00:00.000Z".to_owned()),
        correlation: correlation.clone(),
    };
    let batch = vec![explicit.clone(), draft("request_started")];

    let stored = h
        .store
        .append_durable(TENANT, SESSION, batch, ExpectedSequence::Empty, None)
        .await
        .unwrap();
    let read = h.store.read_durable(TENANT, SESSION, 0, 10).await.unwrap();

    assert_eq!(read.events, stored.events);
    let (accepted, started) = (&stored.events[0], &stored.events[1]);
    assert_eq!(accepted.data, explicit.data);
    assert_eq!(accepted.correlation, correlation);
    assert_eq!(accepted.occurred_at, "2026-01-01T00:00:00.000Z");
    assert_eq!(started.occurred_at, started.recorded_at);
    assert_eq!(started.correlation, Correlation::default());
}

/// Agent-event retention never trims the durable journal.
pub async fn durable_journal_is_not_trimmed_by_event_retention(factory: Factory) {
    let h = factory
        .start_with(StoreConfigForTest::default().with_max_events(2))
        .await;

    append(&h, 5, ExpectedSequence::Empty).await.unwrap();

    let page = h.store.read_durable(TENANT, SESSION, 0, 10).await.unwrap();
    assert_eq!(durable_sequences(&page.events), vec![1, 2, 3, 4, 5]);
}

pub async fn durable_journals_are_partitioned_by_tenant(factory: Factory) {
    let h = factory.start().await;
    append(&h, 2, ExpectedSequence::Empty).await.unwrap();

    let theirs = h
        .store
        .append_durable(
            OTHER_TENANT,
            SESSION,
            drafts(1),
            ExpectedSequence::Empty,
            None,
        )
        .await
        .unwrap();

    assert_eq!(theirs.last_sequence, 1);
    assert_eq!(head(&h).await, Some(2));
    assert_eq!(
        h.store.durable_head(OTHER_TENANT, SESSION).await,
        Ok(Some(1))
    );
}

/// R1 (docs/reliability.md): a step of a request (its terminal events, its terminal journal
/// entry and its last message) under the session's fence. Stored, all are there; under a fence
/// a takeover made stale, none is, on every backend (one commit where the store has one, and
/// the fence refuses the first write elsewhere).
pub async fn a_request_step_stores_its_events_journal_entry_and_message_or_none(factory: Factory) {
    let h = factory.start().await;
    let held = h
        .acquire_lease(SESSION, "lease-a", "worker-a", 60_000)
        .await;
    h.store
        .create_transcript(TENANT, SESSION, Some(&held.fence()))
        .await
        .expect("create the transcript");
    let step = RequestStep {
        kind: RequestStepKind::End,
        events: vec![stream_event(SESSION, "result")],
        journal: vec![draft("request_completed")],
        transcript: Some(TranscriptMutation::AppendMessages(vec![message("answer")])),
        receipt: None,
    };
    let written = h
        .store
        .write_request_step(TENANT, SESSION, step.clone(), Some(&held.fence()))
        .await
        .expect("end a request");
    assert_eq!(sequences(&written.events), vec![1]);
    assert_eq!(durable_sequences(&written.journal.events), vec![1]);
    assert_eq!(written.entries.len(), 1);
    assert!(!written.receipt_completed);

    h.store
        .release_execution_lease(TENANT, &held)
        .await
        .expect("release");
    h.acquire_lease(SESSION, "lease-b", "worker-b", 60_000)
        .await;
    let stale = h
        .store
        .write_request_step(TENANT, SESSION, step, Some(&held.fence()))
        .await;
    expect_runtime(stale, RuntimeErrorCode::LeaseLost);
    assert_eq!(sequences(&h.read_all(SESSION).await), vec![1]);
    assert_eq!(head(&h).await, Some(1));
    let transcript = h
        .store
        .load_transcript(TENANT, SESSION)
        .await
        .expect("load")
        .expect("a transcript");
    assert_eq!(transcript.entries.len(), 1);
}

fn message(text: &str) -> agent_runtime::protocol::JsonObject {
    match json!({ "role": "assistant", "content": text }) {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("an object literal"),
    }
}
