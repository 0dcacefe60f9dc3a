//! The executor's span around every command it handles (`blade.agent.executor.command`), a child
//! of the gateway's command span that arrives in the call context. Work the command starts (the
//! request's model calls) continues from this span. The same decorator serves both modes: it
//! wraps the in-process executor handed to the gateway in `serve`, and the one behind the gRPC
//! server in a cluster.

use std::future::Future;
use std::sync::Arc;

use agent_runtime::executor_port::Submitted;
use agent_runtime::executor_port::{CommandContext, SessionExecutor, SessionSnapshot};
use agent_runtime::protocol::command::{
    CreateSessionData, ForkSessionData, ResolvePermissionData, SessionRef, SubmitInputData,
};
use agent_runtime::protocol::{ProtocolError, SessionDescriptor};
use agent_runtime::telemetry::{AttributeValue, SharedTelemetry, Span, SpanKind, SpanStatus};
use async_trait::async_trait;
use tracing::Instrument;

/// The span name of a command in the executor.
pub const EXECUTOR_SPAN: &str = "blade.agent.executor.command";

/// Wraps a `SessionExecutor` with a span per command.
pub struct TracedExecutor {
    inner: Arc<dyn SessionExecutor>,
    telemetry: SharedTelemetry,
}

impl TracedExecutor {
    pub fn new(inner: Arc<dyn SessionExecutor>, telemetry: SharedTelemetry) -> Self {
        Self { inner, telemetry }
    }

    /// Runs `call` with a context that carries this command's span, then ends the span with the
    /// command's outcome.
    async fn traced<T, F, Fut>(
        &self,
        context: &CommandContext,
        command_type: &'static str,
        call: F,
    ) -> Result<T, ProtocolError>
    where
        F: FnOnce(CommandContext) -> Fut,
        Fut: Future<Output = Result<T, ProtocolError>>,
    {
        let mut span = Span::start(
            &self.telemetry,
            EXECUTOR_SPAN,
            SpanKind::Server,
            context.trace.as_ref(),
        );
        span.set(
            "blade.agent.command.type",
            AttributeValue::Str(command_type),
        );
        span.set_tenant(&context.principal.tenant_id);
        let log_span = tracing::info_span!(
            "executor_command",
            trace_id = %span.context().trace_id_hex(),
            command_type,
        );
        let context = CommandContext {
            trace: Some(span.context().clone()),
            ..context.clone()
        };
        let result = call(context).instrument(log_span).await;
        let status = match &result {
            Ok(_) => {
                span.set(
                    "blade.agent.command.outcome",
                    AttributeValue::Str("success"),
                );
                SpanStatus::Ok
            }
            Err(error) => {
                span.set("blade.agent.command.outcome", AttributeValue::Str("error"));
                span.set("error.type", AttributeValue::Str(error.code.as_str()));
                SpanStatus::Error
            }
        };
        span.end(status);
        result
    }
}

#[async_trait]
impl SessionExecutor for TracedExecutor {
    async fn create(
        &self,
        context: &CommandContext,
        data: CreateSessionData,
    ) -> Result<SessionDescriptor, ProtocolError> {
        self.traced(context, "session.create", |context| async move {
            self.inner.create(&context, data).await
        })
        .await
    }

    async fn read(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<SessionSnapshot, ProtocolError> {
        self.traced(context, "session.read", |context| async move {
            self.inner.read(&context, data).await
        })
        .await
    }

    async fn resume(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<SessionDescriptor, ProtocolError> {
        self.traced(context, "session.resume", |context| async move {
            self.inner.resume(&context, data).await
        })
        .await
    }

    async fn fork(
        &self,
        context: &CommandContext,
        data: ForkSessionData,
    ) -> Result<SessionDescriptor, ProtocolError> {
        self.traced(context, "session.fork", |context| async move {
            self.inner.fork(&context, data).await
        })
        .await
    }

    async fn submit(
        &self,
        context: &CommandContext,
        data: SubmitInputData,
    ) -> Result<Submitted, ProtocolError> {
        self.traced(context, "input.submit", |context| async move {
            self.inner.submit(&context, data).await
        })
        .await
    }

    async fn abort(&self, context: &CommandContext, data: SessionRef) -> Result<(), ProtocolError> {
        self.traced(context, "request.abort", |context| async move {
            self.inner.abort(&context, data).await
        })
        .await
    }

    async fn close(
        &self,
        context: &CommandContext,
        data: SessionRef,
    ) -> Result<SessionDescriptor, ProtocolError> {
        self.traced(context, "session.close", |context| async move {
            self.inner.close(&context, data).await
        })
        .await
    }

    async fn resolve_permission(
        &self,
        context: &CommandContext,
        data: ResolvePermissionData,
    ) -> Result<(), ProtocolError> {
        self.traced(context, "permission.resolve", |context| async move {
            self.inner.resolve_permission(&context, data).await
        })
        .await
    }

    async fn shutdown(&self) {
        self.inner.shutdown().await;
    }
}
