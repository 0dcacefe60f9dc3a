//! The idempotent command pipeline (docs/protocol.md §2.0): authorise → claim → admission → seal →
//! dispatch → complete. When the tenant has a slot free at once, admission comes first and the
//! claim and its seal are one store write; a replay or a refusal then gives the slot and its
//! rate budget back, so the outcome is the same as in the order above.
//!
//! Once a command is sealed it must end in a stored result or be reported as uncertain; it is
//! never executed twice. So everything from the seal on runs in its own task: a client that hangs
//! up mid-command cancels nothing but its wait for the answer.
//!
//! Every command runs in one span (`blade.agent.server.command`, docs/protocol.md §10) that
//! continues the client's `traceparent` and is handed to the executor in the command context; its
//! log lines carry the trace id.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::{
    Command, CommandKind, CommandResult, ErrorCode, ProtocolError, command_fingerprint,
};
use agent_runtime::telemetry::{
    AdmissionReason, AdmissionRejection, AttributeValue, AuditRecord, ClaimMetric, ClaimOutcome,
    CommandMetric, Outcome, Span, SpanKind, SpanStatus, best_effort,
};
use agent_runtime::timefmt::format_iso_ms;
use agent_runtime_store::{CommandClaim, CommandTarget, StoreError};
use tracing::Instrument;

use crate::admission::{AdmissionError, AdmissionPermit, ClaimTicket};
use crate::answer::{Answer, StoredResult};
use crate::dispatch::dispatch;
use crate::state::AppState;
use crate::store_errors::to_protocol;

/// `retryAfterMs` of the answer to a claim whose outcome is unknown (same as a sealed command's).
const AMBIGUOUS_CLAIM_RETRY_AFTER_MS: u64 = 1000;

/// The span of one command at the gateway (docs/protocol.md §10).
pub const COMMAND_SPAN: &str = "blade.agent.server.command";

/// Runs one parsed command for an authenticated, validated principal and returns its answer: a
/// fresh result, or the stored result of an earlier execution (an idempotent replay, returned
/// verbatim).
pub async fn execute(
    state: &Arc<AppState>,
    mut context: CommandContext,
    command: Command,
) -> Answer {
    let mut span = Span::start(
        &state.telemetry,
        COMMAND_SPAN,
        SpanKind::Server,
        context.trace.as_ref(),
    );
    span.set(
        "blade.agent.command.type",
        AttributeValue::Str(command.command_type()),
    );
    span.set_tenant(&context.principal.tenant_id);
    context.trace = Some(span.context().clone());
    let log_span = tracing::info_span!(
        "command",
        trace_id = %span.context().trace_id_hex(),
        command_type = command.command_type(),
        command_id = %command.command_id,
    );
    let answer = run(state, context, command).instrument(log_span).await;
    if answer.is_replay() {
        span.set(
            "blade.agent.command.idempotent_replay",
            AttributeValue::Bool(true),
        );
    }
    let status = match answer.error_code() {
        Some(code) => {
            span.set("blade.agent.command.outcome", AttributeValue::Str("error"));
            span.set("error.type", AttributeValue::Str(code.as_str()));
            SpanStatus::Error
        }
        None => {
            span.set(
                "blade.agent.command.outcome",
                AttributeValue::Str("success"),
            );
            SpanStatus::Ok
        }
    };
    span.end(status);
    answer
}

async fn run(state: &Arc<AppState>, context: CommandContext, command: Command) -> Answer {
    let command_id = command.command_id.clone();
    if let Err(error) = context.principal.require_scopes(command.required_scopes()) {
        // Decision P1: echo the real command id.
        return Answer::failure(&command_id, error);
    }
    if command.kind.is_read_only() {
        return run_read(state, context, command).await;
    }
    let tenant = context.principal.tenant_id.clone();
    let ticket = match state.admission.enter_claim(&tenant) {
        Ok(ticket) => ticket,
        Err(error) => {
            let error = refuse_admission(state, &tenant, command.command_type(), error);
            return Answer::failure(&command_id, error);
        }
    };
    let claim = ClaimRequest {
        tenant,
        command_id,
        command_type: command.command_type(),
        fingerprint: command_fingerprint(&command),
        target: CommandTarget::new(command.command_type(), command.session_id()),
    };
    let audit = Audited::new(state, &context, &command);
    // A slot free now lets the claim seal in the same write (one transaction instead of two);
    // otherwise the command claims, waits for its slot, then seals.
    let ran = match state.admission.try_acquire_now(&claim.tenant) {
        Some(permit) => claim_seal_run(state, context, command, &claim, ticket, permit).await,
        None => claim_wait_seal_run(state, context, command, &claim, ticket).await,
    };
    let answer = match ran {
        Ran::Answered(answer) => answer,
        Ran::NotClaimed(outcome) => return claim.answer_unclaimed(state, outcome),
        Ran::Lost(join_error) => {
            // Not the panic's message: it may quote request data. The panic hook logged where.
            tracing::error!(command_id = %claim.command_id, panicked = join_error.is_panic(), "command task failed");
            Answer::failure(
                &claim.command_id,
                ProtocolError::command_outcome_uncertain(state.config.command_lease_ttl_ms),
            )
        }
    };
    audit.record(&answer);
    answer
}

