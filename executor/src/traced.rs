//! The executor's span around every command it handles (`blade.agent.executor.command`), a child
//! of the gateway's command span that arrives in the call context. Work the command starts (the
//! request's model calls) continues from this span. The same decorator serves both modes: it
//! wraps the in-process executor handed to the gateway in `serve`, and the one behind the gRPC
//! server in a cluster.

use std::future::Future;
use std::sync::Arc;

use agent_runtime::executor_port::{
    CommandContext, ExecutorCommand, ExecutorOutput, SessionExecutor,
};
use agent_runtime::protocol::ProtocolError;
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
    async fn execute(
        &self,
        context: &CommandContext,
        command: ExecutorCommand,
    ) -> Result<ExecutorOutput, ProtocolError> {
        let command_type = command.name().as_str();
        self.traced(context, command_type, |context| async move {
            self.inner.execute(&context, command).await
        })
        .await
    }

    async fn shutdown(&self) {
        self.inner.shutdown().await;
    }
}
