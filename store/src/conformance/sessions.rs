//! Session records: tenant partitioning, upsert rules, listing order and pagination
//! (docs/storage.md §1.3; cases 1, 21, 58). Listing follows the PostgreSQL contract (S6):
//! `updatedAt` descending, ties by session id, limit 1..=100 (default 50), and a cursor only the
//! store can issue.

use agent_runtime::protocol::SessionStatus;
use agent_runtime::timefmt::format_iso_ms;
use serde_json::json;

use super::support::*;
use super::{Factory, Harness};
use crate::model::*;

/// A session created at `created` and closed at `closed` (ms).
fn closed_record(tenant: &str, session: &str, created: u64, closed: u64) -> SessionRecord {
    let mut record = session_record(tenant, session, created);
    record.status = SessionStatus::Closed;
    record.updated_at = format_iso_ms(closed);
    record
}

async fn put(h: &Harness, record: &SessionRecord) {
    h.store.put_session(record).await.expect("put session");
}

async fn list(h: &Harness, cursor: Option<&str>, limit: Option<u32>) -> SessionPage {
    h.store
        .list_sessions(TENANT, cursor, limit)
        .await
        .expect("list sessions")
}

fn ids(page: &SessionPage) -> Vec<&str> {
    page.sessions
        .iter()
        .map(|s| s.session_id.as_str())
        .collect()
}

/// Puts `count` sessions `session-00 ..` under [`TENANT`], each updated 1 ms after the previous.
async fn put_numbered(h: &Harness, count: u64) -> Vec<String> {
    let base = h.now();
    let mut ids = Vec::new();
    for i in 0..count {
        let id = format!("session-{i:02}");
        put(h, &session_record(TENANT, &id, base + i)).await;
        ids.push(id);
    }
    ids
}

/// Case 1: one session id under two tenants is two independent records.
pub async fn sessions_are_partitioned_by_tenant(factory: Factory) {
    let h = factory.start().await;
    let mine = session_record(TENANT, SESSION, h.now());
    let theirs = session_record(OTHER_TENANT, SESSION, h.now());
    put(&h, &mine).await;
    put(&h, &theirs).await;
    put(&h, &session_record(OTHER_TENANT, "session-2", h.now())).await;

    let got_mine = h.store.get_session(TENANT, SESSION).await.unwrap();
    let got_theirs = h.store.get_session(OTHER_TENANT, SESSION).await.unwrap();
    let page = list(&h, None, None).await;

    assert_eq!(got_mine, Some(mine));
    assert_eq!(
        got_theirs.map(|r| r.tenant_id),
        Some(OTHER_TENANT.to_owned())
    );
    assert_eq!(ids(&page), vec![SESSION]);
    assert!(page.sessions.iter().all(|s| s.tenant_id == TENANT));
}

/// Cases 21 and 58.
pub async fn other_tenant_cannot_read_a_session(factory: Factory) {
    let h = factory.start().await;
    let record = session_record(TENANT, SESSION, h.now());
    put(&h, &record).await;

    assert_eq!(h.store.get_session(TENANT, SESSION).await, Ok(Some(record)));
    assert_eq!(h.store.get_session(OTHER_TENANT, SESSION).await, Ok(None));
    assert!(
        h.store
            .list_sessions(OTHER_TENANT, None, None)
            .await
            .unwrap()
            .sessions
            .is_empty()
    );
}

/// An upsert changes status, `updatedAt` and metadata; `createdBy` and `createdAt` stay.
pub async fn put_session_keeps_created_by_and_created_at(factory: Factory) {
    let h = factory.start().await;
    let original = session_record(TENANT, SESSION, h.now());
    put(&h, &original).await;
    let update = SessionRecord {
        created_by: "someone-else".to_owned(),
        created_at: format_iso_ms(h.now() + 5_000),
        status: SessionStatus::Closed,
        updated_at: format_iso_ms(h.now() + 5_000),
        metadata: Some(obj(json!({ "title": "renamed" }))),
        ..original.clone()
    };

    put(&h, &update).await;

    let stored = h.store.get_session(TENANT, SESSION).await.unwrap().unwrap();
    let expected = SessionRecord {
        created_by: original.created_by,
        created_at: original.created_at,
        ..update
    };
    assert_eq!(stored, expected);
}

