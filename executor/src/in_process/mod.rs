//! The in-process implementation of the `SessionExecutor` port: sessions run as tasks of this
//! process, their state lives in the shared store. `serve` uses it directly; the executor's gRPC
//! server wraps the same type.

mod effects;
mod moves;
pub use effects::StoredEffects;
mod registry;
mod startup;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_runtime::clock::SharedClock;
use agent_runtime::executor_port::{
    CommandContext, ExecutorCommand, ExecutorOutput, SessionCommands, SessionExecutor,
    SessionSnapshot, Submitted,
};
use agent_runtime::ids::{SESSION_PURPOSE, effect_id};
use agent_runtime::protocol::command::{
    CreateSessionData, ForkSessionData, PermissionScope, ResolvePermissionData, SessionRef,
    SubmitInputData,
};
use agent_runtime::protocol::content::ModelMessage;
use agent_runtime::protocol::session::{HistoryProgress, HistoryProgressState};
use agent_runtime::protocol::{
    EventType, JsonObject, ProtocolError, Scope, SessionDescriptor, SessionStatus,
};
use agent_runtime::telemetry::SharedTelemetry;
use agent_runtime::timefmt::format_iso_ms;
use agent_runtime_store::{
    CommandProgress, ExecutionLease, HistoryState, SessionRecord, Store, StoreError, command_error,
};
use async_trait::async_trait;
use serde_json::{Value, json};

use self::registry::{Registry, Reservation};
use crate::approvals::{ApprovalBroker, ApprovalDecision, ApprovalScope, Resolver};
use crate::config::ExecutorConfig;
use crate::leases::SessionLeases;
use crate::profiles::{AgentProfile, Profiles};
use crate::provider::ModelProvider;
use crate::session::{
    LiveSession, SessionDeps, StopReason, entry_message, restore_interrupted_requests,
};
use crate::sink::EventSink;
use crate::tools::ToolRegistry;

/// What an in-process executor is built from.
pub struct ExecutorDeps {
    pub store: Arc<dyn Store>,
    pub sink: Arc<dyn EventSink>,
    /// The default profile's provider and tools (the top-level configuration).
    pub provider: Arc<dyn ModelProvider>,
    pub tools: ToolRegistry,
    /// Operator-defined profiles and the tenants they serve.
    pub profiles: Vec<AgentProfile>,
    pub clock: SharedClock,
    /// `NoLeases` in a single process; `WorkerLeases` in a cluster.
    pub leases: Arc<dyn SessionLeases>,
    /// Model-call spans and provider metrics.
    pub telemetry: SharedTelemetry,
}

pub struct InProcessExecutor {
    config: ExecutorConfig,
    deps: Arc<SessionDeps>,
    leases: Arc<dyn SessionLeases>,
    registry: Registry,
    shutting_down: AtomicBool,
}

impl InProcessExecutor {
    /// The tools (name, description) a new session of `tenant_id` is offered: its profile's.
    pub fn offered_tools(&self, tenant_id: &str) -> Vec<(String, String)> {
        let profile = self.deps.profiles.for_new_session(tenant_id);
        profile
            .tools
            .specs()
            .into_iter()
            .map(|spec| (spec.name, spec.description))
            .collect()
    }

    pub fn new(config: ExecutorConfig, deps: ExecutorDeps) -> Self {
        let session_deps = SessionDeps {
            store: deps.store,
            sink: deps.sink,
            profiles: Profiles::new(
                deps.provider,
                deps.tools,
                config.permissions.clone(),
                deps.profiles,
            ),
            telemetry: deps.telemetry,
            approvals: ApprovalBroker::new(config.approval_timeout),
            clock: deps.clock,
            default_max_turns: config.default_max_turns,
            pending_inputs: config.pending_input_caps(),
            max_request_tokens: config.max_request_tokens,
            event_bound: crate::session::event_bound::EventBound::new(config.max_event_bytes),
        };
        Self {
            registry: Registry::new(config.session_caps()),
            leases: deps.leases,
            config,
            deps: Arc::new(session_deps),
            shutting_down: AtomicBool::new(false),
        }
    }

    /// Drops a session whose lease was lost: another executor owns it now, so nothing more is
    /// written for it from here (the store would reject it anyway).
    pub async fn drop_lost_session(&self, tenant_id: &str, session_id: &str) {
        if let Some(session) = self.registry.remove(tenant_id, session_id) {
            session
                .stop(StopReason::Shutdown, self.config.stop_grace)
                .await;
        }
    }