/// What a command's claim is made of.
struct ClaimRequest {
    tenant: String,
    command_id: String,
    command_type: &'static str,
    fingerprint: String,
    target: CommandTarget,
}

/// How a mutating command went after its claim.
enum Ran {
    /// Its answer: it ran, or was refused (admission after its claim, which was released).
    Answered(Answer),
    /// The claim did not hand it over.
    NotClaimed(Unclaimed),
    /// The task running it failed; its outcome is unknown.
    Lost(tokio::task::JoinError),
}

/// A claim that did not hand the command over: a replay, a refusal, or a store error.
enum Unclaimed {
    Replay(StoredResult),
    Conflict,
    Abandoned(String),
    InProgress(u64),
    Failed(StoreError),
}

/// The lease of a claim that handed the command over, or why it did not.
fn claimed(outcome: Result<CommandClaim, StoreError>) -> Result<String, Unclaimed> {
    match outcome {
        Ok(CommandClaim::Claimed { lease_id }) => Ok(lease_id),
        Ok(CommandClaim::Completed { result }) => Err(Unclaimed::Replay(StoredResult::new(result))),
        Ok(CommandClaim::Conflict) => Err(Unclaimed::Conflict),
        Ok(CommandClaim::Abandoned { reason }) => Err(Unclaimed::Abandoned(reason)),
        Ok(CommandClaim::InProgress { retry_after_ms }) => {
            Err(Unclaimed::InProgress(retry_after_ms))
        }
        Err(error) => Err(Unclaimed::Failed(error)),
    }
}

/// The fast path: the claim seals in the same write and runs in the tracked task with the rest,
/// where a client that hangs up cannot cancel it (a sealed command nobody dispatches would answer
/// `COMMAND_IN_PROGRESS` until abandoned).
async fn claim_seal_run(
    state: &Arc<AppState>,
    context: CommandContext,
    command: Command,
    claim: &ClaimRequest,
    ticket: ClaimTicket,
    permit: AdmissionPermit,
) -> Ran {
    let task_state = Arc::clone(state);
    let (tenant, command_id) = (claim.tenant.clone(), claim.command_id.clone());
    let (fingerprint, target) = (claim.fingerprint.clone(), claim.target.clone());
    let claim_returned = Arc::new(AtomicBool::new(false));
    let returned = Arc::clone(&claim_returned);
    let task = state.commands.spawn(
        async move {
            let outcome = task_state
                .store
                .claim_and_seal_command(
                    &tenant,
                    &command_id,
                    &fingerprint,
                    task_state.config.command_lease_ttl_ms,
                    &target,
                )
                .await;
            returned.store(true, Ordering::Release);
            drop(ticket);
            match claimed(outcome) {
                Ok(lease_id) => {
                    let _permit = permit;
                    Ran::Answered(dispatch_complete(&task_state, context, command, &lease_id).await)
                }
                Err(unclaimed) => {
                    // Nothing runs: the command costs the tenant no admission.
                    permit.refund();
                    Ran::NotClaimed(unclaimed)
                }
            }
        }
        .in_current_span(),
    );
    match task.await {
        Ok(ran) => ran,
        // A claim that panics is answered as on the path under load, where it runs in the
        // handler: a 500, and the command id stays free if nothing was claimed.
        Err(join_error) if join_error.is_panic() && !claim_returned.load(Ordering::Acquire) => {
            std::panic::resume_unwind(join_error.into_panic())
        }
        Err(join_error) => Ran::Lost(join_error),
    }
}

