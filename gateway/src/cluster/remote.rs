//! The `SessionExecutor` port over gRPC: every command goes to the executor the router picks.
//!
//! Failures are sorted by what they prove. A call that never reached an executor (connection
//! refused, executor draining) is retried, re-resolving the owner, for up to the failover window,
//! so a session moves on once the dead owner's lease has expired. A call that may have reached it
//! and then broke is *uncertain*: the pipeline leaves the command sealed and answers
//! `COMMAND_IN_PROGRESS` rather than guessing (invariant 4).

use std::sync::Arc;
use std::time::Duration;

use agent_runtime::executor_port::{
    CommandContext, CommandEffect, CommandEffects, ExecutorCommand, ExecutorOutput, Placement,
    SessionExecutor,
};
use agent_runtime::protocol::command::CommandName;
use agent_runtime::protocol::{ErrorCode, ProtocolError};
use agent_runtime::telemetry::{AttributeValue, SharedTelemetry, Span, SpanKind, SpanStatus};
use agent_runtime_grpc::convert::{command_request, from_reply};
use agent_runtime_grpc::{CommandReply, command_reply};
use async_trait::async_trait;
use tonic::Status;

use super::router::{Router, Target};

/// How long a command keeps looking for a live owner (the lease TTL plus a margin).
pub const DEFAULT_FAILOVER_WINDOW: Duration = Duration::from_secs(15);
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long one executor call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

pub struct RemoteExecutor {
    router: Arc<Router>,
    failover_window: Duration,
    /// Where the client span of each call (the gRPC hop of a trace) goes.
    telemetry: SharedTelemetry,
    /// Where a call lost with its executor looks for the command's effect; `None`: such a call
    /// stays uncertain.
    effects: Option<Arc<dyn CommandEffects>>,
}

impl RemoteExecutor {
    pub fn new(router: Arc<Router>, failover_window: Duration, telemetry: SharedTelemetry) -> Self {
        Self {
            router,
            failover_window,
            telemetry,
            effects: None,
        }
    }

    /// Settles calls lost with their executor from the effects `effects` finds (see
    /// [`Self::settle_lost_call`]).
    pub fn with_effects(mut self, effects: Arc<dyn CommandEffects>) -> Self {
        self.effects = Some(effects);
        self
    }

    /// A call to `worker_id` for a session broke after it may have reached the executor (its
    /// host died or froze: no answer, no reset). Once the session's execution lease is no longer
    /// that executor's (expired, released or taken over), nothing it runs can be stored any more
    /// (every write is fenced): if the command's effect is not stored by then, it never will be,
    /// and it may run on the session's next owner. `true`: run it again; `false`: its outcome
    /// stays uncertain (its effect was stored, the lease was still held when the window closed,
    /// or nothing could be read).
    async fn settle_lost_call(
        &self,
        context: &CommandContext,
        session_id: &str,
        command: CommandName,
        worker_id: &str,
    ) -> bool {
        let (Some(effects), Some(execution_id)) = (&self.effects, &context.execution_id) else {
            return false;
        };
        let tenant_id = &context.principal.tenant_id;
        let until = tokio::time::Instant::now() + self.failover_window;
        loop {
            match self.router.held_by(tenant_id, session_id, worker_id).await {
                Ok(false) => break,
                Ok(true) if tokio::time::Instant::now() < until => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Ok(true) | Err(_) => return false,
            }
        }
        let effect = effects
            .effect_of(tenant_id, command, Some(session_id), execution_id)
            .await;
        let run_again = matches!(effect, Ok(CommandEffect::RunAgain));
        tracing::warn!(worker_id = %worker_id, run_again, "an executor was lost during a call; its session is fenced off from it");
        run_again
    }

    async fn target(&self, tenant_id: &str, placement: Placement<'_>) -> Option<Target> {
        match placement {
            Placement::New => self.router.pick_new(None).await,
            Placement::Session(session_id) => {
                self.router.owner_for_command(tenant_id, session_id).await
            }
        }
    }

    /// After a failed call to `worker_id`: the session's owner is read anew next time.
    fn failed(&self, tenant_id: &str, placement: Placement<'_>, worker_id: &str) {
        if let Placement::Session(session_id) = placement {
            self.router.call_failed(tenant_id, session_id, worker_id);
        }
    }

