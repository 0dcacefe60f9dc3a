//! Step 7 of the pipeline: run a sealed command and build its result `data`.

use std::sync::Arc;

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::{COMMAND_TYPES, Command, CommandKind, JsonObject, ProtocolError};
use agent_runtime::timefmt::format_iso_ms;
use agent_runtime_store::StoreError;
use serde_json::{Value, json};

use crate::read::read_session;
use crate::result_json::{object, to_value};
use crate::state::AppState;
use crate::store_errors::to_protocol;

/// A command's result `data`, and whether its receipt is already completed with it (the write
/// that took effect also stored the result).
pub struct Dispatched {
    pub data: JsonObject,
    pub receipt_completed: bool,
}

/// Runs the command. Any failure becomes the command's (stored) failure result.
pub async fn dispatch(
    state: &Arc<AppState>,
    context: &CommandContext,
    command: Command,
) -> Result<Dispatched, ProtocolError> {
    let executor = &state.executor;
    let data = match command.kind {
        CommandKind::Initialize(_) => Ok(initialize_result(state.clock.now_ms())),
        CommandKind::CreateSession(data) => {
            let session = executor.create(context, data).await?;
            object(json!({ "session": session }))
        }
        CommandKind::ReadSession(data) => read_session(state, context, data).await,
        CommandKind::ListSessions(data) => {
            let limit = data.limit.map(|limit| limit as u32);
            let page = state
                .store
                .list_sessions(&context.principal.tenant_id, data.cursor.as_deref(), limit)
                .await
                .map_err(|error| list_error(&error))?;
            let sessions: Vec<_> = page
                .sessions
                .iter()
                .map(|record| record.descriptor())
                .collect();
            let mut data = JsonObject::new();
            data.insert("sessions".to_owned(), to_value(&sessions)?);
            if let Some(cursor) = page.next_cursor {
                data.insert("nextCursor".to_owned(), Value::String(cursor));
            }
            Ok(data)
        }
        CommandKind::ResumeSession(data) => {
            let session = executor.resume(context, data).await?;
            object(json!({ "session": session }))
        }
        CommandKind::ForkSession(data) => {
            let session = executor.fork(context, data).await?;
            object(json!({ "session": session }))
        }
        CommandKind::CloseSession(data) => {
            let session = executor.close(context, data).await?;
            object(json!({ "session": session }))
        }
        CommandKind::SubmitInput(data) => {
            let submitted = executor.submit(context, data).await?;
            return Ok(Dispatched {
                data: object(to_value(&submitted.result)?)?,
                receipt_completed: submitted.receipt_completed,
            });
        }
        CommandKind::AbortRequest(data) => {
            let session_id = data.session_id.clone();
            executor.abort(context, data).await?;
            object(json!({ "sessionId": session_id, "aborted": true }))
        }
        CommandKind::ResolvePermission(data) => {
            let session_id = data.session_id.clone();
            let permission_request_id = data.permission_request_id.clone();
            executor.resolve_permission(context, data).await?;
            object(json!({
                "sessionId": session_id,
                "permissionRequestId": permission_request_id,
                "resolved": true,
            }))
        }
    }?;
    Ok(Dispatched {
        data,
        receipt_completed: false,
    })
}

/// Decision P5: a bad list cursor is the caller's mistake (400), not a server error.
fn list_error(error: &StoreError) -> ProtocolError {
    match error {
        StoreError::InvalidArgument(_) => ProtocolError::validation_failed(),
        other => to_protocol(other),
    }
}

fn initialize_result(now_ms: u64) -> JsonObject {
    let value = json!({
        "protocolVersion": 1,
        "commands": COMMAND_TYPES,
        "transports": ["http-sse"],
        "features": {
            "approvals": true,
            "durableEvents": true,
            "eventReplay": true,
            "idempotentCommands": true,
        },
        "serverTime": format_iso_ms(now_ms),
    });
    match value {
        Value::Object(map) => map,
        _ => unreachable!("json! of an object literal is an object"),
    }
}

// The two below shape a result the executor already produced: the command took effect, so a
// failure here is uncertain (kept sealed), never an INTERNAL_ERROR that would let it run again.