/// The path under load: claim, wait for a slot (the one step a vanished client may cancel; the
/// guard then releases the claim so that a retry can run), then seal and run in the tracked task.
async fn claim_wait_seal_run(
    state: &Arc<AppState>,
    context: CommandContext,
    command: Command,
    claim: &ClaimRequest,
    ticket: ClaimTicket,
) -> Ran {
    let outcome = state
        .store
        .claim_command(
            &claim.tenant,
            &claim.command_id,
            &claim.fingerprint,
            state.config.command_lease_ttl_ms,
        )
        .await;
    drop(ticket);
    let lease_id = match claimed(outcome) {
        Ok(lease_id) => lease_id,
        Err(unclaimed) => return Ran::NotClaimed(unclaimed),
    };
    let release = ReleaseOnDrop {
        state: Arc::clone(state),
        tenant: claim.tenant.clone(),
        command_id: claim.command_id.clone(),
        lease_id: Some(lease_id.clone()),
    };
    let permit = match state.admission.acquire(&claim.tenant).await {
        Ok(permit) => permit,
        Err(error) => {
            let error = refuse_admission(state, &claim.tenant, claim.command_type, error);
            release.release().await;
            return Ran::Answered(Answer::failure(&claim.command_id, error));
        }
    };
    let task_state = Arc::clone(state);
    let target = claim.target.clone();
    // Tracked, so that shutdown waits for sealed commands to reach their result.
    let task = state.commands.spawn(
        async move {
            let _permit = permit;
            let answer =
                seal_dispatch_complete(&task_state, context, command, target, &lease_id, release)
                    .await;
            Ran::Answered(answer)
        }
        .in_current_span(),
    );
    task.await.unwrap_or_else(Ran::Lost)
}

impl ClaimRequest {
    /// The answer to a claim that did not hand the command over (recorded as a claim outcome,
    /// never as an executed command).
    fn answer_unclaimed(&self, state: &AppState, outcome: Unclaimed) -> Answer {
        let short_circuit = |outcome: ClaimOutcome| {
            let metric = ClaimMetric {
                tenant_id: &self.tenant,
                command_type: self.command_type,
                outcome,
            };
            best_effort(|| state.telemetry.record_claim(&metric));
        };
        let command_id = &self.command_id;
        match outcome {
            Unclaimed::Replay(stored) => {
                short_circuit(ClaimOutcome::Replayed);
                Answer::Replay(stored)
            }
            Unclaimed::Conflict => {
                short_circuit(ClaimOutcome::Refused(ErrorCode::CommandConflict));
                Answer::failure(command_id, ProtocolError::command_conflict())
            }
            Unclaimed::Abandoned(reason) => {
                short_circuit(ClaimOutcome::Refused(ErrorCode::CommandAbandoned));
                Answer::failure(command_id, ProtocolError::command_abandoned(&reason))
            }
            Unclaimed::InProgress(retry_after_ms) => {
                short_circuit(ClaimOutcome::Refused(ErrorCode::CommandInProgress));
                Answer::failure(
                    command_id,
                    ProtocolError::command_in_progress(retry_after_ms),
                )
            }
            Unclaimed::Failed(StoreError::Backend {
                retry_safe: false, ..
            }) => {
                // The claim's COMMIT outcome is unknown (it may have committed): do not guess
                // and do not run; a retry re-reads the receipt (catalogue PG-02).
                tracing::warn!(command_id = %command_id, "command claim outcome unknown; answering in progress");
                short_circuit(ClaimOutcome::Refused(ErrorCode::CommandInProgress));
                Answer::failure(
                    command_id,
                    ProtocolError::command_in_progress(AMBIGUOUS_CLAIM_RETRY_AFTER_MS),
                )
            }
            Unclaimed::Failed(error) => Answer::failure(command_id, to_protocol(&error)),
        }
    }
}

