//! [`RemoteSession`]: one session's commands and events behind its id (`RemoteAgentSession`).

use agent_runtime::protocol::content::UserContent;
use agent_runtime::protocol::result::{AbortResult, ResolvePermissionResult, SubmitResult};
use agent_runtime::protocol::{JsonObject, SessionDescriptor};

use crate::{
    AgentClient, ClientError, CommandOptions, EventStream, EventsOptions, ForkOptions,
    PermissionDecision, SubmitOptions,
};

/// A session on the server, as created, resumed or forked.
#[derive(Clone, Debug)]
pub struct RemoteSession {
    client: AgentClient,
    descriptor: SessionDescriptor,
}

impl RemoteSession {
    pub(crate) fn new(client: AgentClient, descriptor: SessionDescriptor) -> RemoteSession {
        RemoteSession { client, descriptor }
    }

    /// A handle on a session known by id only (no request is made).
    pub fn attach(client: &AgentClient, descriptor: SessionDescriptor) -> RemoteSession {
        RemoteSession::new(client.clone(), descriptor)
    }

    pub fn session_id(&self) -> &str {
        &self.descriptor.session_id
    }

    /// The descriptor the server returned when this handle was made.
    pub fn descriptor(&self) -> &SessionDescriptor {
        &self.descriptor
    }

    pub fn client(&self) -> &AgentClient {
        &self.client
    }

    /// `input.submit`.
    pub async fn send(
        &self,
        input: impl Into<UserContent>,
        submit: SubmitOptions,
        options: CommandOptions,
    ) -> Result<SubmitResult, ClientError> {
        self.client
            .submit_input(self.session_id(), input, submit, options)
            .await
    }

    /// The session's events.
    pub fn events(&self, options: EventsOptions) -> EventStream {
        self.client.events(self.session_id(), options)
    }

    /// `request.abort`.
    pub async fn abort(&self, options: CommandOptions) -> Result<AbortResult, ClientError> {
        self.client.abort_request(self.session_id(), options).await
    }

    /// `session.close`.
    pub async fn close(&self, options: CommandOptions) -> Result<SessionDescriptor, ClientError> {
        self.client.close_session(self.session_id(), options).await
    }

    /// `session.fork`: the new session.
    pub async fn fork(
        &self,
        fork: ForkOptions,
        options: CommandOptions,
    ) -> Result<RemoteSession, ClientError> {
        self.client
            .fork_session(self.session_id(), fork, options)
            .await
    }

    /// `session.read` (raw `data`).
    pub async fn read(&self, options: CommandOptions) -> Result<JsonObject, ClientError> {
        self.client.read_session(self.session_id(), options).await
    }

    /// `permission.resolve`.
    pub async fn resolve_permission(
        &self,
        permission_request_id: &str,
        decision: PermissionDecision,
        options: CommandOptions,
    ) -> Result<ResolvePermissionResult, ClientError> {
        self.client
            .resolve_permission(self.session_id(), permission_request_id, decision, options)
            .await
    }
}
