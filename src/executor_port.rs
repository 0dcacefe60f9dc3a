//! The `SessionExecutor` port (docs/storage.md §5.1): what the gateway asks of whoever runs
//! sessions.
//!
//! Two implementations sit behind it: the in-process executor (`serve`) and a gRPC client to
//! remote executors (cluster). The executor's gRPC server wraps the same in-process executor, so the
//! two modes cannot drift.

use async_trait::async_trait;

use crate::protocol::command::{
    CreateSessionData, ForkSessionData, ResolvePermissionData, SessionRef, SubmitInputData,
};
use crate::protocol::content::{ModelMessage, PendingSessionInput};
use crate::protocol::result::SubmitResult;
use crate::protocol::session::HistoryProgress;
use crate::protocol::{JsonObject, Principal, ProtocolError, SessionDescriptor};
use crate::telemetry::TraceContext;

/// An accepted `input.submit`: its result, and whether the write that accepted it also
/// completed the command's receipt with that result, in which case the gateway must not complete it
/// again. Also the `data` of the cluster's `SubmitInput` reply.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Submitted {
    pub result: SubmitResult,
    pub receipt_completed: bool,
}

/// Who is asking, for which command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandContext {
    pub principal: Principal,
    pub command_id: String,
    /// The span the command runs under (the gateway's command span), if traced.
    pub trace: Option<TraceContext>,
    /// The lease of the command's receipt, unique to this execution of it; `None` for reads.
    /// The session or input a command creates takes an id derived from it, so that a process
    /// that owns its store can tell, after a crash, whether a sealed command took effect.
    pub execution_id: Option<String>,
}

/// What an executor knows of a session when it is read (docs/storage.md §5.2). `loaded` is true
/// only when this executor has the session live; an unloaded session has empty placeholders.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSnapshot {
    pub session: SessionDescriptor,
    pub messages: Vec<ModelMessage>,
    pub pending_inputs: Vec<PendingSessionInput>,
    pub loaded: bool,
    /// How far the transcript holds the session's requests, where its store keeps it; feeds
    /// the recovery cursor.
    pub history: Option<HistoryProgress>,
}

/// Runs sessions. Every method is tenant-scoped by `context.principal.tenant_id`; another tenant's
/// session answers `SESSION_NOT_FOUND` exactly like a missing one.
#[async_trait]
pub trait SessionExecutor: Send + Sync {
    async fn create(
        &self,
        context: &CommandContext,
        data: CreateSessionData,
    ) -> Result<SessionDescriptor, ProtocolError>;

    /// Never loads the session as a side effect.
    async fn read(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<SessionSnapshot, ProtocolError>;

    async fn resume(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<SessionDescriptor, ProtocolError>;

    /// Returns the new session.
    async fn fork(
        &self,
        context: &CommandContext,
        data: ForkSessionData,
    ) -> Result<SessionDescriptor, ProtocolError>;

    async fn submit(
        &self,
        context: &CommandContext,
        data: SubmitInputData,
    ) -> Result<Submitted, ProtocolError>;

    async fn abort(&self, context: &CommandContext, data: SessionRef) -> Result<(), ProtocolError>;

    /// Idempotent: closing a closed session returns it and publishes nothing (decision P4).
    async fn close(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<SessionDescriptor, ProtocolError>;

    async fn resolve_permission(
        &self,
        context: &CommandContext,
        data: ResolvePermissionData,
    ) -> Result<(), ProtocolError>;

    /// Cancels approvals and stops every session; later commands fail.
    async fn shutdown(&self);
}

/// What a sealed command left in the store, as the process that ran it finds after a crash.
#[derive(Clone, Debug, PartialEq)]
pub enum CommandEffect {
    /// Its effect was stored; this is the result `data` it answers.
    Found(JsonObject),
    /// Running it again is safe: its effect was not stored, or a repeat finds it done and
    /// answers as it would now.
    RunAgain,
}

/// Finds the effect of a command a crash left sealed (`serve`, which owns its store, asks at
/// start-up before it serves anything).
#[async_trait]
pub trait CommandEffects: Send + Sync {
    /// `execution_id` is the one the command ran with ([`CommandContext::execution_id`]);
    /// `session_id` the session it named. An error leaves the command as it is.
    async fn effect_of(
        &self,
        tenant_id: &str,
        command_type: &str,
        session_id: Option<&str>,
        execution_id: &str,
    ) -> Result<CommandEffect, String>;
}