    /// Calls `Execute` on the right executor, retrying only failures that prove the command did
    /// not run, and reads the reply as the command's output.
    async fn call(
        &self,
        context: &CommandContext,
        command: &ExecutorCommand,
    ) -> Result<ExecutorOutput, ProtocolError> {
        let placement = command.placement();
        let mut deadline = tokio::time::Instant::now() + self.failover_window;
        // Lost calls settled and run again (each waits out a lease): a bound, not a loop.
        let mut settles_left = 2;
        let request = command_request(context, command);
        loop {
            let Some(target) = self.target(&context.principal.tenant_id, placement).await else {
                if tokio::time::Instant::now() >= deadline {
                    return Err(no_executor());
                }
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            };
            let mut call = tonic::Request::new(request.clone());
            call.set_timeout(CALL_TIMEOUT);
            let hop = self.hop_span(context, &target.worker_id);
            if let Some(hop) = &hop {
                agent_runtime_grpc::trace::inject(call.metadata_mut(), hop.context());
            }
            let tenant_id = &context.principal.tenant_id;
            let mut client = target.client;
            let answered = client.execute(call).await;
            if let Some(hop) = hop {
                end_hop(hop, &answered);
            }
            if !matches!(&answered, Ok(reply) if reply.get_ref().outcome.as_ref().is_some_and(is_data))
            {
                self.failed(tenant_id, placement, &target.worker_id);
            }
            match answered {
                Ok(reply) => {
                    return match from_reply(command, reply.into_inner()) {
                        Ok(outcome) => outcome,
                        Err(error) => {
                            // It answered, so it may have run the command: uncertain.
                            tracing::error!(worker_id = %target.worker_id, error = %error, "an executor sent an invalid reply");
                            Err(ProtocolError::command_effect_uncertain())
                        }
                    };
                }
                Err(status) if never_reached(&status) && tokio::time::Instant::now() < deadline => {
                    tracing::info!(worker_id = %target.worker_id, code = ?status.code(), "executor unreachable; trying again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(status) if never_reached(&status) => return Err(no_executor()),
                Err(status) => {
                    tracing::warn!(worker_id = %target.worker_id, code = ?status.code(), "executor call failed after it may have run");
                    let settled = match placement {
                        Placement::Session(_) if settles_left == 0 => false,
                        Placement::Session(session_id) => {
                            settles_left -= 1;
                            self.settle_lost_call(
                                context,
                                session_id,
                                command.name(),
                                &target.worker_id,
                            )
                            .await
                        }
                        // A session it may have created has no lease to fence its creator off.
                        Placement::New => false,
                    };
                    if !settled {
                        return Err(ProtocolError::command_outcome_uncertain(1000));
                    }
                    // The same execution: its ids are the ones the lost call would have stored.
                    deadline = tokio::time::Instant::now() + self.failover_window;
                }
            }
        }
    }
}

impl RemoteExecutor {
    /// The client span of one call attempt, when the command is traced: the gRPC hop between
    /// the gateway's command span and the executor's.
    fn hop_span(&self, context: &CommandContext, worker_id: &str) -> Option<Span> {
        let parent = context.trace.as_ref()?;
        let mut span = Span::start(
            &self.telemetry,
            agent_runtime_grpc::trace::EXECUTE_SPAN,
            SpanKind::Client,
            Some(parent),
        );
        span.set("rpc.system", AttributeValue::Str("grpc"));
        span.set(
            "rpc.service",
            AttributeValue::Str(agent_runtime_grpc::trace::SERVICE),
        );
        span.set(
            "rpc.method",
            AttributeValue::Str(agent_runtime_grpc::trace::EXECUTE_METHOD),
        );
        // The worker id is the operator's name for the executor, never request content.
        span.set(
            "server.address",
            AttributeValue::String(worker_id.to_owned()),
        );
        span.set_tenant(&context.principal.tenant_id);
        Some(span)
    }
}

/// Ends a hop span with the call's gRPC status code (`rpc.grpc.status_code`, 0 for OK).
fn end_hop(mut span: Span, answered: &Result<tonic::Response<CommandReply>, Status>) {
    let code = match answered {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    span.set("rpc.grpc.status_code", AttributeValue::Int(code as i64));
    span.end(if code == tonic::Code::Ok {
        SpanStatus::Ok
    } else {
        SpanStatus::Error
    });
}

/// Whether a reply carries a result (not a failure).
fn is_data(outcome: &command_reply::Outcome) -> bool {
    matches!(outcome, command_reply::Outcome::DataJson(_))
}

/// Statuses that prove the executor did not run the command: marked so by the executor (it
/// refused the call unread: draining), or a connection that was never made (refused or
/// unreachable, read from the error's type, never its text). Anything else may have run.
fn never_reached(status: &Status) -> bool {
    if agent_runtime_grpc::is_marked_not_run(status) {
        return true;
    }
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return matches!(
                io.kind(),
                ConnectionRefused | HostUnreachable | NetworkUnreachable | AddrNotAvailable
            );
        }
        source = error.source();
    }
    false
}

fn no_executor() -> ProtocolError {
    ProtocolError::new(ErrorCode::Overloaded, "No executor is available").with_retry_after_ms(1000)
}

#[async_trait]
impl SessionExecutor for RemoteExecutor {
    async fn execute(
        &self,
        context: &CommandContext,
        command: ExecutorCommand,
    ) -> Result<ExecutorOutput, ProtocolError> {
        self.call(context, &command).await
    }

    async fn shutdown(&self) {}
}

#[cfg(test)]
mod tests {
    use super::never_reached;
    use agent_runtime_grpc::session_executor_client::SessionExecutorClient;
    use agent_runtime_grpc::{CommandRequest, not_run};
    use tonic::Status;
    use tonic::transport::Endpoint;

    #[tokio::test]
    async fn only_typed_evidence_proves_a_command_never_ran() {
        // A refused connection, as tonic reports it: proven by the io::Error's kind.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = closed.local_addr().unwrap();
        drop(closed);
        let channel = Endpoint::from_shared(format!("http://{address}"))
            .unwrap()
            .connect_lazy();
        let refused = SessionExecutorClient::new(channel)
            .execute(CommandRequest::default())
            .await
            .unwrap_err();
        assert!(never_reached(&refused), "{refused:?}");
        // The executor's marker.
        assert!(never_reached(&not_run(Status::unavailable(
            "executor is draining"
        ))));
        // Words are no evidence.
        for text in [
            "executor is draining",
            "connection refused",
            "connect error",
        ] {
            assert!(!never_reached(&Status::unavailable(text)), "{text}");
        }
        assert!(!never_reached(&Status::internal("transport error")));
    }
}
