//! The loop against a memory store and a real local receiver that fails in every way a receiver
//! can before it recovers.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::clock;
use agent_runtime::protocol::{EventType, JsonObject};
use agent_runtime::secret::Secret;
use agent_runtime::telemetry::NoTelemetry;
use agent_runtime_store::{EventLog, MemoryStore, NewEvent, StoreOptions, WebhookOutbox};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use reqwest::Url;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::*;
use crate::signature::{SignedHeaders, SigningSecret, verify};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the receiver accepted, in arrival order: (webhook-id, body).
#[derive(Default)]
struct Receiver {
    calls: AtomicUsize,
    accepted: Mutex<Vec<(String, Value)>>,
    ids_seen: Mutex<Vec<String>>,
}

/// Its first answers: the connection dropped, no answer in time, a 500; then 204 for good.
async fn flaky_receiver() -> (Url, Arc<Receiver>) {
    let receiver = Arc::new(Receiver::default());
    let app = Router::new()
        .route(
            "/hook",
            post(
                |State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes| async move {
                    let id = headers["webhook-id"].to_str().unwrap().to_owned();
                    let timestamp: i64 = headers["webhook-timestamp"]
                        .to_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    let signed = SignedHeaders {
                        id: id.clone(),
                        timestamp,
                        signature: headers["webhook-signature"].to_str().unwrap().to_owned(),
                    };
                    let secret = SigningSecret::parse(&Secret::new(SECRET)).unwrap();
                    verify(&[secret], &signed, &body, timestamp).unwrap();
                    r.ids_seen.lock().unwrap().push(id.clone());
                    match r.calls.fetch_add(1, Ordering::SeqCst) {
                        0 => panic!("the receiver drops this connection"),
                        1 => {
                            tokio::time::sleep(Duration::from_secs(2)).await;
                            StatusCode::OK.into_response()
                        }
                        2 => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                        _ => {
                            let body = serde_json::from_slice(&body).unwrap();
                            r.accepted.lock().unwrap().push((id, body));
                            StatusCode::NO_CONTENT.into_response()
                        }
                    }
                },
            ),
        )
        .with_state(Arc::clone(&receiver));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = Url::parse(&format!("http://{}/hook", listener.local_addr().unwrap())).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, receiver)
}

fn fast_options() -> DispatchOptions {
    DispatchOptions {
        poll_interval: Duration::from_millis(20),
        attempt_timeout: Duration::from_millis(500),
        retry_schedule: vec![Duration::from_millis(50); 5],
        housekeeping_interval: Duration::from_millis(100),
        ..DispatchOptions::default()
    }
}

fn endpoint_config(url: Url) -> EndpointConfig {
    EndpointConfig {
        tenant_id: "acme".to_owned(),
        endpoint: Endpoint {
            id: "tickets".to_owned(),
            url,
            secrets: vec![SigningSecret::parse(&Secret::new(SECRET)).unwrap()],
            allow_private_addresses: true,
        },
        event_types: WEBHOOK_EVENT_TYPES
            .iter()
            .map(|t| (*t).to_owned())
            .collect(),
        include_content: false,
    }
}

fn event(session_id: &str, event_type: EventType, data: Value) -> NewEvent {
    let Value::Object(data) = data else {
        unreachable!()
    };
    NewEvent {
        session_id: session_id.to_owned(),
        request_id: Some("r-1".to_owned()),
        occurred_at: "2026-01-01T00:00:00.000Z".to_owned(),
        event_type,
        data: JsonObject::from_iter(data),
    }
}

#[tokio::test]
async fn a_receiver_that_fails_times_out_and_recovers_gets_every_delivery_in_order() {
    let (url, receiver) = flaky_receiver().await;
    let store = Arc::new(MemoryStore::new(StoreOptions::default()));
    let dispatcher = Dispatcher::new(
        store.clone(),
        clock::system(),
        Arc::new(NoTelemetry),
        vec![endpoint_config(url)],
        fast_options(),
        Sender::new(fast_options().attempt_timeout),
    );
    let shutdown = CancellationToken::new();
    let task = dispatcher.start(shutdown.clone()).await.unwrap();

    // Three sessions, each asking twice and then closing: nine deliveries.
    let mut enqueued: HashMap<String, Vec<String>> = HashMap::new();
    for round in 0..3 {
        for session in ["s-1", "s-2", "s-3"] {
            let new = if round < 2 {
                let asked = json!({"permissionRequestId": format!("p-{round}"), "toolName": "Bash",
                                   "input": {"command": "ls"}, "message": "May I?"});
                event(session, EventType::PermissionRequested, asked)
            } else {
                event(session, EventType::SessionClosed, json!({"reason": "user"}))
            };
            store.append_event("acme", new, None).await.unwrap();
        }
    }
    for delivery in store
        .list_webhook_deliveries("acme", "tickets", None, 0, 100)
        .await
        .unwrap()
    {
        enqueued
            .entry(delivery.session_id)
            .or_default()
            .push(delivery.delivery_id);
    }
    assert_eq!(enqueued.values().map(Vec::len).sum::<usize>(), 9);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while receiver.accepted.lock().unwrap().len() < 9 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every delivery arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    task.await.unwrap();

    let accepted = receiver.accepted.lock().unwrap().clone();
    let mut arrived: HashMap<String, Vec<String>> = HashMap::new();
    for (id, body) in accepted.iter() {
        let session = body["data"]["sessionId"].as_str().unwrap().to_owned();
        assert!(
            body["data"].get("input").is_none(),
            "no tool arguments by default"
        );
        arrived.entry(session).or_default().push(id.clone());
    }
    assert_eq!(
        arrived, enqueued,
        "each session's deliveries arrive once each, in order"
    );
    // The three failed attempts were retried under the same ids.
    let seen = receiver.ids_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 12);
    for failed in &seen[..3] {
        assert!(accepted.iter().any(|(id, _)| id == failed));
    }
    let pending = store
        .list_webhook_deliveries("acme", "tickets", Some(DeliveryStatus::Pending), 0, 100)
        .await
        .unwrap();
    assert!(pending.is_empty(), "{pending:?}");
}