/// Empty metadata is stored as `{}` and read back as absent.
pub async fn empty_session_metadata_reads_as_absent(factory: Factory) {
    let h = factory.start().await;
    let mut record = session_record(TENANT, SESSION, h.now());
    record.metadata = Some(Default::default());

    put(&h, &record).await;

    let stored = h.store.get_session(TENANT, SESSION).await.unwrap().unwrap();
    assert_eq!(stored.metadata, None);
}

/// Newest `updatedAt` first; equal `updatedAt` by session id ascending.
pub async fn sessions_list_newest_first_with_ties_by_id(factory: Factory) {
    let h = factory.start().await;
    let t = h.now();
    put(&h, &session_record(TENANT, "b-old", t)).await;
    put(&h, &session_record(TENANT, "c-tie", t + 10)).await;
    put(&h, &session_record(TENANT, "a-tie", t + 10)).await;
    put(&h, &session_record(TENANT, "d-new", t + 20)).await;

    let page = list(&h, None, None).await;

    assert_eq!(ids(&page), vec!["d-new", "a-tie", "c-tie", "b-old"]);
    assert_eq!(page.next_cursor, None);
}

/// Following `next_cursor` visits every session once, in order, and the last page has none.
pub async fn session_list_pages_with_a_cursor(factory: Factory) {
    let h = factory.start().await;
    let mut expected = put_numbered(&h, 5).await;
    expected.reverse();

    let first = list(&h, None, Some(2)).await;
    let second = list(&h, first.next_cursor.as_deref(), Some(2)).await;
    let third = list(&h, second.next_cursor.as_deref(), Some(2)).await;

    assert_eq!(ids(&first), expected[0..2]);
    assert_eq!(ids(&second), expected[2..4]);
    assert_eq!(ids(&third), expected[4..5]);
    assert!(first.next_cursor.is_some() && second.next_cursor.is_some());
    assert_eq!(third.next_cursor, None);
}

/// A page that ends exactly at the last session has no cursor.
pub async fn session_list_exact_last_page_has_no_cursor(factory: Factory) {
    let h = factory.start().await;
    put_numbered(&h, 2).await;

    let page = list(&h, None, Some(2)).await;

    assert_eq!(page.sessions.len(), 2);
    assert_eq!(page.next_cursor, None);
}

/// Without a limit a page holds 50 sessions.
pub async fn session_list_defaults_to_50(factory: Factory) {
    let h = factory.start().await;
    put_numbered(&h, u64::from(DEFAULT_SESSION_PAGE) + 1).await;

    let first = list(&h, None, None).await;
    let rest = list(&h, first.next_cursor.as_deref(), None).await;

    assert_eq!(first.sessions.len(), DEFAULT_SESSION_PAGE as usize);
    assert_eq!(ids(&rest), vec!["session-00"]);
    assert_eq!(rest.next_cursor, None);
}

pub async fn session_list_limit_must_be_between_1_and_100(factory: Factory) {
    let h = factory.start().await;
    put_numbered(&h, 1).await;

    for limit in [0, MAX_SESSION_PAGE + 1] {
        let page = h.store.list_sessions(TENANT, None, Some(limit)).await;
        assert!(
            matches!(page, Err(crate::StoreError::InvalidArgument(_))),
            "limit {limit} gave {page:?}"
        );
    }
    assert_eq!(list(&h, None, Some(1)).await.sessions.len(), 1);
    assert_eq!(
        list(&h, None, Some(MAX_SESSION_PAGE)).await.sessions.len(),
        1
    );
}

pub async fn session_list_rejects_a_cursor_it_did_not_issue(factory: Factory) {
    let h = factory.start().await;
    put_numbered(&h, 3).await;

    for cursor in ["not-a-cursor", "-1", "1.5"] {
        let page = h.store.list_sessions(TENANT, Some(cursor), Some(1)).await;
        expect_invalid(page, "Session list cursor is invalid");
    }
}

/// Case 53: an open store reports ready.
pub async fn open_store_is_healthy(factory: Factory) {
    let h = factory.start().await;

    let health = h.store.health_check().await;

    assert!(health.ready, "{health:?}");
}