/// A read-only command runs without a receipt: it changes nothing, so a retry under the same id
/// simply reads again, and nothing of its answer (a whole transcript, a page of descriptors) is
/// kept for the command retention period. Admission applies as to every command.
async fn run_read(state: &Arc<AppState>, context: CommandContext, command: Command) -> Answer {
    let tenant = context.principal.tenant_id.clone();
    let command_id = command.command_id.clone();
    let command_type = command.command_type();
    let ticket = match state.admission.enter_claim(&tenant) {
        Ok(ticket) => ticket,
        Err(error) => {
            let error = refuse_admission(state, &tenant, command_type, error);
            return Answer::failure(&command_id, error);
        }
    };
    drop(ticket);
    let audit = Audited::new(state, &context, &command);
    let answer = match state.admission.acquire(&tenant).await {
        Ok(_permit) => match held_by_another(state, &tenant, &command_id).await {
            Some(error) => Answer::failure(&command_id, error),
            None => match dispatch(state, &context, command).await {
                Ok(dispatched) => Answer::success(&command_id, &dispatched.data),
                Err(error) => Answer::failure(&command_id, error),
            },
        },
        Err(error) => Answer::failure(
            &command_id,
            refuse_admission(state, &tenant, command_type, error),
        ),
    };
    audit.record(&answer);
    answer
}

/// Reads keep no receipt, but an id that another command's receipt holds is that command's:
/// `COMMAND_CONFLICT`, as a claim with another fingerprint answers.
async fn held_by_another(
    state: &AppState,
    tenant: &str,
    command_id: &str,
) -> Option<ProtocolError> {
    match state.store.command_receipt_exists(tenant, command_id).await {
        Ok(false) => None,
        Ok(true) => Some(ProtocolError::command_conflict()),
        Err(error) => Some(to_protocol(&error)),
    }
}

/// The protocol error of a refused admission, recorded as a rejection (never with the payload).
fn refuse_admission(
    state: &AppState,
    tenant: &str,
    command_type: &'static str,
    error: AdmissionError,
) -> ProtocolError {
    let (error, reason) = match error {
        AdmissionError::RateLimited { retry_after_ms } => (
            ProtocolError::rate_limited(retry_after_ms),
            AdmissionReason::RateLimited,
        ),
        AdmissionError::QueueFull => (ProtocolError::queue_full(), AdmissionReason::QueueFull),
    };
    let rejection = AdmissionRejection {
        tenant_id: tenant,
        command_type,
        reason,
    };
    best_effort(|| state.telemetry.record_admission_rejection(&rejection));
    error
}

/// Telemetry of one executed command (docs/protocol.md §10): recorded from after the claim, never
/// on replays or conflicts, and never with the command's payload.
struct Audited<'a> {
    state: &'a Arc<AppState>,
    started_ms: u64,
    tenant_id: String,
    subject: String,
    command_id: String,
    command_type: &'static str,
    session_id: Option<String>,
}

impl<'a> Audited<'a> {
    fn new(state: &'a Arc<AppState>, context: &CommandContext, command: &Command) -> Self {
        let session_id = match &command.kind {
            CommandKind::Initialize(_)
            | CommandKind::CreateSession(_)
            | CommandKind::ListSessions(_) => None,
            other => other.session_id().map(str::to_owned),
        };
        Self {
            state,
            started_ms: state.clock.now_ms(),
            tenant_id: context.principal.tenant_id.clone(),
            subject: context.principal.subject.clone(),
            command_id: command.command_id.clone(),
            command_type: command.command_type(),
            session_id,
        }
    }

    fn record(&self, answer: &Answer) {
        let error_code = answer.error_code();
        let outcome = if error_code.is_some() {
            Outcome::Error
        } else {
            Outcome::Success
        };
        let now = self.state.clock.now_ms();
        let telemetry = &self.state.telemetry;
        best_effort(|| {
            telemetry.record_command(&CommandMetric {
                command_type: self.command_type,
                tenant_id: self.tenant_id.clone(),
                subject: self.subject.clone(),
                duration_ms: now.saturating_sub(self.started_ms),
                outcome,
                error_code,
            })
        });
        best_effort(|| {
            telemetry.write_audit(&AuditRecord {
                occurred_at: format_iso_ms(now),
                tenant_id: self.tenant_id.clone(),
                subject: self.subject.clone(),
                command_id: self.command_id.clone(),
                command_type: self.command_type,
                session_id: self.session_id.clone(),
                outcome,
                error_code,
            })
        });
    }
}

async fn seal_dispatch_complete(
    state: &Arc<AppState>,
    context: CommandContext,
    command: Command,
    target: CommandTarget,
    lease_id: &str,
    mut release: ReleaseOnDrop,
) -> Answer {
    let tenant = context.principal.tenant_id.clone();
    let command_id = command.command_id.clone();
    if let Err(error) = state
        .store
        .seal_command(&tenant, &command_id, lease_id, &target)
        .await
    {
        release.release().await;
        return Answer::failure(&command_id, to_protocol(&error));
    }
    // Sealed: from here on the claim must never be released.
    release.lease_id = None;
    dispatch_complete(state, context, command, lease_id).await
}

