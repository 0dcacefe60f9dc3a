//! The W3C trace context of a `SessionExecutor` call, carried as `traceparent` / `tracestate`
//! request metadata (as OpenTelemetry's gRPC instrumentation carries it), and the names of the
//! call's spans.

use agent_runtime::telemetry::TraceContext;
use tonic::metadata::{MetadataMap, MetadataValue};

/// The service's full name, the `rpc.service` span attribute.
pub const SERVICE: &str = "agent_runtime.v1.SessionExecutor";

/// The RPC every command travels as: the span name `{service}/{method}`, and the method.
pub const EXECUTE_SPAN: &str = "agent_runtime.v1.SessionExecutor/Execute";
pub const EXECUTE_METHOD: &str = "Execute";

/// Puts `trace` into the call's metadata (`tracestate` only when there is one).
pub fn inject(metadata: &mut MetadataMap, trace: &TraceContext) {
    if let Ok(value) = MetadataValue::try_from(trace.traceparent()) {
        metadata.insert("traceparent", value);
    }
    if let Some(state) = &trace.tracestate
        && let Ok(value) = MetadataValue::try_from(state.as_str())
    {
        metadata.insert("tracestate", value);
    }
}

/// The caller's trace context, if its metadata carries a valid one. A missing or malformed
/// `traceparent` only loses the link to the caller's trace, never the call.
pub fn extract(metadata: &MetadataMap) -> Option<TraceContext> {
    let traceparent = metadata.get("traceparent")?.to_str().ok()?;
    let tracestate = metadata
        .get("tracestate")
        .and_then(|value| value.to_str().ok());
    TraceContext::parse(traceparent, tracestate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_context_travels_in_the_metadata() {
        let mut trace = TraceContext::new_root();
        trace.tracestate = Some("vendor=abc".to_owned());
        let mut metadata = MetadataMap::new();
        inject(&mut metadata, &trace);
        assert_eq!(
            metadata.get("traceparent").unwrap().to_str().unwrap(),
            trace.traceparent()
        );
        assert_eq!(extract(&metadata), Some(trace.clone()));

        let mut untraced = MetadataMap::new();
        assert_eq!(extract(&untraced), None);
        // A garbled traceparent loses the link, not the call.
        untraced.insert("traceparent", MetadataValue::from_static("not-a-trace"));
        assert_eq!(extract(&untraced), None);
    }

    #[test]
    fn the_execute_span_is_named_service_slash_method() {
        assert_eq!(EXECUTE_SPAN, format!("{SERVICE}/{EXECUTE_METHOD}"));
    }
}
