use std::sync::{Arc, Mutex};

use super::*;
use crate::telemetry::{Telemetry, TelemetryError};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

#[test]
fn a_valid_traceparent_round_trips() {
    let header = format!("00-{TRACE}-{SPAN}-01");
    let context = TraceContext::parse(&header, Some("congo=t61rcWkgMzE")).unwrap();
    assert_eq!(context.trace_id_hex(), TRACE);
    assert_eq!(context.span_id_hex(), SPAN);
    assert!(context.sampled);
    assert_eq!(context.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
    assert_eq!(context.traceparent(), header);

    let unsampled = TraceContext::parse(&format!("00-{TRACE}-{SPAN}-00"), None).unwrap();
    assert!(!unsampled.sampled);
    // A later version may append fields; its first four are read.
    let future = TraceContext::parse(&format!("cc-{TRACE}-{SPAN}-01-what-ever"), None).unwrap();
    assert_eq!(future.trace_id_hex(), TRACE);
}

#[test]
fn malformed_traceparents_start_a_new_trace() {
    let zero_trace = "0".repeat(32);
    let zero_span = "0".repeat(16);
    let upper = TRACE.to_uppercase();
    let bad = [
        String::new(),
        "garbage".to_owned(),
        format!("00-{TRACE}-{SPAN}"),
        format!("00-{TRACE}-{SPAN}-01-extra"),
        format!("ff-{TRACE}-{SPAN}-01"),
        format!("0-{TRACE}-{SPAN}-01"),
        format!("00-{zero_trace}-{SPAN}-01"),
        format!("00-{TRACE}-{zero_span}-01"),
        format!("00-{upper}-{SPAN}-01"),
        format!("00-{}-{SPAN}-01", &TRACE[1..]),
        format!("00-{TRACE}-{SPAN}-1"),
        format!("00-{TRACE}-{SPAN}-zz"),
    ];
    for header in bad {
        assert_eq!(TraceContext::parse(&header, None), None, "{header:?}");
    }
}

#[test]
fn tracestate_that_is_too_long_or_not_printable_is_dropped() {
    let header = format!("00-{TRACE}-{SPAN}-01");
    let long = "a=".to_owned() + &"b".repeat(600);
    assert_eq!(
        TraceContext::parse(&header, Some(&long))
            .unwrap()
            .tracestate,
        None
    );
    assert_eq!(
        TraceContext::parse(&header, Some("a=b\nc=d"))
            .unwrap()
            .tracestate,
        None
    );
}

#[test]
fn children_keep_the_trace_and_get_a_new_span() {
    let root = TraceContext::new_root();
    assert!(root.sampled);
    let child = root.child();
    assert_eq!(child.trace_id, root.trace_id);
    assert_ne!(child.span_id, root.span_id);
    assert_ne!(TraceContext::new_root().trace_id, root.trace_id);
}

#[derive(Debug, Default)]
struct Spans(Mutex<Vec<SpanRecord>>);

impl Telemetry for Spans {
    fn record_span(&self, span: &SpanRecord) -> Result<(), TelemetryError> {
        self.0.lock().unwrap().push(span.clone());
        Ok(())
    }
}

#[test]
fn spans_link_to_their_parent_and_are_recorded_once() {
    let spans = Arc::new(Spans::default());
    let telemetry: SharedTelemetry = spans.clone();
    let mut parent = Span::start(&telemetry, "parent", SpanKind::Server, None);
    parent.set(
        "blade.agent.command.type",
        AttributeValue::Str("session.create"),
    );
    parent.set(
        "blade.agent.command.type",
        AttributeValue::Str("input.submit"),
    );
    let child = Span::start(
        &telemetry,
        "child",
        SpanKind::Client,
        Some(parent.context()),
    );
    let child_context = child.context().clone();
    child.end(SpanStatus::Error);
    let parent_context = parent.context().clone();
    parent.end(SpanStatus::Ok);

    let recorded = spans.0.lock().unwrap().clone();
    assert_eq!(recorded.len(), 2);
    let (child, parent) = (&recorded[0], &recorded[1]);
    assert_eq!(child.trace_id, parent.trace_id);
    assert_eq!(child.parent_span_id, Some(parent_context.span_id));
    assert_eq!(child.span_id, child_context.span_id);
    assert_eq!(child.status, SpanStatus::Error);
    assert_eq!(parent.parent_span_id, None);
    assert_eq!(
        parent.attributes,
        vec![(
            "blade.agent.command.type",
            AttributeValue::Str("input.submit")
        )]
    );
    assert!(parent.end_unix_nanos >= parent.start_unix_nanos);
}

#[test]
fn dropped_spans_end_as_cancelled_and_unsampled_ones_are_not_recorded() {
    let spans = Arc::new(Spans::default());
    let telemetry: SharedTelemetry = spans.clone();
    drop(Span::start(&telemetry, "dropped", SpanKind::Internal, None));
    let unsampled = TraceContext::parse(&format!("00-{TRACE}-{SPAN}-00"), None).unwrap();
    Span::start(
        &telemetry,
        "unsampled",
        SpanKind::Internal,
        Some(&unsampled),
    )
    .end(SpanStatus::Ok);

    let recorded = spans.0.lock().unwrap().clone();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].name, "dropped");
    assert_eq!(recorded[0].status, SpanStatus::Error);
    assert!(
        recorded[0]
            .attributes
            .contains(&("blade.agent.cancelled", AttributeValue::Bool(true)))
    );
}
