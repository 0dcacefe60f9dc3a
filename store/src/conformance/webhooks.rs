//! The webhook outbox (docs/storage.md §11): deliveries enqueued with their cause for the endpoints
//! that want them, claimed head-of-session once at a time, retried, disabled after sustained
//! failure, redelivered under the same id, and bounded.

use agent_runtime::protocol::EventType;
use serde_json::json;

use super::Factory;
use super::support::*;
use crate::model::{DurableEventDraft, ExpectedSequence, NewEvent};
use crate::outbox::*;

const CLAIM_TTL: u64 = 30_000;
const DISABLE_AFTER: u64 = 60_000;

fn subscription(tenant_id: &str, endpoint_id: &str, types: &[&str]) -> WebhookSubscription {
    WebhookSubscription {
        tenant_id: tenant_id.to_owned(),
        endpoint_id: endpoint_id.to_owned(),
        event_types: types.iter().map(|t| (*t).to_owned()).collect(),
    }
}

fn event(session_id: &str, event_type: EventType, data: serde_json::Value) -> NewEvent {
    NewEvent {
        event_type,
        data: obj(data),
        ..stream_event(session_id, "")
    }
}

/// Its message holds a NUL: JSON escapes it (`\u0000`), and the store must still read the type.
fn permission_requested(session_id: &str) -> NewEvent {
    event(
        session_id,
        EventType::PermissionRequested,
        json!({"permissionRequestId": "p-1", "toolName": "Bash", "input": {"command": "ls"},
               "title": "Run a command", "message": "May I?\u{0}"}),
    )
}

fn session_closed(session_id: &str) -> NewEvent {
    event(
        session_id,
        EventType::SessionClosed,
        json!({"reason": "user"}),
    )
}

async fn deliveries(h: &super::Harness, tenant: &str, endpoint: &str) -> Vec<WebhookDelivery> {
    h.store
        .list_webhook_deliveries(tenant, endpoint, None, 0, 100)
        .await
        .expect("list deliveries")
}

fn kinds(deliveries: &[WebhookDelivery]) -> Vec<(&str, &str)> {
    deliveries
        .iter()
        .map(|d| (d.event_type.as_str(), d.session_id.as_str()))
        .collect()
}

pub async fn deliveries_are_enqueued_with_their_cause_for_the_endpoints_that_want_them(
    factory: Factory,
) {
    let h = factory.start().await;
    h.store
        .sync_webhook_endpoints(&[
            subscription(TENANT, "approvals", &[PERMISSION_REQUESTED, SESSION_CLOSED]),
            subscription(TENANT, "ops", &[REQUEST_COMPLETED, COMMAND_UNCERTAIN]),
            subscription(OTHER_TENANT, "all", &WEBHOOK_EVENT_TYPES),
        ])
        .await
        .unwrap();
    h.store
        .append_event(TENANT, stream_event("s-1", "hello \u{0}"), None)
        .await
        .unwrap();
    let asked = h
        .store
        .append_event(TENANT, permission_requested("s-1"), None)
        .await
        .unwrap();
    h.store
        .append_events(TENANT, "s-2", vec![session_closed("s-2")], None)
        .await
        .unwrap();
    let ended = DurableEventDraft {
        data: obj(json!({"subtype": "success", "note": "user text may hold \u{0}"})),
        ..draft("request_completed")
    };
    let journal = vec![draft("request_accepted"), ended];
    h.store
        .append_durable(TENANT, "s-1", journal, ExpectedSequence::Any, None)
        .await
        .unwrap();
    h.sealed(COMMAND, FINGERPRINT).await;
    h.store
        .abandon_command(TENANT, COMMAND, "lost with its executor")
        .await
        .unwrap();

    let approvals = deliveries(&h, TENANT, "approvals").await;
    assert_eq!(
        kinds(&approvals),
        [(PERMISSION_REQUESTED, "s-1"), (SESSION_CLOSED, "s-2")]
    );
    assert_eq!(approvals[0].source, json!({ "event": asked }));
    assert!(approvals.iter().all(|d| d.status == DeliveryStatus::Pending
        && d.attempts == 0
        && d.delivery_id.starts_with("msg_")
        && d.delivery_id.len() == 36));
    assert!(approvals[0].position < approvals[1].position);

    let ops = deliveries(&h, TENANT, "ops").await;
    assert_eq!(
        kinds(&ops),
        [(REQUEST_COMPLETED, "s-1"), (COMMAND_UNCERTAIN, "s-1")]
    );
    assert_eq!(ops[0].source["journal"]["type"], "request_completed");
    assert_eq!(ops[0].source["journal"]["data"]["subtype"], "success");
    assert_eq!(
        ops[1].source,
        json!({"command": {"commandId": COMMAND, "commandType": "input.submit",
                           "sessionId": "s-1", "sealedAtMs": h.now(),
                           "reason": "lost with its executor"}})
    );
    assert!(
        deliveries(&h, OTHER_TENANT, "all").await.is_empty(),
        "another tenant's endpoint hears nothing of this tenant"
    );
}

