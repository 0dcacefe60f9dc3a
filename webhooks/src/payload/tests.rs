use agent_runtime_store::outbox::*;
use serde_json::{Value, json};

use super::render;

fn delivery(event_type: &str, source: Value) -> WebhookDelivery {
    WebhookDelivery {
        delivery_id: new_delivery_id(),
        position: 1,
        tenant_id: "acme".to_owned(),
        endpoint_id: "hook".to_owned(),
        session_id: "s-1".to_owned(),
        event_type: event_type.to_owned(),
        source,
        created_at_ms: 1_767_225_600_000,
        attempts: 0,
        next_attempt_at_ms: 0,
        status: DeliveryStatus::Pending,
        last_error: None,
        finished_at_ms: None,
    }
}

fn body(delivery: &WebhookDelivery, include_content: bool) -> Value {
    serde_json::from_slice(&render(delivery, include_content)).unwrap()
}

fn asked() -> WebhookDelivery {
    delivery(
        PERMISSION_REQUESTED,
        json!({"event": {
            "protocolVersion": 1, "eventId": "e-7", "sequence": 7, "sessionId": "s-1",
            "requestId": "r-1", "occurredAt": "2026-01-01T00:00:01.000Z",
            "type": "permission.requested",
            "data": {"permissionRequestId": "p-1", "toolName": "Bash",
                     "input": {"command": "cat ~/.ssh/id_rsa"}, "title": "Run a command",
                     "message": "Run cat ~/.ssh/id_rsa?", "affectedPaths": [], "risks": []}}}),
    )
}

#[test]
fn a_permission_request_names_the_tool_and_never_its_arguments_by_default() {
    let plain = body(&asked(), false);
    assert_eq!(
        plain,
        json!({"type": "permission.requested", "timestamp": "2026-01-01T00:00:01.000Z",
               "data": {"tenantId": "acme", "sessionId": "s-1", "requestId": "r-1",
                        "sequence": 7, "permissionRequestId": "p-1", "toolName": "Bash",
                        "title": "Run a command"}})
    );
    assert!(
        !String::from_utf8(render(&asked(), false))
            .unwrap()
            .contains("id_rsa")
    );
    let full = body(&asked(), true);
    assert_eq!(full["data"]["input"]["command"], "cat ~/.ssh/id_rsa");
    assert_eq!(full["data"]["message"], "Run cat ~/.ssh/id_rsa?");
}

#[test]
fn a_completed_request_carries_its_outcome_usage_and_duration() {
    let ended = delivery(
        REQUEST_COMPLETED,
        json!({"journal": {
            "type": "request_failed", "requestId": "r-1", "sessionId": "s-1",
            "occurredAt": "2026-01-01T00:00:09.000Z",
            "data": {"subtype": "error", "turns": 3,
                     "usage": {"inputTokens": 120, "outputTokens": 40}, "durationMs": 8000,
                     "error": {"message": "the model said: secret plan", "code": "PROVIDER_FAILED"}}}}),
    );
    let plain = body(&ended, false);
    assert_eq!(
        plain,
        json!({"type": "request.completed", "timestamp": "2026-01-01T00:00:09.000Z",
               "data": {"tenantId": "acme", "sessionId": "s-1", "requestId": "r-1",
                        "outcome": "failed", "subtype": "error", "turns": 3,
                        "usage": {"inputTokens": 120, "outputTokens": 40},
                        "durationMs": 8000, "error": {"code": "PROVIDER_FAILED"}}})
    );
    assert_eq!(
        body(&ended, true)["data"]["error"]["message"],
        "the model said: secret plan"
    );
    let done = delivery(
        REQUEST_COMPLETED,
        json!({"journal": {"type": "request_completed", "requestId": "r-2",
                           "occurredAt": "2026-01-01T00:00:10.000Z", "data": {}}}),
    );
    let done = body(&done, false);
    assert_eq!(done["data"]["outcome"], "completed");
    assert_eq!(done["data"]["subtype"], "success");
}

#[test]
fn closed_sessions_and_uncertain_commands_say_what_and_where() {
    let closed = delivery(
        SESSION_CLOSED,
        json!({"event": {"sequence": 12, "sessionId": "s-1",
                         "occurredAt": "2026-01-01T00:01:00.000Z", "type": "session.closed",
                         "data": {"reason": "user"}}}),
    );
    assert_eq!(
        body(&closed, false)["data"],
        json!({"tenantId": "acme", "sessionId": "s-1", "sequence": 12, "reason": "user"})
    );
    let uncertain = delivery(
        COMMAND_UNCERTAIN,
        json!({"command": {"commandId": "c-1", "commandType": "input.submit",
                           "sessionId": null, "sealedAtMs": 1_767_225_600_000_u64,
                           "reason": "sealed command did not complete"}}),
    );
    let uncertain = body(&uncertain, false);
    assert_eq!(uncertain["timestamp"], "2026-01-01T00:00:00.000Z");
    assert_eq!(
        uncertain["data"],
        json!({"tenantId": "acme", "commandId": "c-1", "commandType": "input.submit",
               "reason": "sealed command did not complete",
               "sealedAt": "2026-01-01T00:00:00.000Z"})
    );
}
