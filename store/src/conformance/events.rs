//! The replayable agent event log: sequences, idempotent appends, retention, cursors, page limits
//! and the live-tail wake-up (docs/storage.md §1.4; cases 7-15, 22, 24, 60).

use std::collections::BTreeSet;

use agent_runtime::protocol::EventType;
use agent_runtime::timefmt::format_iso_ms;

use super::support::*;
use super::{Factory, StoreConfigForTest};
use crate::model::*;

/// Cases 7 and 60.
pub async fn appended_events_get_consecutive_sequences(factory: Factory) {
    let h = factory.start().await;

    let appended = h.append(SESSION, 2).await;

    assert_eq!(sequences(&appended), vec![1, 2]);
    assert_ne!(appended[0].event_id, appended[1].event_id);
    assert!(appended.iter().all(|event| event.session_id == SESSION));
}

/// Case 8: the log returns what was appended, in order.
pub async fn read_events_returns_appended_events_in_order(factory: Factory) {
    let h = factory.start().await;
    let appended = h.append(SESSION, 2).await;

    let page = h
        .store
        .read_events(TENANT, SESSION, 0, DEFAULT_EVENT_PAGE)
        .await
        .unwrap();

    assert_eq!(page.events, appended);
    assert_eq!(page.events[0].event_id, appended[0].event_id);
    assert!(!page.has_more);
}

/// Cases 9 and 10, and both absent before the first append.
pub async fn latest_sequence_and_range_track_the_head(factory: Factory) {
    let h = factory.start().await;
    assert_eq!(
        h.store.latest_event_sequence(TENANT, SESSION).await,
        Ok(None)
    );
    assert_eq!(h.store.event_stream_range(TENANT, SESSION).await, Ok(None));

    let appended = h.append(SESSION, 2).await;

    assert_eq!(
        h.store.latest_event_sequence(TENANT, SESSION).await,
        Ok(Some(appended[1].sequence))
    );
    assert_eq!(
        h.store.event_stream_range(TENANT, SESSION).await,
        Ok(Some(EventRange {
            first_sequence: appended[0].sequence,
            head_sequence: appended[1].sequence,
        }))
    );
}

/// Cases 11 and 12.
pub async fn repeated_idempotency_key_returns_the_original_event(factory: Factory) {
    let h = factory.start().await;
    let key = Some("key-1");
    let first = h
        .store
        .append_event(TENANT, stream_event(SESSION, "first"), key)
        .await
        .unwrap();

    let repeat = h
        .store
        .append_event(TENANT, stream_event(SESSION, "different body"), key)
        .await
        .unwrap();

    assert_eq!(repeat, first);
    assert_eq!(h.read_all(SESSION).await, vec![first.clone()]);
    let by_key = h
        .store
        .get_event_by_idempotency_key(TENANT, SESSION, "key-1")
        .await
        .unwrap();
    assert_eq!(by_key.map(|event| event.event_id), Some(first.event_id));
}

/// Cases 13 and 14: racing appends with one key store exactly one event.
pub async fn concurrent_appends_with_one_key_resolve_to_one_event(factory: Factory) {
    let h = factory.start().await;
    let appends = (0..8).map(|i| {
        let store = h.store.clone();
        tokio::spawn(async move {
            let event = stream_event(SESSION, &format!("racer {i}"));
            store.append_event(TENANT, event, Some("key-2")).await
        })
    });
    let handles: Vec<_> = appends.collect();

    let mut stored = Vec::new();
    for handle in handles {
        stored.push(handle.await.expect("task").expect("append"));
    }

    let distinct: BTreeSet<_> = stored
        .iter()
        .map(|event| (event.event_id.clone(), event.sequence))
        .collect();
    assert_eq!(distinct.len(), 1, "{stored:?}");
    let log = h.read_all(SESSION).await;
    let copies = log
        .iter()
        .filter(|event| event.event_id == stored[0].event_id)
        .count();
    assert_eq!(copies, 1);
    assert_eq!(log.len(), 1);
}

