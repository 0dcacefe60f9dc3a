//! The idempotent command pipeline (protocol.md §2.0): authorise → claim → admission → seal →
//! dispatch → complete.
//!
//! Once a command is sealed it must end in a stored result or be reported as uncertain; it is
//! never executed twice. So everything from the seal on runs in its own task: a client that hangs
//! up mid-command cancels nothing but its wait for the answer.

use std::sync::Arc;

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::{Command, ProtocolError, command_fingerprint};
use agent_runtime_store::CommandClaim;
use serde_json::Value;

use crate::admission::AdmissionError;
use crate::dispatch::dispatch;
use crate::response::{failure_value, success_value};
use crate::state::AppState;
use crate::store_errors::to_protocol;

/// Runs one parsed command for an authenticated, validated principal and returns the result value
/// to send (a stored result is returned verbatim).
pub async fn execute(state: &Arc<AppState>, context: CommandContext, command: Command) -> Value {
    let command_id = command.command_id.clone();
    if let Err(error) = context.principal.require_scopes(command.required_scopes()) {
        // Decision P1: echo the real command id.
        return failure_value(&command_id, &error);
    }

    let tenant = context.principal.tenant_id.clone();
    let fingerprint = command_fingerprint(&command);
    let claim = state
        .store
        .claim_command(&tenant, &command_id, &fingerprint, state.config.command_lease_ttl_ms)
        .await;
    let lease_id = match claim {
        Ok(CommandClaim::Claimed { lease_id }) => lease_id,
        Ok(CommandClaim::Completed { result }) => return result,
        Ok(CommandClaim::Conflict) => {
            return failure_value(&command_id, &ProtocolError::command_conflict());
        }
        Ok(CommandClaim::Abandoned { reason }) => {
            return failure_value(&command_id, &ProtocolError::command_abandoned(&reason));
        }
        Ok(CommandClaim::InProgress { retry_after_ms }) => {
            return failure_value(&command_id, &ProtocolError::command_in_progress(retry_after_ms));
        }
        Err(error) => return failure_value(&command_id, &to_protocol(&error)),
    };

    // Waiting for a slot is the one step a vanished client may cancel; the guard then releases
    // the claim so that a retry can run.
    let release = ReleaseOnDrop {
        state: Arc::clone(state),
        tenant: tenant.clone(),
        command_id: command_id.clone(),
        lease_id: Some(lease_id.clone()),
    };
    let permit = match state.admission.acquire(&tenant).await {
        Ok(permit) => permit,
        Err(error) => {
            let error = match error {
                AdmissionError::RateLimited { retry_after_ms } => {
                    ProtocolError::rate_limited(retry_after_ms)
                }
                AdmissionError::QueueFull => ProtocolError::queue_full(),
            };
            drop(release);
            return failure_value(&command_id, &error);
        }
    };

    let task_state = Arc::clone(state);
    let sealed = tokio::spawn(async move {
        let _permit = permit;
        seal_dispatch_complete(&task_state, context, command, &lease_id, release).await
    });
    match sealed.await {
        Ok(result) => result,
        Err(join_error) => {
            tracing::error!(command_id = %command_id, error = %join_error, "command task failed");
            failure_value(
                &command_id,
                &ProtocolError::command_outcome_uncertain(state.config.command_lease_ttl_ms),
            )
        }
    }
}

async fn seal_dispatch_complete(
    state: &Arc<AppState>,
    context: CommandContext,
    command: Command,
    lease_id: &str,
    mut release: ReleaseOnDrop,
) -> Value {
    let tenant = context.principal.tenant_id.clone();
    let command_id = command.command_id.clone();
    if let Err(error) = state.store.seal_command(&tenant, &command_id, lease_id).await {
        drop(release);
        return failure_value(&command_id, &to_protocol(&error));
    }
    // Sealed: from here on the claim must never be released.
    release.lease_id = None;

    let result = match dispatch(state, &context, command).await {
        Ok(data) => success_value(&command_id, data),
        Err(error) => failure_value(&command_id, &error),
    };
    match state
        .store
        .complete_command(&tenant, &command_id, lease_id, &result)
        .await
    {
        Ok(()) => result,
        Err(error) => {
            tracing::error!(command_id = %command_id, error = %error, "storing a command result failed; its outcome is uncertain");
            failure_value(
                &command_id,
                &ProtocolError::command_outcome_uncertain(state.config.command_lease_ttl_ms),
            )
        }
    }
}

/// Releases an unsealed claim when the pipeline stops before sealing (admission failure, seal
/// failure, or the client went away while queued).
struct ReleaseOnDrop {
    state: Arc<AppState>,
    tenant: String,
    command_id: String,
    lease_id: Option<String>,
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