    /// Loads a session this executor has just claimed (an orphan whose owner died or drained),
    /// so that its interrupted request ends and its waiting inputs run without anyone asking.
    pub async fn adopt(&self, tenant_id: &str, lease: ExecutionLease) -> Result<(), ProtocolError> {
        let session_id = lease.session_id.clone();
        let record = match self.store().get_session(tenant_id, &session_id).await {
            Ok(Some(record)) => record,
            Ok(None) => {
                self.leases.release(tenant_id, &lease, true).await;
                return Ok(());
            }
            Err(error) => {
                self.leases.release(tenant_id, &lease, false).await;
                return Err(nothing_done(&error));
            }
        };
        if record.status == SessionStatus::Closed {
            self.leases.release(tenant_id, &lease, true).await;
            return Ok(());
        }
        self.registry
            .serialized(tenant_id, &session_id, async {
                if let Some(live) = self.registry.get(tenant_id, &session_id) {
                    let same =
                        live.lease.as_ref().map(|held| &held.lease_id) == Some(&lease.lease_id);
                    if same {
                        // A command got here first and loaded it under this very lease.
                        return Ok(());
                    }
                    // Loaded under an older lease that ran out: nothing it writes is accepted
                    // any more, so it makes way for a load under the new one.
                    self.registry.remove(tenant_id, &session_id);
                    live.stop(StopReason::Shutdown, self.config.stop_grace)
                        .await;
                }
                let reservation = match self.registry.reserve(tenant_id) {
                    Ok(reservation) => reservation,
                    Err(error) => {
                        self.leases.release(tenant_id, &lease, false).await;
                        return Err(error);
                    }
                };
                self.load_with(reservation, &record, Some(lease))
                    .await
                    .map(|_| ())
            })
            .await
    }

    /// Sessions loaded here, per tenant and in total.
    pub fn loaded_sessions(&self) -> Vec<(String, String)> {
        self.registry.keys()
    }

    fn store(&self) -> &Arc<dyn Store> {
        &self.deps.store
    }

    fn now_iso(&self) -> String {
        format_iso_ms(self.deps.clock.now_ms())
    }