pub async fn claims_take_each_sessions_oldest_pending_delivery_once(factory: Factory) {
    let h = factory.start().await;
    h.store
        .sync_webhook_endpoints(&[subscription(TENANT, "hook", &WEBHOOK_EVENT_TYPES)])
        .await
        .unwrap();
    for session in ["s-1", "s-2"] {
        h.store
            .append_event(TENANT, permission_requested(session), None)
            .await
            .unwrap();
        h.store
            .append_event(TENANT, session_closed(session), None)
            .await
            .unwrap();
    }
    let claimed = h
        .store
        .claim_webhook_deliveries(10, CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|c| (
                c.delivery.session_id.as_str(),
                c.delivery.event_type.as_str()
            ))
            .collect::<Vec<_>>(),
        [("s-1", PERMISSION_REQUESTED), ("s-2", PERMISSION_REQUESTED)],
        "one head per session, oldest first"
    );
    assert!(
        h.store
            .claim_webhook_deliveries(10, CLAIM_TTL)
            .await
            .unwrap()
            .is_empty(),
        "a claimed head blocks its session and is not claimed twice"
    );

    // s-1's head is delivered: its next delivery becomes claimable.
    assert_eq!(
        h.store
            .record_webhook_attempt(&claimed[0], &AttemptOutcome::Delivered, DISABLE_AFTER)
            .await,
        Ok(true)
    );
    let next = h
        .store
        .claim_webhook_deliveries(10, CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].delivery.session_id, "s-1");
    assert_eq!(next[0].delivery.event_type, SESSION_CLOSED);

    // s-2's head fails and is retried later: not due until then.
    let retry_at = h.now() + 5_000;
    let failed = AttemptOutcome::Retry {
        error: "answered 500".to_owned(),
        at_ms: retry_at,
    };
    assert_eq!(
        h.store
            .record_webhook_attempt(&claimed[1], &failed, DISABLE_AFTER)
            .await,
        Ok(true)
    );
    assert_eq!(
        h.store
            .record_webhook_attempt(&claimed[1], &AttemptOutcome::Delivered, DISABLE_AFTER)
            .await,
        Ok(false),
        "a claim records one attempt"
    );
    assert!(
        h.store
            .claim_webhook_deliveries(10, CLAIM_TTL)
            .await
            .unwrap()
            .is_empty()
    );
    h.advance(5_000);
    let retried = h
        .store
        .claim_webhook_deliveries(10, CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(
        retried[0].delivery.delivery_id,
        claimed[1].delivery.delivery_id
    );
    assert_eq!(retried[0].delivery.attempts, 1);
    assert_eq!(
        retried[0].delivery.last_error.as_deref(),
        Some("answered 500")
    );

    // An expired claim is taken over; the stale claimer's outcome is refused.
    h.advance(CLAIM_TTL);
    let taken = h
        .store
        .claim_webhook_deliveries(10, CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(
        taken.len(),
        2,
        "both expired claims are claimable again: {taken:?}"
    );
    assert_eq!(
        h.store
            .record_webhook_attempt(&retried[0], &AttemptOutcome::Delivered, DISABLE_AFTER)
            .await,
        Ok(false)
    );
    for claim in &taken {
        assert_eq!(
            h.store
                .record_webhook_attempt(claim, &AttemptOutcome::Delivered, DISABLE_AFTER)
                .await,
            Ok(true)
        );
    }
    let s2 = h
        .store
        .claim_webhook_deliveries(10, CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(s2.len(), 1);
    assert_eq!(
        (
            s2[0].delivery.session_id.as_str(),
            s2[0].delivery.event_type.as_str()
        ),
        ("s-2", SESSION_CLOSED)
    );
    let delivered = h
        .store
        .list_webhook_deliveries(TENANT, "hook", Some(DeliveryStatus::Delivered), 0, 10)
        .await
        .unwrap();
    assert_eq!(delivered.len(), 3);
    assert!(delivered.iter().all(|d| d.finished_at_ms.is_some()));
}

pub async fn a_failing_endpoint_is_disabled_and_re_enabled_by_the_operator(factory: Factory) {
    let h = factory.start().await;
    h.store
        .sync_webhook_endpoints(&[subscription(TENANT, "hook", &[SESSION_CLOSED])])
        .await
        .unwrap();
    let fail_once = |at_ms| AttemptOutcome::Retry {
        error: "no answer".to_owned(),
        at_ms,
    };
    h.store
        .append_event(TENANT, session_closed("s-1"), None)
        .await
        .unwrap();
    let first = h
        .store
        .claim_webhook_deliveries(1, CLAIM_TTL)
        .await
        .unwrap();
    h.store
        .record_webhook_attempt(&first[0], &fail_once(h.now()), DISABLE_AFTER)
        .await
        .unwrap();
    let endpoint = &h.store.list_webhook_endpoints().await.unwrap()[0];
    assert_eq!(endpoint.failing_since_ms, Some(h.now()));
    assert_eq!(endpoint.disabled_at_ms, None);

    h.advance(DISABLE_AFTER);
    let second = h
        .store
        .claim_webhook_deliveries(1, CLAIM_TTL)
        .await
        .unwrap();
    h.store
        .record_webhook_attempt(&second[0], &fail_once(h.now()), DISABLE_AFTER)
        .await
        .unwrap();
    let endpoint = &h.store.list_webhook_endpoints().await.unwrap()[0];
    assert_eq!(endpoint.disabled_at_ms, Some(h.now()));
    assert!(
        endpoint
            .disabled_reason
            .as_deref()
            .unwrap()
            .contains("60 s")
    );

    assert!(
        h.store
            .claim_webhook_deliveries(1, CLAIM_TTL)
            .await
            .unwrap()
            .is_empty(),
        "a disabled endpoint's deliveries wait"
    );
    h.store
        .append_event(TENANT, session_closed("s-2"), None)
        .await
        .unwrap();
    assert_eq!(
        deliveries(&h, TENANT, "hook").await.len(),
        1,
        "a disabled endpoint gets no new deliveries"
    );
    let stats = h.store.webhook_outbox_stats().await.unwrap();
    assert_eq!(stats.len(), 1);
    assert!(stats[0].disabled);
    assert_eq!(stats[0].pending, 1);

    assert_eq!(
        h.store
            .set_webhook_endpoint_enabled(TENANT, "hook", true, "")
            .await,
        Ok(Some(true))
    );
    assert_eq!(
        h.store
            .set_webhook_endpoint_enabled(TENANT, "hook", true, "")
            .await,
        Ok(Some(false))
    );
    assert_eq!(
        h.store
            .set_webhook_endpoint_enabled(OTHER_TENANT, "hook", true, "")
            .await,
        Ok(None)
    );
    let endpoint = &h.store.list_webhook_endpoints().await.unwrap()[0];
    assert_eq!(
        (endpoint.disabled_at_ms, endpoint.failing_since_ms),
        (None, None)
    );
    let resumed = h
        .store
        .claim_webhook_deliveries(1, CLAIM_TTL)
        .await
        .unwrap();
    assert_eq!(
        resumed[0].delivery.delivery_id,
        first[0].delivery.delivery_id
    );

    assert_eq!(
        h.store
            .set_webhook_endpoint_enabled(TENANT, "hook", false, "paused by the operator")
            .await,
        Ok(Some(true))
    );
    let endpoint = &h.store.list_webhook_endpoints().await.unwrap()[0];
    assert_eq!(
        endpoint.disabled_reason.as_deref(),
        Some("paused by the operator")
    );
}

pub async fn redelivery_keeps_the_id_and_reaping_bounds_the_outbox(factory: Factory) {
    let h = factory.start().await;
    h.store
        .sync_webhook_endpoints(&[subscription(TENANT, "hook", &[SESSION_CLOSED])])
        .await
        .unwrap();
    for session in ["s-1", "s-2", "s-3", "s-4"] {
        h.store
            .append_event(TENANT, session_closed(session), None)
            .await
            .unwrap();
    }
    let claimed = h
        .store
        .claim_webhook_deliveries(2, CLAIM_TTL)
        .await
        .unwrap();
    h.store
        .record_webhook_attempt(&claimed[0], &AttemptOutcome::Delivered, DISABLE_AFTER)
        .await
        .unwrap();
    let gave_up = AttemptOutcome::GiveUp {
        error: "answered 410".to_owned(),
    };
    h.store
        .record_webhook_attempt(&claimed[1], &gave_up, DISABLE_AFTER)
        .await
        .unwrap();
    let failed_id = &claimed[1].delivery.delivery_id;
    let stats = h.store.webhook_outbox_stats().await.unwrap();
    assert_eq!((stats[0].pending, stats[0].failed), (2, 1));
    // Enqueue times are the store's own (PostgreSQL: the database's clock).
    let oldest = deliveries(&h, TENANT, "hook").await[2].created_at_ms;
    assert_eq!(stats[0].oldest_pending_at_ms, Some(oldest));

    assert_eq!(
        h.store.redeliver_webhook(TENANT, failed_id).await,
        Ok(Some(true))
    );
    assert_eq!(
        h.store.redeliver_webhook(TENANT, failed_id).await,
        Ok(Some(false))
    );
    assert_eq!(
        h.store.redeliver_webhook(OTHER_TENANT, failed_id).await,
        Ok(None)
    );
    let again = h
        .store
        .claim_webhook_deliveries(10, CLAIM_TTL)
        .await
        .unwrap();
    assert!(again.iter().any(|c| &c.delivery.delivery_id == failed_id));

    // The delivered one is past its retention; the tenant keeps its 2 newest pending.
    h.advance(1);
    let reaped = h
        .store
        .reap_webhook_deliveries(h.now() - 1, 2, 100)
        .await
        .unwrap();
    assert_eq!(
        reaped,
        ReapedDeliveries {
            finished: 1,
            dropped: 1
        }
    );
    let left = deliveries(&h, TENANT, "hook").await;
    assert_eq!(
        left.iter()
            .map(|d| d.session_id.as_str())
            .collect::<Vec<_>>(),
        ["s-3", "s-4"]
    );
}

pub async fn endpoint_sync_updates_types_keeps_state_and_deletes_the_rest(factory: Factory) {
    let h = factory.start().await;
    h.store
        .sync_webhook_endpoints(&[
            subscription(TENANT, "kept", &[SESSION_CLOSED]),
            subscription(TENANT, "removed", &[SESSION_CLOSED]),
        ])
        .await
        .unwrap();
    h.store
        .append_event(TENANT, session_closed("s-1"), None)
        .await
        .unwrap();
    h.store
        .set_webhook_endpoint_enabled(TENANT, "kept", false, "paused")
        .await
        .unwrap();
    h.store
        .sync_webhook_endpoints(&[subscription(
            TENANT,
            "kept",
            &[SESSION_CLOSED, PERMISSION_REQUESTED],
        )])
        .await
        .unwrap();
    let endpoints = h.store.list_webhook_endpoints().await.unwrap();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0].endpoint_id, "kept");
    assert_eq!(
        endpoints[0].event_types,
        [SESSION_CLOSED, PERMISSION_REQUESTED]
    );
    assert_eq!(endpoints[0].disabled_reason.as_deref(), Some("paused"));
    assert!(deliveries(&h, TENANT, "removed").await.is_empty());
    assert_eq!(deliveries(&h, TENANT, "kept").await.len(), 1);
}