/// Active sessions of every tenant, in (tenant, session) order, paged by the last key; closed
/// sessions are left out.
pub async fn active_sessions_are_listed_across_tenants_in_key_order(factory: Factory) {
    let h = factory.start().await;
    for (tenant, session) in [
        (OTHER_TENANT, "b"),
        (TENANT, "b"),
        (TENANT, "a"),
        (OTHER_TENANT, "a"),
    ] {
        put(&h, &session_record(tenant, session, h.now())).await;
    }
    let mut closed = session_record(TENANT, "c", h.now());
    closed.status = SessionStatus::Closed;
    put(&h, &closed).await;

    let all = h.store.list_active_sessions(None, 100).await.unwrap();
    let mut expected: Vec<(String, String)> = [
        (OTHER_TENANT, "a"),
        (OTHER_TENANT, "b"),
        (TENANT, "a"),
        (TENANT, "b"),
    ]
    .iter()
    .map(|(t, s)| ((*t).to_owned(), (*s).to_owned()))
    .collect();
    expected.sort();
    assert_eq!(all, expected);
    let first = h.store.list_active_sessions(None, 3).await.unwrap();
    assert_eq!(first, expected[..3]);
    let rest = h
        .store
        .list_active_sessions(first.last().cloned(), 3)
        .await
        .unwrap();
    assert_eq!(rest, expected[3..]);
}

/// Retention: closed sessions are found by the time they were closed, oldest first, within a
/// tenant scope; a purge deletes a closed session with everything it owns, after which it
/// answers exactly like one that never existed. Active and missing sessions are left alone.
pub async fn closed_sessions_are_listed_by_age_and_purged_with_all_they_own(factory: Factory) {
    let h = factory.start().await;
    let t0 = h.now();
    let closed_at = |tenant: &str, session: &str, at: u64| closed_record(tenant, session, t0, at);
    put(&h, &closed_at(TENANT, "old", t0 + 1_000)).await;
    put(&h, &closed_at(TENANT, "new", t0 + 9_000)).await;
    put(&h, &closed_at(OTHER_TENANT, "other-old", t0)).await;
    put(&h, &session_record(TENANT, "active", t0)).await;
    // What "old" owns: events (one keyed), a durable journal and a transcript.
    h.append("old", 3).await;
    h.store
        .append_event(TENANT, stream_event("old", "keyed"), Some("key-1"))
        .await
        .unwrap();
    let accepted = draft("request_accepted");
    h.store
        .append_durable(TENANT, "old", vec![accepted], ExpectedSequence::Any, None)
        .await
        .unwrap();
    h.store
        .create_transcript(TENANT, "old", None)
        .await
        .unwrap();

    let cutoff = format_iso_ms(t0 + 5_000);
    let ids = |due: Vec<ClosedSession>| -> Vec<(String, String)> {
        due.into_iter()
            .map(|s| (s.tenant_id, s.session_id))
            .collect()
    };
    let pair = |t: &str, s: &str| (t.to_owned(), s.to_owned());
    let everyone = TenantScope::AllExcept(Vec::new());
    let due = h.store.list_closed_sessions(&everyone, &cutoff, 10).await;
    assert_eq!(
        ids(due.unwrap()),
        vec![pair(OTHER_TENANT, "other-old"), pair(TENANT, "old")]
    );
    let oldest = h.store.list_closed_sessions(&everyone, &cutoff, 1).await;
    assert_eq!(ids(oldest.unwrap()), vec![pair(OTHER_TENANT, "other-old")]);
    let others = TenantScope::AllExcept(vec![OTHER_TENANT.to_owned()]);
    let due = h.store.list_closed_sessions(&others, &cutoff, 10).await;
    assert_eq!(ids(due.unwrap()), vec![pair(TENANT, "old")]);
    let only = TenantScope::Only(OTHER_TENANT.to_owned());
    let later = format_iso_ms(t0 + 60_000);
    let due = h.store.list_closed_sessions(&only, &later, 10).await;
    assert_eq!(ids(due.unwrap()), vec![pair(OTHER_TENANT, "other-old")]);

    assert!(!h.store.purge_session(TENANT, "active").await.unwrap());
    assert!(!h.store.purge_session(TENANT, "never").await.unwrap());
    assert!(h.store.purge_session(TENANT, "old").await.unwrap());
    assert!(!h.store.purge_session(TENANT, "old").await.unwrap());
    for session in ["old", "never"] {
        assert_eq!(h.store.get_session(TENANT, session).await.unwrap(), None);
        assert_eq!(
            h.store.load_transcript(TENANT, session).await.unwrap(),
            None
        );
        assert_eq!(h.store.durable_head(TENANT, session).await.unwrap(), None);
        let keyed = h
            .store
            .get_event_by_idempotency_key(TENANT, session, "key-1")
            .await
            .unwrap();
        assert_eq!(keyed, None);
        assert_eq!(
            h.store
                .latest_event_sequence(TENANT, session)
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            h.store.event_stream_range(TENANT, session).await.unwrap(),
            None
        );
    }
    let durable = h.store.read_durable(TENANT, "old", 0, 10).await.unwrap();
    assert!(durable.events.is_empty());
    let events = h.store.read_events(TENANT, "old", 0, 10).await.unwrap();
    assert!(events.events.is_empty());
    // Nothing else was touched.
    let left = h.store.list_closed_sessions(&everyone, &later, 10).await;
    assert_eq!(
        ids(left.unwrap()),
        vec![pair(OTHER_TENANT, "other-old"), pair(TENANT, "new")]
    );
    assert!(
        h.store
            .get_session(TENANT, "active")
            .await
            .unwrap()
            .is_some()
    );
}