    fn check_running(&self) -> Result<(), ProtocolError> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(ProtocolError::internal());
        }
        Ok(())
    }

    async fn record(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<SessionRecord, ProtocolError> {
        match self.store().get_session(tenant_id, session_id).await {
            Ok(Some(record)) => Ok(record),
            Ok(None) => Err(ProtocolError::session_not_found(session_id)),
            Err(error) => Err(nothing_done(&error)),
        }
    }

    /// The live session, loading it first when it is active but not loaded here (decision P12).
    async fn ensure_loaded(
        &self,
        context: &CommandContext,
        session_id: &str,
    ) -> Result<Arc<LiveSession>, ProtocolError> {
        let tenant = &context.principal.tenant_id;
        if let Some(session) = self.registry.get(tenant, session_id) {
            return Ok(session);
        }
        let record = match self.store().get_session(tenant, session_id).await {
            Ok(Some(record)) if record.status == SessionStatus::Active => record,
            Ok(_) => return Err(ProtocolError::session_not_active(session_id)),
            Err(error) => return Err(nothing_done(&error)),
        };
        let reservation = self.registry.reserve(tenant)?;
        self.load(reservation, &record).await
    }

    /// Loads a stored session that is not loaded here, unless it is closed.
    async fn load_stored(&self, record: &SessionRecord) -> Result<Arc<LiveSession>, ProtocolError> {
        if record.status == SessionStatus::Closed {
            return Err(ProtocolError::session_closed_conflict());
        }
        let reservation = self.registry.reserve(&record.tenant_id)?;
        self.load(reservation, record).await
    }

    /// Loads a stored session into this process.
    async fn load(
        &self,
        reservation: Reservation<'_>,
        record: &SessionRecord,
    ) -> Result<Arc<LiveSession>, ProtocolError> {
        self.load_with(reservation, record, None).await
    }

    /// Loads a session, under `claimed` when the lease is already held, else taking one.
    async fn load_with(
        &self,
        reservation: Reservation<'_>,
        record: &SessionRecord,
        claimed: Option<ExecutionLease>,
    ) -> Result<Arc<LiveSession>, ProtocolError> {
        let tenant = &record.tenant_id;
        // The lease comes first: from here on every write of the session is fenced.
        let lease = match claimed {
            Some(lease) => Some(lease),
            None => self.leases.acquire(tenant, &record.session_id).await?,
        };
        match self.load_under(reservation, record, lease.clone()).await {
            Ok(session) => Ok(session),
            Err(error) => {
                // Not loaded: hand the route back so that it does not sit claimed by an executor
                // that does not run it (adoption or the next command takes it again).
                if let Some(lease) = &lease {
                    self.leases.release(tenant, lease, false).await;
                }
                Err(error)
            }
        }
    }

    /// Restores a session's transcript and interrupted requests under its lease and registers it.
    async fn load_under(
        &self,
        reservation: Reservation<'_>,
        record: &SessionRecord,
        lease: Option<ExecutionLease>,
    ) -> Result<Arc<LiveSession>, ProtocolError> {
        let tenant = &record.tenant_id;
        let fence = lease.as_ref().map(|lease| lease.fence());
        let exists = self
            .store()
            .load_transcript(tenant, &record.session_id)
            .await
            .map_err(|error| nothing_done(&error))?;
        if exists.is_none() {
            self.store()
                .create_transcript(tenant, &record.session_id, fence.as_ref())
                .await
                .map_err(|error| nothing_done(&error))?;
        }
        let session = LiveSession::new(
            tenant,
            &record.session_id,
            &record.created_by,
            lease,
            Arc::clone(&self.deps),
            Arc::clone(
                self.deps
                    .profiles
                    .for_session(tenant, record.profile.as_deref()),
            ),
        );
        restore_interrupted_requests(&session)
            .await
            .map_err(|error| nothing_done(&error))?;
        self.registry.register(reservation, Arc::clone(&session));
        Ok(session)
    }

    /// Creates the record and transcript of a new session and loads it.
    async fn start_new(
        &self,
        context: &CommandContext,
        reservation: Reservation<'_>,
        session_id: String,
        metadata: Option<JsonObject>,
        fork_of: Option<(&str, Option<&str>)>,
    ) -> Result<SessionDescriptor, ProtocolError> {
        let tenant = &context.principal.tenant_id;
        let now = self.now_iso();
        let profile = Arc::clone(self.deps.profiles.for_new_session(tenant));
        let record = SessionRecord {
            tenant_id: tenant.clone(),
            created_by: context.principal.subject.clone(),
            session_id: session_id.clone(),
            status: SessionStatus::Active,
            created_at: now.clone(),
            updated_at: now,
            metadata,
            profile: Some(profile.name.clone()),
        };
        match fork_of {
            Some((source, message_id)) => self
                .store()
                .fork_transcript(tenant, source, &session_id, message_id)
                .await
                .map(|_| ())
                .map_err(|error| match error {
                    StoreError::InvalidArgument(message) => ProtocolError::new(
                        agent_runtime::protocol::ErrorCode::InvalidCommand,
                        message,
                    ),
                    other => nothing_done(&other),
                })?,
            None => self
                .store()
                .create_transcript(tenant, &session_id, None)
                .await
                .map(|_| ())
                .map_err(|error| nothing_done(&error))?,
        }
        self.store()
            .put_session(&record)
            .await
            .map_err(|error| nothing_done(&error))?;
        let lease = self.leases.acquire(tenant, &session_id).await?;
        let session = LiveSession::new(
            tenant,
            &session_id,
            &context.principal.subject,
            lease,
            Arc::clone(&self.deps),
            profile,
        );
        self.registry.register(reservation, session);
        Ok(record.descriptor())
    }
}

#[async_trait]
impl SessionExecutor for InProcessExecutor {
    async fn execute(
        &self,
        context: &CommandContext,
        command: ExecutorCommand,
    ) -> Result<ExecutorOutput, ProtocolError> {
        command.run_on(self, context).await
    }

    async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.deps
            .approvals
            .cancel_all("Session executor is shutting down");
        let sessions = self.registry.drain();
        let grace = self.config.stop_grace;
        let stops = sessions
            .iter()
            .map(|session| session.stop(StopReason::Shutdown, grace));
        futures_util::future::join_all(stops).await;
        // Hand every session off so another executor can take it at once.
        for session in &sessions {
            if let Some(lease) = &session.lease {
                self.leases.release(&session.tenant_id, lease, false).await;
            }
        }
    }
}

#[async_trait]
impl SessionCommands for InProcessExecutor {
    async fn create(
        &self,
        context: &CommandContext,
        data: CreateSessionData,
    ) -> Result<SessionDescriptor, ProtocolError> {
        self.check_running()?;
        let tenant = &context.principal.tenant_id;
        let Some(chosen) = &context.chosen_session_id else {
            let reservation = self.registry.reserve(tenant)?;
            let session_id = effect_id(context.execution_id.as_deref(), SESSION_PURPOSE);
            return self
                .start_new(context, reservation, session_id, data.metadata, None)
                .await;
        };
        // Two first uses of one id at once (two runs of a new thread): the second finds the
        // session the first created.
        self.registry
            .serialized(tenant, chosen, async {
                let existing = self
                    .store()
                    .get_session(tenant, chosen)
                    .await
                    .map_err(|error| nothing_done(&error))?;
                if let Some(record) = existing {
                    return Ok(record.descriptor());
                }
                let reservation = self.registry.reserve(tenant)?;
                self.start_new(context, reservation, chosen.clone(), data.metadata, None)
                    .await
            })
            .await
    }

