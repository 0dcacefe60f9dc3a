//! W3C trace context (`traceparent` / `tracestate`) and the spans the server records.
//!
//! A command's trace starts at the gateway (or continues the client's `traceparent`), travels to
//! the executor in the call context, and from the executor to the model provider as a
//! `traceparent` header. Spans are handed to the telemetry port when they end; whether they go
//! anywhere is the adapters' business (OTLP when an endpoint is configured).
//!
//! Span attributes are chosen from fixed keys with identifier or number values: never prompts,
//! tool arguments, tokens or free text.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{SharedTelemetry, best_effort};

/// Longest `tracestate` kept (W3C: 32 members of at most 256 characters; vendors agree on 512).
const MAX_TRACESTATE: usize = 512;

/// Where a unit of work sits in a distributed trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    /// The span this context belongs to (the parent of whatever is started from it).
    pub span_id: [u8; 8],
    /// Whether spans of this trace are recorded (the W3C `sampled` flag).
    pub sampled: bool,
    /// Opaque vendor state, passed on unchanged between our own processes.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// A new trace, sampled.
    pub fn new_root() -> Self {
        Self {
            trace_id: random_nonzero(),
            span_id: random_nonzero(),
            sampled: true,
            tracestate: None,
        }
    }

    /// A new span of the same trace.
    pub fn child(&self) -> Self {
        Self {
            trace_id: self.trace_id,
            span_id: random_nonzero(),
            sampled: self.sampled,
            tracestate: self.tracestate.clone(),
        }
    }

    /// Parses a `traceparent` header (and its optional `tracestate`). Anything that is not a
    /// valid version-00 header (or a later version's first four fields) is `None`, which starts
    /// a new trace: a malformed header is never an error for the caller.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        let value = traceparent.trim();
        let mut parts = value.split('-');
        let version = parts.next()?;
        let trace_id = parts.next()?;
        let span_id = parts.next()?;
        let flags = parts.next()?;
        let rest = parts.next();
        if version.len() != 2 || !is_lower_hex(version) || version == "ff" {
            return None;
        }
        // Version 00 has exactly four fields; later versions may append more.
        if version == "00" && rest.is_some() {
            return None;
        }
        if trace_id.len() != 32 || span_id.len() != 16 || flags.len() != 2 {
            return None;
        }
        if !is_lower_hex(trace_id) || !is_lower_hex(span_id) || !is_lower_hex(flags) {
            return None;
        }
        let trace_id: [u8; 16] = decode_hex(trace_id)?;
        let span_id: [u8; 8] = decode_hex(span_id)?;
        let [flags]: [u8; 1] = decode_hex(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        let tracestate = tracestate
            .map(str::trim)
            .filter(|state| !state.is_empty() && state.len() <= MAX_TRACESTATE)
            .filter(|state| state.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .map(str::to_owned);
        Some(Self {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
            tracestate,
        })
    }

    /// The `traceparent` header value (version 00).
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.span_id),
            u8::from(self.sampled)
        )
    }

    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    pub fn span_id_hex(&self) -> String {
        hex::encode(self.span_id)
    }
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = hex::decode(text).ok()?;
    bytes.try_into().ok()
}

fn random_nonzero<const N: usize>() -> [u8; N] {
    loop {
        let bytes: [u8; N] = rand::random();
        if bytes != [0; N] {
            return bytes;
        }
    }
}

/// What kind of work a span measures (the OTLP `SpanKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    Internal,
    /// Handling a request from a client (an HTTP command at the gateway).
    Server,
    /// A call to another service (the model provider).
    Client,
}

/// How a span ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanStatus {
    Ok,
    Error,
}

/// An attribute value: identifiers, codes, names from configuration, numbers and flags only.
#[derive(Clone, Debug, PartialEq)]
pub enum AttributeValue {
    Str(&'static str),
    /// Only for values from configuration (a model name), never request content.
    String(String),
    Int(i64),
    Bool(bool),
}

/// One ended span, as handed to [`super::Telemetry::record_span`].
#[derive(Clone, Debug, PartialEq)]
pub struct SpanRecord {
    pub name: &'static str,
    pub kind: SpanKind,
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    pub attributes: Vec<(&'static str, AttributeValue)>,
    /// Exported as `blade.agent.tenant.id` only when the adapter is configured to include tenants.
    pub tenant_id: Option<String>,
    pub status: SpanStatus,
}

/// A span in progress. It is recorded when [`Span::end`] is called, or when it is dropped (a
/// cancelled command still shows up, with an error status).
#[derive(Debug)]
pub struct Span {
    telemetry: SharedTelemetry,
    context: TraceContext,
    record: Option<SpanRecord>,
}

impl Span {
    /// Starts a span as a child of `parent`, or as the root of a new trace.
    pub fn start(
        telemetry: &SharedTelemetry,
        name: &'static str,
        kind: SpanKind,
        parent: Option<&TraceContext>,
    ) -> Self {
        let mut context = match parent {
            Some(parent) => parent.child(),
            None => TraceContext::new_root(),
        };
        context.sampled = telemetry.samples(parent, &context.trace_id);
        let record = SpanRecord {
            name,
            kind,
            trace_id: context.trace_id,
            span_id: context.span_id,
            parent_span_id: parent.map(|parent| parent.span_id),
            start_unix_nanos: now_unix_nanos(),
            end_unix_nanos: 0,
            attributes: Vec::new(),
            tenant_id: None,
            status: SpanStatus::Ok,
        };
        Self {
            telemetry: telemetry.clone(),
            context,
            record: Some(record),
        }
    }

    /// The context to hand to work done on behalf of this span.
    pub fn context(&self) -> &TraceContext {
        &self.context
    }

    pub fn set(&mut self, key: &'static str, value: AttributeValue) {
        if let Some(record) = &mut self.record {
            match record.attributes.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => record.attributes.push((key, value)),
            }
        }
    }

    pub fn set_tenant(&mut self, tenant_id: &str) {
        if let Some(record) = &mut self.record {
            record.tenant_id = Some(tenant_id.to_owned());
        }
    }

    /// Ends the span with `status` and hands it to the telemetry port (when sampled).
    pub fn end(mut self, status: SpanStatus) {
        self.finish(status);
    }

    fn finish(&mut self, status: SpanStatus) {
        let Some(mut record) = self.record.take() else {
            return;
        };
        if !self.context.sampled {
            return;
        }
        record.end_unix_nanos = now_unix_nanos().max(record.start_unix_nanos);
        record.status = status;
        let telemetry = &self.telemetry;
        best_effort(|| telemetry.record_span(&record));
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if self.record.is_some() {
            self.set("blade.agent.cancelled", AttributeValue::Bool(true));
            self.finish(SpanStatus::Error);
        }
    }
}

fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