/// A receiver that answers 410 to everything.
async fn gone_receiver() -> Url {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = Url::parse(&format!("http://{}/hook", listener.local_addr().unwrap())).unwrap();
    let app = Router::new().route("/hook", post(|| async { StatusCode::GONE }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Runs a dispatcher with `options` against a receiver that always fails, one `session.closed`
/// enqueued, until `done` says so of the store.
async fn against_a_failing_receiver<F, Fut>(options: DispatchOptions, done: F) -> Arc<MemoryStore>
where
    F: Fn(Arc<MemoryStore>) -> Fut,
    Fut: Future<Output = bool>,
{
    let store = Arc::new(MemoryStore::new(StoreOptions::default()));
    let dispatcher = Dispatcher::new(
        store.clone(),
        clock::system(),
        Arc::new(NoTelemetry),
        vec![endpoint_config(gone_receiver().await)],
        options.clone(),
        Sender::new(options.attempt_timeout),
    );
    let shutdown = CancellationToken::new();
    let task = dispatcher.start(shutdown.clone()).await.unwrap();
    let closed = event("s-1", EventType::SessionClosed, json!({"reason": "user"}));
    store.append_event("acme", closed, None).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done(store.clone()).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the outbox never got there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    task.await.unwrap();
    store
}

#[tokio::test]
async fn a_spent_schedule_fails_the_delivery_for_good() {
    let options = DispatchOptions {
        retry_schedule: vec![Duration::from_millis(20); 2],
        ..fast_options()
    };
    let store = against_a_failing_receiver(options, |store| async move {
        let failed = DeliveryStatus::Failed;
        let listed = store.list_webhook_deliveries("acme", "tickets", Some(failed), 0, 10);
        !listed.await.unwrap().is_empty()
    })
    .await;
    let failed = store
        .list_webhook_deliveries("acme", "tickets", None, 0, 10)
        .await
        .unwrap();
    assert_eq!(failed[0].status, DeliveryStatus::Failed);
    assert_eq!(failed[0].attempts, 3, "the first attempt and two retries");
    assert_eq!(
        failed[0].last_error.as_deref(),
        Some("webhook endpoint tickets: answered 410")
    );
    let endpoint = &store.list_webhook_endpoints().await.unwrap()[0];
    assert!(endpoint.failing_since_ms.is_some());
    assert_eq!(endpoint.disabled_at_ms, None, "a day has not passed");
}

#[tokio::test]
async fn an_endpoint_failing_past_the_window_is_disabled_and_its_deliveries_wait() {
    let options = DispatchOptions {
        retry_schedule: vec![Duration::from_millis(20); 100],
        disable_after: Duration::from_millis(100),
        ..fast_options()
    };
    let store = against_a_failing_receiver(options, |store| async move {
        let endpoints = store.list_webhook_endpoints().await.unwrap();
        endpoints[0].disabled_at_ms.is_some()
    })
    .await;
    let waiting = store
        .list_webhook_deliveries("acme", "tickets", None, 0, 10)
        .await
        .unwrap();
    assert_eq!(waiting[0].status, DeliveryStatus::Pending);
    assert!(waiting[0].attempts >= 2, "{waiting:?}");
    let endpoint = &store.list_webhook_endpoints().await.unwrap()[0];
    assert!(
        endpoint
            .disabled_reason
            .as_deref()
            .unwrap()
            .starts_with("every attempt failed")
    );
}

/// The outbox bound at its default: a tenant whose receiver is gone keeps its newest
/// `max_pending_per_tenant` (10,000) deliveries and the older ones are dropped, oldest first.
#[tokio::test]
async fn a_tenants_outbox_is_bounded_at_the_default_cap() {
    let store = Arc::new(MemoryStore::new(StoreOptions::default()));
    let cap = DispatchOptions::default().max_pending_per_tenant;
    store
        .sync_webhook_endpoints(&[WebhookSubscription {
            tenant_id: "acme".to_owned(),
            endpoint_id: "tickets".to_owned(),
            event_types: vec![SESSION_CLOSED.to_owned()],
        }])
        .await
        .unwrap();
    let over = 25;
    for n in 0..cap + over {
        let closed = event(
            &format!("s-{n}"),
            EventType::SessionClosed,
            json!({"reason": "user"}),
        );
        store.append_event("acme", closed, None).await.unwrap();
    }
    let reaped = store.reap_webhook_deliveries(0, cap, 1_000).await.unwrap();
    assert_eq!(reaped.dropped, over);
    let stats = store.webhook_outbox_stats().await.unwrap();
    assert_eq!(stats[0].pending, cap);
    let first = store
        .list_webhook_deliveries("acme", "tickets", None, 0, 1)
        .await
        .unwrap();
    assert_eq!(
        first[0].session_id,
        format!("s-{over}"),
        "the oldest went first"
    );
}