/// Case 15.
pub async fn unknown_idempotency_key_is_none(factory: Factory) {
    let h = factory.start().await;
    h.append(SESSION, 1).await;

    let missing = h
        .store
        .get_event_by_idempotency_key(TENANT, SESSION, "never-used")
        .await;

    assert_eq!(missing, Ok(None));
}

/// Case 22: the oldest events beyond the retention are dropped and an older cursor is stale.
pub async fn retention_drops_the_oldest_events(factory: Factory) {
    let h = factory
        .start_with(StoreConfigForTest::default().with_max_events(2))
        .await;
    h.append(SESSION, 3).await;

    let page = h.store.read_events(TENANT, SESSION, 1, 100).await.unwrap();
    let stale = h.store.read_events(TENANT, SESSION, 0, 100).await;

    assert_eq!(sequences(&page.events), vec![2, 3]);
    expect_stale(stale, "stale");
    assert_eq!(
        h.store.event_stream_range(TENANT, SESSION).await,
        Ok(Some(EventRange {
            first_sequence: 2,
            head_sequence: 3
        }))
    );
    assert_eq!(
        h.store.latest_event_sequence(TENANT, SESSION).await,
        Ok(Some(3))
    );
}

/// A cursor beyond the head is rejected, with or without a log.
pub async fn cursor_ahead_of_the_head_is_stale(factory: Factory) {
    let h = factory.start().await;
    let empty = h.store.read_events(TENANT, SESSION, 0, 100).await.unwrap();
    assert!(empty.events.is_empty() && !empty.has_more);
    expect_stale(h.store.read_events(TENANT, SESSION, 1, 100).await, "ahead");

    h.append(SESSION, 2).await;

    let at_head = h.store.read_events(TENANT, SESSION, 2, 100).await.unwrap();
    assert!(at_head.events.is_empty() && !at_head.has_more);
    expect_stale(h.store.read_events(TENANT, SESSION, 3, 100).await, "ahead");
}

pub async fn event_page_limit_must_be_between_1_and_1000(factory: Factory) {
    let h = factory.start().await;
    h.append(SESSION, 1).await;

    for limit in [0, MAX_EVENT_PAGE + 1] {
        let page = h.store.read_events(TENANT, SESSION, 0, limit).await;
        expect_invalid(page, "Event page limit must be between 1 and 1000");
    }
    let full = h
        .store
        .read_events(TENANT, SESSION, 0, MAX_EVENT_PAGE)
        .await;
    assert_eq!(full.map(|page| page.events.len()), Ok(1));
}

/// `has_more` says whether events remain after the page.
pub async fn read_events_pages_with_has_more(factory: Factory) {
    let h = factory.start().await;
    h.append(SESSION, 3).await;

    let first = h.store.read_events(TENANT, SESSION, 0, 2).await.unwrap();
    let rest = h.store.read_events(TENANT, SESSION, 2, 2).await.unwrap();

    assert_eq!(sequences(&first.events), vec![1, 2]);
    assert!(first.has_more);
    assert_eq!(sequences(&rest.events), vec![3]);
    assert!(!rest.has_more);
}

/// A batch whose events name another session is rejected and writes nothing.
pub async fn event_session_must_match_the_target_log(factory: Factory) {
    let h = factory.start().await;
    let batch = vec![
        stream_event(SESSION, "fine"),
        stream_event("session-2", "wrong log"),
    ];

    let appended = h.store.append_events(TENANT, SESSION, batch, None).await;

    expect_invalid(appended, "does not match");
    assert!(h.read_all(SESSION).await.is_empty());
}

/// An unfenced batch gets contiguous sequences after the existing head.
pub async fn append_events_batch_is_contiguous(factory: Factory) {
    let h = factory.start().await;
    h.append(SESSION, 1).await;
    let batch = vec![
        stream_event(SESSION, "a"),
        stream_event(SESSION, "b"),
        stream_event(SESSION, "c"),
    ];

    let appended = h
        .store
        .append_events(TENANT, SESSION, batch, None)
        .await
        .unwrap();

    assert_eq!(sequences(&appended), vec![2, 3, 4]);
    assert_eq!(sequences(&h.read_all(SESSION).await), vec![1, 2, 3, 4]);
}