/// Runs a sealed command and stores its result (unless its effect stored it already).
async fn dispatch_complete(
    state: &Arc<AppState>,
    mut context: CommandContext,
    command: Command,
    lease_id: &str,
) -> Answer {
    let tenant = context.principal.tenant_id.clone();
    let command_id = command.command_id.clone();
    // What the command creates is named after its receipt (see `reconcile`).
    context.execution_id = Some(lease_id.to_owned());

    let result = match dispatch(state, &context, command).await {
        // Stored with its effect, in the same commit: nothing left to complete.
        Ok(dispatched) if dispatched.receipt_completed => {
            return Answer::success(&command_id, &dispatched.data);
        }
        Ok(dispatched) => CommandResult::success(&command_id, dispatched.data.to_data()),
        Err(error) if error.code == ErrorCode::CommandInProgress => {
            // The executor may or may not have run it: keep the command sealed (a retry answers
            // COMMAND_IN_PROGRESS until it is abandoned) rather than store a guess.
            return Answer::failure(&command_id, error);
        }
        // A retryable failure is never the stored outcome of a command id: a retry with the same
        // id could then never succeed.
        Err(error) if error.retryable => {
            return not_stored(state, &tenant, &command_id, lease_id, error).await;
        }
        Err(error) => CommandResult::failure(&command_id, error),
    };
    match state
        .store
        .complete_command(&tenant, &command_id, lease_id, &result.to_value())
        .await
    {
        Ok(()) => Answer::Fresh(result),
        Err(error) => {
            tracing::error!(command_id = %command_id, error = %error, "storing a command result failed; its outcome is uncertain");
            Answer::failure(
                &command_id,
                ProtocolError::command_outcome_uncertain(state.config.command_lease_ttl_ms),
            )
        }
    }
}

/// Answers a retryable dispatch failure without storing it, and reopens the command so that a
/// retry with the same id runs: a refusal made before anything ran (`OVERLOADED`: no executor,
/// the active-session cap, a process shutting down; `RATE_LIMITED`) and an `INTERNAL_ERROR`,
/// which by the one store-error mapping means that nothing of the command took effect. A failure
/// whose effect is unknown or partial is `COMMAND_IN_PROGRESS` and never comes here (the command
/// stays sealed: retries answer that until it is decided, never a guess).
async fn not_stored(
    state: &AppState,
    tenant: &str,
    command_id: &str,
    lease_id: &str,
    error: ProtocolError,
) -> Answer {
    if let Err(store_error) = state
        .store
        .reopen_sealed_command(tenant, command_id, lease_id)
        .await
    {
        tracing::warn!(command_id = %command_id, error = %store_error, "reopening a refused command failed; it stays sealed");
    }
    Answer::failure(command_id, error)
}

/// Releases an unsealed claim when the pipeline stops before sealing: at once on an admission or
/// seal failure, and from a spawned task when the client went away while queued (the drop path).
struct ReleaseOnDrop {
    state: Arc<AppState>,
    tenant: String,
    command_id: String,
    lease_id: Option<String>,
}

impl ReleaseOnDrop {
    /// Releases now, so that an immediate retry can claim the command again.
    async fn release(mut self) {
        let Some(lease_id) = self.lease_id.take() else {
            return;
        };
        if let Err(error) = self
            .state
            .store
            .release_command(&self.tenant, &self.command_id, &lease_id)
            .await
        {
            tracing::warn!(command_id = %self.command_id, error = %error, "releasing a command claim failed");
        }
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let Some(lease_id) = self.lease_id.take() else {
            return;
        };
        let state = Arc::clone(&self.state);
        let tenant = std::mem::take(&mut self.tenant);
        let command_id = std::mem::take(&mut self.command_id);
        // Release is best effort: an unreleased claim simply expires after its TTL.
        tokio::spawn(async move {
            if let Err(error) = state
                .store
                .release_command(&tenant, &command_id, &lease_id)
                .await
            {
                tracing::warn!(command_id = %command_id, error = %error, "releasing a command claim failed");
            }
        });
    }
}
