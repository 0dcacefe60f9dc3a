//! Step 7 of the pipeline: run a sealed command and build its typed result `data`, one handler
//! method per command (the command table pairs each with its result type).

use std::sync::Arc;

use agent_runtime::executor_port::{CommandContext, SessionCommands};
use agent_runtime::protocol::command::{
    CreateSessionData, ForkSessionData, InitializeData, ListSessionsData, ResolvePermissionData,
    SessionRef, SubmitInputData,
};
use agent_runtime::protocol::result::{
    AbortResult, InitializeResult, ListSessionsResult, ReadSessionResult, ResolvePermissionResult,
    SessionResult, SubmitResult, SuccessData,
};
use agent_runtime::protocol::{Command, ProtocolError, SessionDescriptor};
use agent_runtime::session_commands::{CommandHandler, Reply, handle};
use agent_runtime::timefmt::format_iso_ms;
use agent_runtime_store::StoreError;
use async_trait::async_trait;

use crate::read::read_session;
use crate::state::AppState;
use crate::store_errors::to_protocol;

/// A command's result `data`, and whether its receipt is already completed with it (the write
/// that took effect also stored the result).
pub type Dispatched = Reply<SuccessData>;

/// Runs the command. Any failure becomes the command's (stored) failure result.
pub async fn dispatch(
    state: &Arc<AppState>,
    context: &CommandContext,
    command: Command,
) -> Result<Dispatched, ProtocolError> {
    handle(&Dispatcher { state }, context, command.kind).await
}

struct Dispatcher<'a> {
    state: &'a Arc<AppState>,
}

fn session(session: SessionDescriptor) -> Reply<SessionResult> {
    SessionResult { session }.into()
}

#[async_trait]
impl CommandHandler for Dispatcher<'_> {
    async fn initialize(
        &self,
        _context: &CommandContext,
        _data: InitializeData,
    ) -> Result<Reply<InitializeResult>, ProtocolError> {
        Ok(InitializeResult::new(format_iso_ms(self.state.clock.now_ms())).into())
    }

    async fn create_session(
        &self,
        context: &CommandContext,
        data: CreateSessionData,
    ) -> Result<Reply<SessionResult>, ProtocolError> {
        Ok(session(self.state.executor.create(context, data).await?))
    }

    async fn read_session(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<Reply<ReadSessionResult>, ProtocolError> {
        Ok(read_session(self.state, context, data).await?.into())
    }

    async fn list_sessions(
        &self,
        context: &CommandContext,
        data: ListSessionsData,
    ) -> Result<Reply<ListSessionsResult>, ProtocolError> {
        let limit = data.limit.map(|limit| limit as u32);
        let page = self
            .state
            .store
            .list_sessions(&context.principal.tenant_id, data.cursor.as_deref(), limit)
            .await
            .map_err(|error| list_error(&error))?;
        Ok(ListSessionsResult {
            sessions: page
                .sessions
                .iter()
                .map(|record| record.descriptor())
                .collect(),
            next_cursor: page.next_cursor,
        }
        .into())
    }

    async fn resume_session(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<Reply<SessionResult>, ProtocolError> {
        Ok(session(self.state.executor.resume(context, data).await?))
    }

    async fn fork_session(
        &self,
        context: &CommandContext,
        data: ForkSessionData,
    ) -> Result<Reply<SessionResult>, ProtocolError> {
        Ok(session(self.state.executor.fork(context, data).await?))
    }

    async fn close_session(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<Reply<SessionResult>, ProtocolError> {
        Ok(session(self.state.executor.close(context, data).await?))
    }

    async fn submit_input(
        &self,
        context: &CommandContext,
        data: SubmitInputData,
    ) -> Result<Reply<SubmitResult>, ProtocolError> {
        let submitted = self.state.executor.submit(context, data).await?;
        Ok(Reply {
            data: submitted.result,
            receipt_completed: submitted.receipt_completed,
        })
    }

    async fn abort_request(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<Reply<AbortResult>, ProtocolError> {
        let result = AbortResult::new(&data.session_id);
        self.state.executor.abort(context, data).await?;
        Ok(result.into())
    }

    async fn resolve_permission(
        &self,
        context: &CommandContext,
        data: ResolvePermissionData,
    ) -> Result<Reply<ResolvePermissionResult>, ProtocolError> {
        let result = ResolvePermissionResult::new(&data.session_id, &data.permission_request_id);
        self.state
            .executor
            .resolve_permission(context, data)
            .await?;
        Ok(result.into())
    }
}

/// Decision P5: a bad list cursor is the caller's mistake (400), not a server error.
fn list_error(error: &StoreError) -> ProtocolError {
    match error {
        StoreError::InvalidArgument(_) => ProtocolError::validation_failed(),
        other => to_protocol(other),
    }
}