    // Stays whole: the read of an unloaded and of a loaded session side by side, so that both
    // answer the same shape.
    async fn read(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<SessionSnapshot, ProtocolError> {
        let tenant = context.principal.tenant_id.clone();
        let session_id = data.session_id;
        self.registry
            .serialized(&tenant, &session_id, async {
                let record = self.record(&tenant, &session_id).await?;
                let Some(live) = self.registry.get(&tenant, &session_id) else {
                    return Ok(SessionSnapshot {
                        session: record.descriptor(),
                        messages: Vec::new(),
                        pending_inputs: Vec::new(),
                        loaded: false,
                        history: None,
                    });
                };
                // Taken before the transcript: if the request applies its input in between, the
                // transcript has it; otherwise it is shown as waiting (below).
                let starting = live.starting_input();
                let transcript = self
                    .store()
                    .load_transcript(&tenant, &session_id)
                    .await
                    .map_err(|error| nothing_done(&error))?;
                // The waiting inputs come from the same stored transcript as the messages: an
                // input moves from one to the other in one transcript write, so the read shows it
                // exactly once. (The live list loses a steering input the moment the request takes
                // it, before the write that applies it: a read in between would show it nowhere,
                // though it was acknowledged before the read.)
                let stored_pending = transcript.as_ref().and_then(|transcript| {
                    transcript
                        .pending_inputs
                        .iter()
                        .map(|pending| {
                            crate::session::stored_pending(pending).map(|(input, _)| input)
                        })
                        .collect::<Option<Vec<_>>>()
                });
                let (messages, history) = match transcript {
                    Some(transcript) => {
                        let messages = transcript
                            .entries
                            .into_iter()
                            .filter_map(entry_message)
                            .collect();
                        let history = transcript.history_progress.map(|progress| HistoryProgress {
                            state: match progress.state {
                                HistoryState::InProgress => HistoryProgressState::InProgress,
                                HistoryState::Complete => HistoryProgressState::Complete,
                                HistoryState::Failed => HistoryProgressState::Failed,
                            },
                            covered_request_id: progress.covered_request_id,
                        });
                        (messages, history)
                    }
                    None => (Vec::new(), None),
                };
                let mut pending_inputs = stored_pending.unwrap_or_else(|| live.pending_inputs());
                // The running request's own input, acknowledged (`started`) before the request
                // applied it: waiting until the transcript has it, not nowhere (PG-10).
                if let Some(starting) = starting {
                    let applied = messages.iter().any(|message: &ModelMessage| {
                        message
                            .correlation
                            .as_ref()
                            .map(|correlation| correlation.input_id.as_str())
                            == Some(starting.input_id.as_str())
                    });
                    let listed = pending_inputs
                        .iter()
                        .any(|pending| pending.input_id == starting.input_id);
                    if !applied && !listed {
                        pending_inputs.insert(0, starting);
                    }
                }
                Ok(SessionSnapshot {
                    session: record.descriptor(),
                    messages,
                    pending_inputs,
                    loaded: true,
                    history,
                })
            })
            .await
    }

    async fn resume(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<SessionDescriptor, ProtocolError> {
        self.check_running()?;
        let tenant = context.principal.tenant_id.clone();
        let session_id = data.session_id;
        self.registry
            .serialized(&tenant, &session_id, async {
                let record = self.record(&tenant, &session_id).await?;
                // Resuming a loaded session changes nothing: in particular it does not move the
                // right to answer approvals (docs/security.md "Approvals").
                if self.registry.get(&tenant, &session_id).is_some() {
                    return Ok(record.descriptor());
                }
                self.load_stored(&record).await?;
                Ok(record.descriptor())
            })
            .await
    }

    async fn fork(
        &self,
        context: &CommandContext,
        data: ForkSessionData,
    ) -> Result<SessionDescriptor, ProtocolError> {
        self.check_running()?;
        let tenant = context.principal.tenant_id.clone();
        let source_id = data.session_id.clone();
        self.registry
            .serialized(&tenant, &source_id, async {
                let source = self.record(&tenant, &source_id).await?;
                let reservation = self.registry.reserve(&tenant)?;
                let metadata = data.metadata.or(source.metadata);
                self.start_new(
                    context,
                    reservation,
                    effect_id(context.execution_id.as_deref(), SESSION_PURPOSE),
                    metadata,
                    Some((&source_id, data.message_id.as_deref())),
                )
                .await
            })
            .await
    }

    async fn submit(
        &self,
        context: &CommandContext,
        data: SubmitInputData,
    ) -> Result<Submitted, ProtocolError> {
        self.check_running()?;
        // An operator's ceiling on what a client may spend on one request (RES-11).
        let limit = self.config.max_turns_limit;
        if let Some(asked) = data.max_turns.filter(|&asked| asked > limit) {
            return Err(ProtocolError::new(
                agent_runtime::protocol::ErrorCode::InvalidCommand,
                format!("maxTurns {asked} is above this server's limit of {limit}"),
            ));
        }
        let tenant = context.principal.tenant_id.clone();
        let session_id = data.session_id.clone();
        self.registry
            .serialized(&tenant, &session_id, async {
                let session = self.ensure_loaded(context, &session_id).await?;
                session.submit(data, context).await
            })
            .await
    }

    async fn abort(&self, context: &CommandContext, data: SessionRef) -> Result<(), ProtocolError> {
        self.check_running()?;
        let tenant = context.principal.tenant_id.clone();
        let session_id = data.session_id;
        self.registry
            .serialized(&tenant, &session_id, async {
                let session = self.ensure_loaded(context, &session_id).await?;
                session.abort();
                Ok(())
            })
            .await
    }

    async fn close(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<SessionDescriptor, ProtocolError> {
        let tenant = context.principal.tenant_id.clone();
        let session_id = data.session_id;
        self.registry
            .serialized(&tenant, &session_id, async {
                let mut record = self.record(&tenant, &session_id).await?;
                if record.status == SessionStatus::Closed {
                    // Decision P4: closing twice changes nothing and publishes nothing.
                    return Ok(record.descriptor());
                }
                // Load it if needed: an interrupted request then still gets its terminal
                // event, and in a cluster the close is written under this executor's fence.
                let live = self.ensure_loaded(context, &session_id).await?;
                self.registry.remove(&tenant, &session_id);
                live.stop(StopReason::SessionClosed, self.config.stop_grace)
                    .await;
                record.status = SessionStatus::Closed;
                record.updated_at = self.now_iso();
                self.store()
                    .put_session(&record)
                    .await
                    .map_err(|error| part_done(&error))?;
                let closed = agent_runtime_store::NewEvent {
                    session_id: session_id.clone(),
                    request_id: None,
                    occurred_at: self.now_iso(),
                    event_type: EventType::SessionClosed,
                    data: object(json!({ "reason": "user" })),
                };
                let fence = live.lease.as_ref().map(|lease| lease.fence());
                self.deps
                    .sink
                    .publish(&tenant, closed, fence.as_ref())
                    .await
                    .map_err(|error| part_done(&error))?;
                if let Some(lease) = &live.lease {
                    self.leases.release(&tenant, lease, true).await;
                }
                // Nothing of a closed session runs again: its workspace goes (TOOL-23).
                live.profile.tools.remove_workspace(&tenant, &session_id);
                Ok(record.descriptor())
            })
            .await
    }

    async fn resolve_permission(
        &self,
        context: &CommandContext,
        data: ResolvePermissionData,
    ) -> Result<(), ProtocolError> {
        let decision = ApprovalDecision {
            approved: data.approved,
            reason: data.reason.clone(),
            scope: data.scope.map(|scope| match scope {
                PermissionScope::Once => ApprovalScope::Once,
                PermissionScope::Session => ApprovalScope::Session,
            }),
        };
        let resolver = Resolver {
            subject: &context.principal.subject,
            admin: context.principal.scopes.contains(&Scope::SessionAdmin),
        };
        let resolved = self.deps.approvals.resolve(
            &context.principal.tenant_id,
            &data.session_id,
            resolver,
            &data.permission_request_id,
            decision,
        );
        if resolved {
            Ok(())
        } else {
            Err(ProtocolError::permission_not_pending(
                &data.permission_request_id,
            ))
        }
    }
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// A store failure before the command took any effect (a retry with the same id runs it).
fn nothing_done(error: &StoreError) -> ProtocolError {
    command_error(error, CommandProgress::NothingDone)
}

/// A store failure after part of the command took effect (uncertain: it stays sealed).
fn part_done(error: &StoreError) -> ProtocolError {
    command_error(error, CommandProgress::PartDone)
}
