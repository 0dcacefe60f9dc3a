//! The receipt of an `input.submit` completed in the write that takes its effect, and the
//! journal drafts the session writes.

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::result::SubmitResult;
use agent_runtime::protocol::{JsonObject, success_value};
use agent_runtime_store::{Correlation, DurableEventDraft, ReceiptCompletion};
use serde_json::Value;

/// The completion of the command's receipt with `result`, exactly as the gateway would store it
/// (the same rendering of the same `data`); `None` for a command without a receipt.
pub(super) fn completion(
    context: &CommandContext,
    result: &SubmitResult,
) -> Option<ReceiptCompletion> {
    let lease_id = context.execution_id.clone()?;
    let Ok(Value::Object(data)) = serde_json::to_value(result) else {
        return None;
    };
    Some(ReceiptCompletion {
        command_id: context.command_id.clone(),
        lease_id,
        result: success_value(&context.command_id, data),
    })
}

/// A journal entry of `request_id`.
pub(super) fn journal_draft(event_type: &str, request_id: &str, data: Value) -> DurableEventDraft {
    let data = match data {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    DurableEventDraft {
        event_type: event_type.to_owned(),
        data,
        occurred_at: None,
        correlation: Correlation {
            request_id: Some(request_id.to_owned()),
            ..Correlation::default()
        },
    }
}
