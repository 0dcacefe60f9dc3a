//! Step 7 of the pipeline: run a sealed command and build its typed result `data`.

use std::sync::Arc;

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::result::{
    AbortResult, InitializeResult, ListSessionsResult, ResolvePermissionResult, SessionResult,
    SuccessData,
};
use agent_runtime::protocol::{Command, CommandKind, ProtocolError};
use agent_runtime::timefmt::format_iso_ms;
use agent_runtime_store::StoreError;

use crate::read::read_session;
use crate::state::AppState;
use crate::store_errors::to_protocol;

/// A command's result `data`, and whether its receipt is already completed with it (the write
/// that took effect also stored the result).
pub struct Dispatched {
    pub data: SuccessData,
    pub receipt_completed: bool,
}

/// Runs the command. Any failure becomes the command's (stored) failure result.
pub async fn dispatch(
    state: &Arc<AppState>,
    context: &CommandContext,
    command: Command,
) -> Result<Dispatched, ProtocolError> {
    let executor = &state.executor;
    let session = |session| SuccessData::Session(SessionResult { session });
    let data = match command.kind {
        CommandKind::Initialize(_) => {
            SuccessData::Initialize(InitializeResult::new(format_iso_ms(state.clock.now_ms())))
        }
        CommandKind::CreateSession(data) => session(executor.create(context, data).await?),
        CommandKind::ReadSession(data) => {
            SuccessData::ReadSession(read_session(state, context, data).await?)
        }
        CommandKind::ListSessions(data) => {
            let limit = data.limit.map(|limit| limit as u32);
            let page = state
                .store
                .list_sessions(&context.principal.tenant_id, data.cursor.as_deref(), limit)
                .await
                .map_err(|error| list_error(&error))?;
            SuccessData::ListSessions(ListSessionsResult {
                sessions: page
                    .sessions
                    .iter()
                    .map(|record| record.descriptor())
                    .collect(),
                next_cursor: page.next_cursor,
            })
        }
        CommandKind::ResumeSession(data) => session(executor.resume(context, data).await?),
        CommandKind::ForkSession(data) => session(executor.fork(context, data).await?),
        CommandKind::CloseSession(data) => session(executor.close(context, data).await?),
        CommandKind::SubmitInput(data) => {
            let submitted = executor.submit(context, data).await?;
            return Ok(Dispatched {
                data: SuccessData::Submit(submitted.result),
                receipt_completed: submitted.receipt_completed,
            });
        }
        CommandKind::AbortRequest(data) => {
            let result = AbortResult::new(&data.session_id);
            executor.abort(context, data).await?;
            SuccessData::Abort(result)
        }
        CommandKind::ResolvePermission(data) => {
            let result =
                ResolvePermissionResult::new(&data.session_id, &data.permission_request_id);
            executor.resolve_permission(context, data).await?;
            SuccessData::ResolvePermission(result)
        }
    };
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