/// The executor's profile is kept from the first insert, like `createdBy`, and never shown.
pub async fn the_profile_is_kept_from_the_first_insert_and_never_shown(factory: Factory) {
    let h = factory.start().await;
    let first = SessionRecord {
        profile: Some("acme-coder".to_owned()),
        ..session_record(TENANT, SESSION, h.now())
    };
    put(&h, &first).await;
    let later = SessionRecord {
        profile: Some("other".to_owned()),
        ..session_record(TENANT, SESSION, h.now())
    };
    put(&h, &later).await;
    let stored = h.store.get_session(TENANT, SESSION).await.unwrap().unwrap();
    assert_eq!(stored.profile.as_deref(), Some("acme-coder"));
    let shown = serde_json::to_value(stored.descriptor()).unwrap();
    assert!(shown.get("profile").is_none(), "{shown}");
    let without = session_record(TENANT, "session-2", h.now());
    put(&h, &without).await;
    assert_eq!(
        h.store
            .get_session(TENANT, "session-2")
            .await
            .unwrap()
            .unwrap()
            .profile,
        None
    );
}

/// The closed-session budget (issue 38 item 6): per tenant, the newest closed sessions are kept
/// while their retained bytes fit the budget; the older ones are listed for purging, oldest
/// first. A large old session goes before small newer ones; active sessions are never listed;
/// the scope and the limit are honoured.
pub async fn closed_sessions_past_a_byte_budget_are_listed_oldest_first(factory: Factory) {
    let h = factory.start().await;
    let t0 = h.now();
    let closed_at = |tenant: &str, session: &str, at: u64| closed_record(tenant, session, t0, at);
    // About 190 KB of text that no store compresses much, half in the metadata of "big" and half
    // in one of its events: neither alone is past the 100 KB budget below.
    let text = crate::testing::rng::SeededRng::new(7).letters(190_000);
    let (in_metadata, in_event) = text.split_at(95_000);
    let mut big = closed_at(TENANT, "big", t0 + 1_000);
    big.status = SessionStatus::Active;
    big.metadata = Some(obj(json!({ "note": in_metadata })));
    put(&h, &big).await;
    h.store
        .append_event(TENANT, stream_event("big", in_event), None)
        .await
        .unwrap();
    big.status = SessionStatus::Closed;
    put(&h, &big).await;
    put(&h, &closed_at(TENANT, "small-1", t0 + 2_000)).await;
    put(&h, &closed_at(TENANT, "small-2", t0 + 3_000)).await;
    put(&h, &closed_at(OTHER_TENANT, "other", t0 + 500)).await;
    put(&h, &session_record(TENANT, "active", t0)).await;

    let ids = |due: Vec<ClosedSession>| -> Vec<(String, String)> {
        due.into_iter()
            .map(|s| (s.tenant_id, s.session_id))
            .collect()
    };
    let pair = |t: &str, s: &str| (t.to_owned(), s.to_owned());
    let everyone = TenantScope::AllExcept(Vec::new());
    let over = |scope: TenantScope, budget: u64, limit: u32| {
        let store = &h.store;
        async move {
            ids(store
                .closed_sessions_over_budget(&scope, budget, limit)
                .await
                .unwrap())
        }
    };
    assert_eq!(
        over(everyone.clone(), 0, 10).await,
        vec![
            pair(OTHER_TENANT, "other"),
            pair(TENANT, "big"),
            pair(TENANT, "small-1"),
            pair(TENANT, "small-2")
        ]
    );
    assert_eq!(over(everyone.clone(), 0, 2).await.len(), 2);
    assert_eq!(over(everyone.clone(), u64::MAX, 10).await, Vec::new());
    // 100 KB: the two small sessions fit, the big old one does not.
    assert_eq!(
        over(everyone.clone(), 100_000, 10).await,
        vec![pair(TENANT, "big")]
    );
    assert_eq!(
        over(TenantScope::Only(OTHER_TENANT.to_owned()), 0, 10).await,
        vec![pair(OTHER_TENANT, "other")]
    );
    let others = TenantScope::AllExcept(vec![TENANT.to_owned()]);
    assert_eq!(over(others, 100_000, 10).await, Vec::new());
    // Purged, it is gone from the list.
    assert!(h.store.purge_session(TENANT, "big").await.unwrap());
    assert_eq!(over(everyone, 100_000, 10).await, Vec::new());
}

