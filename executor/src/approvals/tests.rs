use std::time::Duration;

use super::*;

fn subject(subject: &str) -> Resolver<'_> {
    Resolver {
        subject,
        admin: false,
    }
}

fn request(id: &str, subject: &str) -> ApprovalRequest {
    ApprovalRequest {
        tenant_id: "tenant-a".to_owned(),
        session_id: "session-1".to_owned(),
        subject: subject.to_owned(),
        permission_request_id: id.to_owned(),
        request_id: Some("request-1".to_owned()),
    }
}

fn approve(scope: Option<ApprovalScope>) -> ApprovalDecision {
    ApprovalDecision {
        approved: true,
        reason: None,
        scope,
    }
}

async fn published() -> Result<(), String> {
    Ok(())
}

/// Starts a request in the background and waits until it is pending.
async fn start(
    broker: &ApprovalBroker,
    request: ApprovalRequest,
) -> tokio::task::JoinHandle<Result<ApprovalDecision, ApprovalFailure>> {
    let (tenant, session) = (request.tenant_id.clone(), request.session_id.clone());
    let task = {
        let broker = broker.clone();
        tokio::spawn(async move { broker.request(request, published()).await })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while broker.pending_count(&tenant, &session) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "request never became pending"
        );
        tokio::task::yield_now().await;
    }
    task
}

#[tokio::test]
async fn item_39_the_tool_receives_exactly_the_decision() {
    let broker = ApprovalBroker::new(DEFAULT_APPROVAL_TIMEOUT);
    let task = start(&broker, request("permission-1", "user-a")).await;
    let decision = approve(Some(ApprovalScope::Session));
    assert!(broker.resolve(
        "tenant-a",
        "session-1",
        subject("user-a"),
        "permission-1",
        decision.clone()
    ));
    assert_eq!(task.await.unwrap(), Ok(decision));
}

#[tokio::test]
async fn item_40_another_tenant_cannot_resolve_and_cancel_session_rejects_the_tool() {
    let broker = ApprovalBroker::new(DEFAULT_APPROVAL_TIMEOUT);
    let task = start(&broker, request("permission-1", "user-a")).await;
    assert!(!broker.resolve(
        "tenant-b",
        "session-1",
        subject("user-a"),
        "permission-1",
        approve(None)
    ));
    broker.cancel_session("tenant-a", "session-1", "Session closed");
    assert_eq!(
        task.await.unwrap(),
        Err(ApprovalFailure::Cancelled("Session closed".to_owned()))
    );
}

#[tokio::test]
async fn item_41_aborting_the_request_rejects_the_tool_with_the_reason() {
    let broker = ApprovalBroker::new(DEFAULT_APPROVAL_TIMEOUT);
    let task = start(&broker, request("permission-1", "user-a")).await;
    broker.cancel_request("tenant-a", "session-1", "request-1", "Request aborted");
    assert_eq!(
        task.await.unwrap(),
        Err(ApprovalFailure::Cancelled("Request aborted".to_owned()))
    );
}

#[tokio::test(start_paused = true)]
async fn item_42_timeout_rejects_and_the_id_cannot_be_requested_again() {
    let broker = ApprovalBroker::new(Duration::from_millis(5));
    let outcome = broker
        .request(request("permission-1", "user-a"), published())
        .await;
    assert_eq!(
        outcome,
        Err(ApprovalFailure::TimedOut("permission-1".to_owned()))
    );
    let again = broker
        .request(request("permission-1", "user-a"), published())
        .await;
    assert_eq!(
        again,
        Err(ApprovalFailure::AlreadyPending("permission-1".to_owned()))
    );
}

#[tokio::test]
async fn item_43_a_failed_publish_rejects_and_leaves_nothing_pending() {
    let broker = ApprovalBroker::new(DEFAULT_APPROVAL_TIMEOUT);
    let outcome = broker
        .request(request("permission-1", "user-a"), async {
            Err("store unavailable".to_owned())
        })
        .await;
    assert_eq!(
        outcome,
        Err(ApprovalFailure::PublishFailed(
            "store unavailable".to_owned()
        ))
    );
    assert!(!broker.resolve(
        "tenant-a",
        "session-1",
        subject("user-a"),
        "permission-1",
        approve(None)
    ));
}

#[tokio::test]
async fn item_44_only_the_owner_resolves_once_and_the_id_is_consumed() {
    let broker = ApprovalBroker::new(DEFAULT_APPROVAL_TIMEOUT);
    let task = start(&broker, request("permission-1", "owner-a")).await;
    assert!(!broker.resolve(
        "tenant-a",
        "session-1",
        subject("attacker"),
        "permission-1",
        approve(None)
    ));
    assert!(broker.resolve(
        "tenant-a",
        "session-1",
        subject("owner-a"),
        "permission-1",
        approve(None)
    ));
    assert_eq!(task.await.unwrap(), Ok(approve(None)));
    assert!(!broker.resolve(
        "tenant-a",
        "session-1",
        subject("owner-a"),
        "permission-1",
        approve(None)
    ));
    let again = broker
        .request(request("permission-1", "owner-a"), published())
        .await;
    assert_eq!(
        again,
        Err(ApprovalFailure::AlreadyPending("permission-1".to_owned()))
    );
}

#[tokio::test]
async fn dropping_the_waiting_tool_withdraws_the_approval() {
    let broker = ApprovalBroker::new(DEFAULT_APPROVAL_TIMEOUT);
    let task = start(&broker, request("permission-1", "user-a")).await;
    task.abort();
    let _ = task.await;
    assert_eq!(broker.pending_count("tenant-a", "session-1"), 0);
    assert!(!broker.resolve(
        "tenant-a",
        "session-1",
        subject("user-a"),
        "permission-1",
        approve(None)
    ));
}

#[tokio::test]
async fn shutdown_cancels_every_approval() {
    let broker = ApprovalBroker::new(DEFAULT_APPROVAL_TIMEOUT);
    let first = start(&broker, request("permission-1", "user-a")).await;
    let mut other = request("permission-2", "user-a");
    other.session_id = "session-2".to_owned();
    let second = start(&broker, other).await;
    broker.cancel_all("Session executor is shutting down");
    for task in [first, second] {
        assert_eq!(
            task.await.unwrap(),
            Err(ApprovalFailure::Cancelled(
                "Session executor is shutting down".to_owned()
            ))
        );
    }
}

#[tokio::test]
async fn an_admin_of_the_tenant_answers_any_approval_of_its_tenant() {
    let broker = ApprovalBroker::new(DEFAULT_APPROVAL_TIMEOUT);
    let task = start(&broker, request("permission-1", "owner-a")).await;
    let admin = Resolver {
        subject: "admin",
        admin: true,
    };
    // The tenant is still part of the key: an admin elsewhere finds nothing.
    assert!(!broker.resolve(
        "tenant-b",
        "session-1",
        admin,
        "permission-1",
        approve(None)
    ));
    assert!(broker.resolve(
        "tenant-a",
        "session-1",
        admin,
        "permission-1",
        approve(None)
    ));
    assert_eq!(task.await.unwrap(), Ok(approve(None)));
}
