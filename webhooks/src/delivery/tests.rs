//! Attempts against a real local receiver (axum on loopback, so the endpoints are exempt from
//! the private-address rule unless a test says otherwise).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::secret::Secret;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;

use super::*;
use crate::signature::{SignedHeaders, verify};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What the receiver was sent: (path, headers, body).
type Seen = Arc<Mutex<Vec<(String, HeaderMap, Bytes)>>>;

async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let record = |path: &'static str, answer: fn() -> axum::response::Response| {
        post(
            move |State(seen): State<Seen>, headers: HeaderMap, body: Bytes| async move {
                seen.lock().unwrap().push((path.to_owned(), headers, body));
                if path == "/slow" {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                answer()
            },
        )
    };
    let app = Router::new()
        .route(
            "/ok",
            record("/ok", || StatusCode::NO_CONTENT.into_response()),
        )
        .route(
            "/fail",
            record("/fail", || {
                StatusCode::INTERNAL_SERVER_ERROR.into_response()
            }),
        )
        .route("/slow", record("/slow", || StatusCode::OK.into_response()))
        .route(
            "/redirect",
            record("/redirect", || {
                (StatusCode::FOUND, [(header::LOCATION, "/ok")]).into_response()
            }),
        )
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

fn endpoint(url: &str, allow_private_addresses: bool) -> Endpoint {
    Endpoint {
        id: "ops-alerts".to_owned(),
        url: Url::parse(url).unwrap(),
        secrets: vec![SigningSecret::parse(&Secret::new(SECRET)).unwrap()],
        allow_private_addresses,
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn a_delivery_is_posted_signed_and_verifies() {
    let (base, seen) = receiver().await;
    let sender = Sender::new(Duration::from_secs(5));
    let target = endpoint(&format!("{base}/ok"), true);
    let body = br#"{"type":"session.closed"}"#;
    let sent_at = now();
    let attempt = sender.attempt(&target, "msg_one", body, sent_at).await;
    assert_eq!(attempt, Attempt::Delivered { status: 204 });

    let seen = seen.lock().unwrap();
    let (_, headers, received) = &seen[0];
    assert_eq!(received.as_ref(), body);
    assert_eq!(headers["content-type"], "application/json");
    let header = |name: &str| headers[name].to_str().unwrap().to_owned();
    let signed = SignedHeaders {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp").parse().unwrap(),
        signature: header("webhook-signature"),
    };
    assert_eq!(signed.id, "msg_one");
    assert_eq!(verify(&target.secrets, &signed, received, now()), Ok(()));
}

#[tokio::test]
async fn private_and_metadata_targets_are_refused_before_anything_is_sent() {
    let (base, seen) = receiver().await;
    let sender = Sender::new(Duration::from_secs(5));
    let loopback = sender
        .attempt(
            &endpoint(&format!("{base}/ok"), false),
            "msg_1",
            b"{}",
            now(),
        )
        .await;
    let Attempt::Failed {
        status: None,
        reason,
    } = loopback
    else {
        panic!("{loopback:?}")
    };
    assert!(reason.contains("non-public address 127.0.0.1"), "{reason}");
    assert!(
        reason.starts_with("webhook endpoint ops-alerts:"),
        "{reason}"
    );
    // Metadata endpoints stay refused with the exemption, by name and by address.
    for url in [
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://169.254.169.254/latest/meta-data/",
    ] {
        let attempt = sender
            .attempt(&endpoint(url, true), "msg_2", b"{}", now())
            .await;
        let Attempt::Failed { reason, .. } = attempt else {
            panic!("{url}: {attempt:?}")
        };
        assert!(reason.contains("metadata"), "{reason}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reached a receiver"
    );
}

#[tokio::test]
async fn redirects_errors_and_slow_receivers_fail_the_attempt() {
    let (base, seen) = receiver().await;
    let sender = Sender::new(Duration::from_millis(300));
    let attempt = |path: &str| {
        let target = endpoint(&format!("{base}{path}"), true);
        let sender = sender.clone();
        async move { sender.attempt(&target, "msg_3", b"{}", now()).await }
    };
    assert!(matches!(
        attempt("/redirect").await,
        Attempt::Failed {
            status: Some(302),
            ..
        }
    ));
    assert!(matches!(
        attempt("/fail").await,
        Attempt::Failed {
            status: Some(500),
            ..
        }
    ));
    let slow = attempt("/slow").await;
    let Attempt::Failed {
        status: None,
        reason,
    } = slow
    else {
        panic!("{slow:?}")
    };
    assert!(reason.contains("no answer within 300 ms"), "{reason}");
    let paths: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, ..)| p.clone())
        .collect();
    assert_eq!(
        paths,
        ["/redirect", "/fail", "/slow"],
        "the redirect was not followed"
    );
}

#[test]
fn retries_follow_the_stated_schedule_with_jitter_and_end_within_a_day() {
    for (retry, wait) in RETRY_SCHEDULE.iter().enumerate() {
        let delay = retry_delay(&RETRY_SCHEDULE, retry).unwrap();
        assert!(delay >= wait.mul_f64(1.0 - JITTER) && delay <= wait.mul_f64(1.0 + JITTER));
    }
    assert_eq!(retry_delay(&RETRY_SCHEDULE, RETRY_SCHEDULE.len()), None);
    let total: Duration = RETRY_SCHEDULE.iter().sum();
    assert!(total < Duration::from_secs(24 * 3600), "{total:?}");
}