/// SSE-01 (reliability catalogue, P0): 20 concurrent writers on one session, mixing single,
/// keyed and batch appends, get every sequence from 1 exactly once; every acknowledged event is
/// stored at the sequence it was acknowledged with, and nothing else is. (Restart and second
/// gateway: store/tests/jsonl/catalogue.rs and store/tests/postgres/catalogue.rs.)
pub async fn sse_01_concurrent_appenders_get_gapless_sequences(factory: Factory) {
    let h = factory.start().await;
    // 20 writers x 4 rounds (single, keyed, batch of 2): 80 calls, 100 events; scaled to seconds.
    let writers: Vec<_> = (0..20)
        .map(|writer| {
            let store = h.store.clone();
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for round in 0..4 {
                    let text = format!("w{writer}-r{round}");
                    match round % 3 {
                        0 => acknowledged.push(
                            store
                                .append_event(TENANT, stream_event(SESSION, &text), None)
                                .await
                                .expect("single append"),
                        ),
                        1 => {
                            let key = format!("key-{text}");
                            acknowledged.push(
                                store
                                    .append_event(TENANT, stream_event(SESSION, &text), Some(&key))
                                    .await
                                    .expect("keyed append"),
                            );
                        }
                        _ => {
                            let batch = vec![
                                stream_event(SESSION, &format!("{text}-a")),
                                stream_event(SESSION, &format!("{text}-b")),
                            ];
                            let stored = store
                                .append_events(TENANT, SESSION, batch, None)
                                .await
                                .expect("batch append");
                            assert_eq!(
                                stored[1].sequence,
                                stored[0].sequence + 1,
                                "a batch is contiguous"
                            );
                            acknowledged.extend(stored);
                        }
                    }
                }
                acknowledged
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.extend(writer.await.expect("writer task"));
    }
    acknowledged.sort_by_key(|event| event.sequence);
    let total = acknowledged.len() as u64;
    assert_eq!(total, 100);
    assert_eq!(
        sequences(&acknowledged),
        (1..=total).collect::<Vec<_>>(),
        "every sequence once, no gap, no duplicate"
    );
    assert_eq!(h.read_all(SESSION).await, acknowledged);
    assert_eq!(
        h.store.latest_event_sequence(TENANT, SESSION).await,
        Ok(Some(total))
    );
}

/// Another tenant sees no events, no head and no keys for the same session id.
pub async fn events_are_partitioned_by_tenant(factory: Factory) {
    let h = factory.start().await;
    h.store
        .append_event(TENANT, stream_event(SESSION, "mine"), Some("key-1"))
        .await
        .unwrap();

    let theirs = h.store.read_events(OTHER_TENANT, SESSION, 0, 100).await;
    let their_key = h
        .store
        .get_event_by_idempotency_key(OTHER_TENANT, SESSION, "key-1")
        .await;
    let their_event = h
        .store
        .append_event(OTHER_TENANT, stream_event(SESSION, "theirs"), Some("key-1"))
        .await
        .unwrap();

    assert_eq!(theirs.map(|page| page.events.len()), Ok(0));
    assert_eq!(their_key, Ok(None));
    assert_eq!(
        h.store.latest_event_sequence(OTHER_TENANT, SESSION).await,
        Ok(Some(1))
    );
    assert_eq!(their_event.sequence, 1);
    assert_eq!(their_event.data["text"], "theirs");
}

/// Case 24: a pending wait resolves once an event is appended.
pub async fn wait_for_events_resolves_on_append(factory: Factory) {
    let h = factory.start().await;
    let store = h.store.clone();
    let waiter = tokio::spawn(async move { store.wait_for_events(TENANT, SESSION, 0).await });

    h.append(SESSION, 1).await;

    let woke = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("the wait must resolve after an append");
    assert_eq!(woke.expect("task"), Ok(()));
}

/// A wait for events that already exist resolves at once.
pub async fn wait_for_events_resolves_when_newer_events_exist(factory: Factory) {
    let h = factory.start().await;
    h.append(SESSION, 2).await;

    let wait = h.store.wait_for_events(TENANT, SESSION, 1);
    let woke = tokio::time::timeout(DEADLINE, wait).await;

    assert_eq!(woke.expect("must resolve at once"), Ok(()));
}

/// The stored envelope keeps the caller's type, request id and data.
pub async fn appended_event_keeps_its_content(factory: Factory) {
    let h = factory.start().await;
    let mut event = stream_event(SESSION, "hello");
    event.event_type = EventType::PermissionRequested;

    let stored = h
        .store
        .append_event(TENANT, event.clone(), None)
        .await
        .unwrap();

    assert_eq!(stored.event_type, EventType::PermissionRequested);
    assert_eq!(stored.request_id, event.request_id);
    assert_eq!(stored.occurred_at, event.occurred_at);
    assert_eq!(*stored.data, event.data);
    assert!(!stored.event_id.is_empty());
}

/// Retention by age trims each log from the front up to its newest event older than the
/// cutoff, always keeping a session's newest event, `limit` sessions per call; an older cursor is
/// then stale, a retained one reads on.
pub async fn events_past_their_age_are_trimmed_keeping_each_sessions_newest(factory: Factory) {
    let h = factory.start().await;
    let at = |session: &str, ms: u64| NewEvent {
        occurred_at: format_iso_ms(1_767_225_600_000 + ms),
        ..stream_event(session, "e")
    };
    for ms in [0, 1, 2, 10_000, 10_001] {
        h.store
            .append_event(TENANT, at("mixed", ms), None)
            .await
            .unwrap();
    }
    for ms in [0, 1] {
        h.store
            .append_event(TENANT, at("old", ms), None)
            .await
            .unwrap();
    }
    h.store
        .append_event(TENANT, at("single", 0), None)
        .await
        .unwrap();
    // What the payload says (a NUL character, its own `occurredAt`) does not matter.
    let old_said = format_iso_ms(0);
    for (ms, said) in [
        (0, "9999"),
        (10_000, old_said.as_str()),
        (10_001, old_said.as_str()),
    ] {
        let event = NewEvent {
            data: obj(
                serde_json::json!({ "type": "content", "text": "\u{0}", "occurredAt": said }),
            ),
            ..at("payload", ms)
        };
        h.store.append_event(TENANT, event, None).await.unwrap();
    }
    let cutoff = format_iso_ms(1_767_225_600_000 + 5_000);

    assert_eq!(h.store.trim_events_by_age(&cutoff, 1).await.unwrap(), 1);
    assert_eq!(h.store.trim_events_by_age(&cutoff, 100).await.unwrap(), 2);
    assert_eq!(h.store.trim_events_by_age(&cutoff, 100).await.unwrap(), 0);
    let range = |session: &'static str| {
        let store = h.store.clone();
        async move {
            store
                .event_stream_range(TENANT, session)
                .await
                .unwrap()
                .unwrap()
        }
    };
    let mixed = range("mixed").await;
    assert_eq!((mixed.first_sequence, mixed.head_sequence), (4, 5));
    let old = range("old").await;
    assert_eq!(
        (old.first_sequence, old.head_sequence),
        (2, 2),
        "the newest is kept"
    );
    let payload = range("payload").await;
    assert_eq!((payload.first_sequence, payload.head_sequence), (2, 3));
    let single = range("single").await;
    assert_eq!((single.first_sequence, single.head_sequence), (1, 1));
    expect_stale(h.store.read_events(TENANT, "mixed", 0, 10).await, "stale");
    let page = h.store.read_events(TENANT, "mixed", 3, 10).await.unwrap();
    assert_eq!(sequences(&page.events), vec![4, 5]);
    // Appends go on from the head.
    let next = h
        .store
        .append_event(TENANT, at("mixed", 20_000), None)
        .await;
    assert_eq!(next.unwrap().sequence, 6);
}
