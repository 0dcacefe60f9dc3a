//! The command methods of [`AgentClient`] (docs/protocol.md §2.1, §11.2) and their options.

use agent_runtime::protocol::command::{
    CreateSessionData, ForkSessionData, ListSessionsData, PermissionScope, ResolvePermissionData,
    SessionCommand, SessionRef, SubmitInputData, calls,
};
use agent_runtime::protocol::content::{Priority, UserContent};
use agent_runtime::protocol::result::{
    AbortResult, ListSessionsResult, ResolvePermissionResult, SubmitResult,
};
use agent_runtime::protocol::{JsonObject, ProtocolError, ResultData, SessionDescriptor};
use tokio_util::sync::CancellationToken;

use crate::error::ClientError;
use crate::{AgentClient, RemoteSession};

/// What every command call accepts.
#[derive(Clone, Debug, Default)]
pub struct CommandOptions {
    /// The idempotency key; a fresh nanoid when `None`. Every retry of the call reuses it, and
    /// re-sending a command with the same id returns the stored result.
    pub command_id: Option<String>,
    /// Stops the call (and its retries) when cancelled; the call ends with
    /// [`crate::ErrorKind::Cancelled`]. A command the server already received may still run.
    pub cancel: Option<CancellationToken>,
}

impl CommandOptions {
    /// Options with a chosen commandId.
    pub fn with_id(command_id: impl Into<String>) -> CommandOptions {
        CommandOptions {
            command_id: Some(command_id.into()),
            cancel: None,
        }
    }

    /// Options cancelled by `cancel`.
    pub fn cancelled_by(cancel: CancellationToken) -> CommandOptions {
        CommandOptions {
            command_id: None,
            cancel: Some(cancel),
        }
    }
}

/// `input.submit` options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    /// `now` / `next` steer a running request; `later` queues after it.
    pub priority: Option<Priority>,
    /// Only apply the input if this request is the running one.
    pub expected_request_id: Option<String>,
    /// At least 1.
    pub max_turns: Option<u64>,
}

/// `session.fork` options.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ForkOptions {
    /// Fork at this message; the whole transcript when `None`.
    pub message_id: Option<String>,
    /// The new session's metadata; the source's when `None`.
    pub metadata: Option<JsonObject>,
}

/// `session.list` options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// The `nextCursor` of the previous page.
    pub cursor: Option<String>,
    /// 1..=100.
    pub limit: Option<u64>,
}

/// The answer to a `permission.requested` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionDecision {
    pub approved: bool,
    /// At most 4096 characters.
    pub reason: Option<String>,
    /// `once` or for the rest of the `session`.
    pub scope: Option<PermissionScope>,
}

impl PermissionDecision {
    pub fn approve(scope: PermissionScope) -> PermissionDecision {
        PermissionDecision {
            approved: true,
            reason: None,
            scope: Some(scope),
        }
    }

    pub fn deny() -> PermissionDecision {
        PermissionDecision {
            approved: false,
            reason: None,
            scope: None,
        }
    }
}

fn raw(data: &JsonObject) -> Result<JsonObject, ProtocolError> {
    Ok(data.clone())
}

impl AgentClient {
    /// Sends command `C` and reads its success `data` strictly as `C`'s success type: the
    /// typed way to send any command, its data and result paired by the command table.
    pub async fn command<C: SessionCommand>(
        &self,
        data: C::Data,
        options: CommandOptions,
    ) -> Result<C::Success, ClientError> {
        self.run(C::into_kind(data), &options, C::Success::from_data)
            .await
    }

    /// `session.create`: a new session with optional metadata.
    pub async fn create_session(
        &self,
        metadata: Option<JsonObject>,
        options: CommandOptions,
    ) -> Result<RemoteSession, ClientError> {
        let data = CreateSessionData { metadata };
        let created = self.command::<calls::CreateSession>(data, options).await?;
        Ok(RemoteSession::new(self.clone(), created.session))
    }

    /// `session.resume`: loads a stored session so that it accepts input.
    pub async fn resume_session(
        &self,
        session_id: &str,
        options: CommandOptions,
    ) -> Result<RemoteSession, ClientError> {
        let data = SessionRef::new(session_id);
        let resumed = self.command::<calls::ResumeSession>(data, options).await?;
        Ok(RemoteSession::new(self.clone(), resumed.session))
    }

    /// `session.fork`: a new session with the source's transcript (up to `message_id`).
    pub async fn fork_session(
        &self,
        session_id: &str,
        fork: ForkOptions,
        options: CommandOptions,
    ) -> Result<RemoteSession, ClientError> {
        let data = ForkSessionData {
            session_id: session_id.to_owned(),
            message_id: fork.message_id,
            metadata: fork.metadata,
        };
        let forked = self.command::<calls::ForkSession>(data, options).await?;
        Ok(RemoteSession::new(self.clone(), forked.session))
    }

    /// `session.read`: the raw result `data` (like the reference client, not schema-checked, so
    /// that a server adding e.g. `historyProgress` stays readable).
    /// `agent_runtime::protocol::result::ReadSessionResult::from_data` gives the strict typed
    /// view.
    pub async fn read_session(
        &self,
        session_id: &str,
        options: CommandOptions,
    ) -> Result<JsonObject, ClientError> {
        let kind = calls::ReadSession::into_kind(SessionRef::new(session_id));
        self.run(kind, &options, raw).await
    }

    /// `session.list`: one page, newest first.
    pub async fn list_sessions(
        &self,
        list: ListOptions,
        options: CommandOptions,
    ) -> Result<ListSessionsResult, ClientError> {
        let data = ListSessionsData {
            cursor: list.cursor,
            limit: list.limit,
        };
        self.command::<calls::ListSessions>(data, options).await
    }

    /// `input.submit`: starts a request, steers the running one, or queues.
    pub async fn submit_input(
        &self,
        session_id: &str,
        input: impl Into<UserContent>,
        submit: SubmitOptions,
        options: CommandOptions,
    ) -> Result<SubmitResult, ClientError> {
        let data = SubmitInputData {
            session_id: session_id.to_owned(),
            input: input.into(),
            priority: submit.priority,
            expected_request_id: submit.expected_request_id,
            max_turns: submit.max_turns,
        };
        self.command::<calls::SubmitInput>(data, options).await
    }

    /// `request.abort`: stops the running request (it ends with an `error` and a `result`).
    pub async fn abort_request(
        &self,
        session_id: &str,
        options: CommandOptions,
    ) -> Result<AbortResult, ClientError> {
        let data = SessionRef::new(session_id);
        self.command::<calls::AbortRequest>(data, options).await
    }

    /// `session.close`: the closed descriptor. The event stream then ends with `session.closed`.
    pub async fn close_session(
        &self,
        session_id: &str,
        options: CommandOptions,
    ) -> Result<SessionDescriptor, ClientError> {
        let data = SessionRef::new(session_id);
        let closed = self.command::<calls::CloseSession>(data, options).await?;
        Ok(closed.session)
    }

    /// `permission.resolve`: answers a `permission.requested` event.
    pub async fn resolve_permission(
        &self,
        session_id: &str,
        permission_request_id: &str,
        decision: PermissionDecision,
        options: CommandOptions,
    ) -> Result<ResolvePermissionResult, ClientError> {
        let data = ResolvePermissionData {
            session_id: session_id.to_owned(),
            permission_request_id: permission_request_id.to_owned(),
            approved: decision.approved,
            reason: decision.reason,
            scope: decision.scope,
        };
        self.command::<calls::ResolvePermission>(data, options)
            .await
    }
}