/// The operator's tenant deletion: nothing of the tenant is readable afterwards in any port, and
/// nothing of another tenant is touched.
pub async fn deleting_a_tenant_leaves_nothing_of_it_and_all_of_the_others(factory: Factory) {
    use crate::outbox::{SESSION_CLOSED, WebhookSubscription};
    let h = factory.start().await;
    let subscriptions: Vec<WebhookSubscription> = [TENANT, OTHER_TENANT]
        .iter()
        .map(|tenant| WebhookSubscription {
            tenant_id: (*tenant).to_owned(),
            endpoint_id: format!("{tenant}-hook"),
            event_types: vec![SESSION_CLOSED.to_owned()],
        })
        .collect();
    h.store
        .sync_webhook_endpoints(&subscriptions)
        .await
        .unwrap();
    for tenant in [TENANT, OTHER_TENANT] {
        h.store
            .put_session(&session_record(tenant, SESSION, h.now()))
            .await
            .unwrap();
        h.store
            .append_event(tenant, stream_event(SESSION, "hello"), Some("key-1"))
            .await
            .unwrap();
        let mut closed = stream_event(SESSION, "");
        closed.event_type = agent_runtime::protocol::EventType::SessionClosed;
        closed.data = obj(json!({"reason": "user"}));
        h.store.append_event(tenant, closed, None).await.unwrap();
        h.store
            .append_durable(tenant, SESSION, drafts(2), ExpectedSequence::Any, None)
            .await
            .unwrap();
        h.store
            .create_transcript(tenant, SESSION, None)
            .await
            .unwrap();
        h.store
            .claim_command(tenant, COMMAND, FINGERPRINT, 30_000)
            .await
            .unwrap();
        let memory = MemoryRecord {
            scope: "tenant".to_owned(),
            name: "style".to_owned(),
            description: "d".to_owned(),
            memory_type: "project".to_owned(),
            body: "tabs".to_owned(),
            updated_at_ms: 0,
        };
        h.store.save_memory(tenant, memory, 10).await.unwrap();
    }

    let deleted = h.store.delete_tenant(TENANT).await.unwrap();
    assert!(deleted >= 8, "{deleted}");

    let reads = |tenant: &'static str| {
        let store = h.store.clone();
        async move {
            (
                store.get_session(tenant, SESSION).await.unwrap().is_some(),
                store.latest_event_sequence(tenant, SESSION).await.unwrap(),
                store
                    .get_event_by_idempotency_key(tenant, SESSION, "key-1")
                    .await
                    .unwrap()
                    .is_some(),
                store.durable_head(tenant, SESSION).await.unwrap(),
                store
                    .load_transcript(tenant, SESSION)
                    .await
                    .unwrap()
                    .is_some(),
                store.command_receipt_exists(tenant, COMMAND).await.unwrap(),
                store.list_memories(tenant, "tenant").await.unwrap().len(),
                store
                    .list_webhook_deliveries(tenant, &format!("{tenant}-hook"), None, 0, 10)
                    .await
                    .unwrap()
                    .len(),
            )
        }
    };
    assert_eq!(
        reads(TENANT).await,
        (false, None, false, None, false, false, 0, 0)
    );
    assert_eq!(
        reads(OTHER_TENANT).await,
        (true, Some(2), true, Some(2), true, true, 1, 1)
    );
    let endpoints = h.store.list_webhook_endpoints().await.unwrap();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0].tenant_id, OTHER_TENANT);
    assert_eq!(
        h.store.delete_tenant(TENANT).await,
        Ok(0),
        "nothing is left"
    );
}
