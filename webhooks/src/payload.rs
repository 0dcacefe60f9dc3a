//! The body of a webhook: `{"type", "timestamp", "data"}` (the Standard Webhooks payload shape),
//! rendered from what the outbox stored of the delivery's cause, so every attempt of one
//! delivery carries the same body.
//!
//! Prompts, answers, tool arguments and error texts stay out unless the endpoint opts in
//! (`include_content`): a receiver learns that something happened and where, and reads the
//! session through the API when it needs more.

use agent_runtime::timefmt::format_iso_ms;
use agent_runtime_store::outbox::*;
use serde_json::{Map, Value, json};

/// The JSON body of `delivery`.
pub fn render(delivery: &WebhookDelivery, include_content: bool) -> Vec<u8> {
    let (timestamp, data) = match delivery.event_type.as_str() {
        REQUEST_COMPLETED => request_completed(delivery, include_content),
        PERMISSION_REQUESTED => permission_requested(delivery, include_content),
        SESSION_CLOSED => session_closed(delivery),
        COMMAND_UNCERTAIN => command_uncertain(delivery),
        _ => (None, Map::new()),
    };
    let mut data = data;
    data.insert(
        "tenantId".to_owned(),
        Value::from(delivery.tenant_id.clone()),
    );
    let timestamp = timestamp.unwrap_or_else(|| format_iso_ms(delivery.created_at_ms));
    let body = json!({
        "type": delivery.event_type,
        "timestamp": timestamp,
        "data": data,
    });
    serde_json::to_vec(&body).expect("a JSON value always serialises")
}

type Rendered = (Option<String>, Map<String, Value>);

/// Copies the fields of `from` named in `names` that are present.
fn copy(into: &mut Map<String, Value>, from: &Value, names: &[&str]) {
    for name in names {
        if let Some(value) = from.get(name).filter(|v| !v.is_null()) {
            into.insert((*name).to_owned(), value.clone());
        }
    }
}

fn occurred_at(source: &Value) -> Option<String> {
    source
        .get("occurredAt")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// From the request's terminal journal entry (`request_completed`, `request_failed`,
/// `request_interrupted`) and the facts the executor recorded on it.
fn request_completed(delivery: &WebhookDelivery, include_content: bool) -> Rendered {
    let entry = &delivery.source["journal"];
    let facts = &entry["data"];
    let mut data = Map::new();
    data.insert(
        "sessionId".to_owned(),
        Value::from(delivery.session_id.clone()),
    );
    copy(&mut data, entry, &["requestId"]);
    let outcome = match entry["type"].as_str() {
        Some("request_completed") => "completed",
        Some("request_interrupted") => "interrupted",
        _ => "failed",
    };
    data.insert("outcome".to_owned(), Value::from(outcome));
    let subtype = if outcome == "completed" {
        "success"
    } else {
        "error"
    };
    data.insert("subtype".to_owned(), Value::from(subtype));
    copy(
        &mut data,
        facts,
        &["turns", "usage", "durationMs", "reason"],
    );
    if let Some(code) = facts["error"].get("code").filter(|c| !c.is_null()) {
        let mut error = Map::new();
        error.insert("code".to_owned(), code.clone());
        if include_content {
            copy(&mut error, &facts["error"], &["message"]);
        }
        data.insert("error".to_owned(), Value::Object(error));
    }
    (occurred_at(entry), data)
}

/// From the `permission.requested` event: who asks for what, without the tool's arguments.
fn permission_requested(delivery: &WebhookDelivery, include_content: bool) -> Rendered {
    let event = &delivery.source["event"];
    let asked = &event["data"];
    let mut data = Map::new();
    copy(&mut data, event, &["sessionId", "requestId", "sequence"]);
    copy(
        &mut data,
        asked,
        &["permissionRequestId", "toolName", "title", "kind"],
    );
    if include_content {
        copy(
            &mut data,
            asked,
            &["message", "input", "affectedPaths", "risks"],
        );
    }
    (occurred_at(event), data)
}

fn session_closed(delivery: &WebhookDelivery) -> Rendered {
    let event = &delivery.source["event"];
    let mut data = Map::new();
    copy(&mut data, event, &["sessionId", "sequence"]);
    copy(&mut data, &event["data"], &["reason"]);
    (occurred_at(event), data)
}

/// A sealed command abandoned without a result: the reconciliation signal.
fn command_uncertain(delivery: &WebhookDelivery) -> Rendered {
    let command = &delivery.source["command"];
    let mut data = Map::new();
    copy(
        &mut data,
        command,
        &["commandId", "commandType", "sessionId", "reason"],
    );
    if let Some(sealed) = command["sealedAtMs"].as_u64() {
        data.insert("sealedAt".to_owned(), Value::from(format_iso_ms(sealed)));
    }
    (None, data)
}

#[cfg(test)]
mod tests;
