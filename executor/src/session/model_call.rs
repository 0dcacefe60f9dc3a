//! The telemetry of one model call: a client span following the GenAI semantic conventions
//! (operation, provider, model, token counts, error type — never messages or tool arguments), and
//! the provider latency and error metrics.

use std::sync::Arc;
use std::time::Instant;

use agent_runtime::telemetry::{
    AttributeValue, ProviderCallMetric, SharedTelemetry, Span, SpanKind, SpanStatus, TraceContext,
    best_effort,
};

use super::LiveSession;
use crate::provider::{ModelTurn, ProviderError};

/// The span name of a model call (`gen_ai.operation.name`).
pub(crate) const MODEL_CALL_SPAN: &str = "chat";

pub(crate) struct ModelCallTelemetry {
    pub span: Span,
    started: Instant,
    telemetry: SharedTelemetry,
    provider: String,
}

impl ModelCallTelemetry {
    /// Starts the span of a model call made for the request traced by `parent`, asking for
    /// `model` instead of the provider's own when a skill switched it.
    pub fn start(
        session: &Arc<LiveSession>,
        parent: Option<&TraceContext>,
        model: Option<&str>,
    ) -> Self {
        let deps = &session.deps;
        let identity = &session.profile.provider_identity;
        let mut span = Span::start(&deps.telemetry, MODEL_CALL_SPAN, SpanKind::Client, parent);
        span.set(
            "gen_ai.operation.name",
            AttributeValue::Str(MODEL_CALL_SPAN),
        );
        span.set(
            "gen_ai.system",
            AttributeValue::String(identity.provider.clone()),
        );
        span.set(
            "gen_ai.request.model",
            AttributeValue::String(model.unwrap_or(&identity.model).to_owned()),
        );
        span.set_tenant(&session.tenant_id);
        Self {
            span,
            started: Instant::now(),
            telemetry: deps.telemetry.clone(),
            provider: identity.provider.clone(),
        }
    }

    /// Ends the span and records the call. A call that is dropped instead (abort, interruption)
    /// ends its span as cancelled and is not counted as a provider call.
    pub fn end(mut self, answer: &Result<ModelTurn, ProviderError>) {
        let error_code = answer.as_ref().err().map(|error| error.code.as_str());
        let metric = ProviderCallMetric {
            provider: &self.provider,
            duration: self.started.elapsed(),
            error_code,
        };
        best_effort(|| self.telemetry.record_provider_call(&metric));
        let status = match answer {
            Ok(turn) => {
                let tokens =
                    |count: u64| AttributeValue::Int(i64::try_from(count).unwrap_or(i64::MAX));
                self.span
                    .set("gen_ai.usage.input_tokens", tokens(turn.usage.input_tokens));
                self.span.set(
                    "gen_ai.usage.output_tokens",
                    tokens(turn.usage.output_tokens),
                );
                SpanStatus::Ok
            }
            Err(error) => {
                self.span
                    .set("error.type", AttributeValue::Str(error.code.as_str()));
                SpanStatus::Error
            }
        };
        self.span.end(status);
    }
}
