//! The event envelope (docs/protocol.md §1.4): what the SSE `data:` line carries and what the store
//! keeps.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::EventData;
use super::json::ProtocolVersion;

/// The largest SSE frame (its `id:`, `event:` and `data:` lines) a client accepts, in bytes of
/// UTF-8; a longer frame, or as much text buffered without a frame's end, is
/// `STREAM_FRAME_TOO_LARGE` (docs/protocol.md §11.4).
pub const MAX_SSE_FRAME_BYTES: usize = 4 << 20;

/// The three event types of a session's event log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum EventType {
    #[serde(rename = "session.stream")]
    SessionStream,
    #[serde(rename = "permission.requested")]
    PermissionRequested,
    #[serde(rename = "session.closed")]
    SessionClosed,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::SessionStream => "session.stream",
            EventType::PermissionRequested => "permission.requested",
            EventType::SessionClosed => "session.closed",
        }
    }
}

/// A stored, sequenced event. `data` is kept as a JSON object here; its per-type schema is checked
/// where events are produced and where they are validated strictly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventEnvelope {
    pub protocol_version: ProtocolVersion,
    pub event_id: String,
    /// Positive; an integral JSON number (`1.0` reads as 1, as in JavaScript).
    #[serde(deserialize_with = "super::fields::int")]
    pub sequence: u64,
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// ISO-8601 date-time with offset, stamped at publish time.
    pub occurred_at: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// Shared by clones: a replayed or fanned-out event is copied many times, its payload never.
    pub data: EventData,
    /// The envelope's JSON, rendered once and shared by every clone. An envelope is never
    /// changed once it has been stored, so the rendering stays true.
    #[serde(skip)]
    pub rendered: RenderedJson,
}

impl EventEnvelope {
    /// The envelope as JSON (what an SSE `data:` line carries), rendered on first use.
    pub fn json(&self) -> Arc<str> {
        Arc::clone(self.rendered.0.get_or_init(|| {
            serde_json::to_string(self)
                .expect("an event envelope always serialises")
                .into()
        }))
    }

    /// An envelope from the JSON it was stored as (what [`EventEnvelope::json`] rendered when it
    /// was appended). That text becomes the rendering as it is, and `data` stays unparsed until
    /// something looks inside, so a replay neither parses payloads nor renders them again.
    pub fn from_stored_json(text: Arc<str>) -> Result<Self, serde_json::Error> {
        let fields: StoredFields<'_> = serde_json::from_str(&text)?;
        let raw = fields.data.get();
        if !raw.starts_with('{') {
            return Err(serde::de::Error::custom(
                "an event's data must be a JSON object",
            ));
        }
        // `raw` borrows from `text`: its offset there is where the data object starts.
        let start = raw.as_ptr() as usize - text.as_ptr() as usize;
        let data = EventData::stored(Arc::clone(&text), start..start + raw.len());
        Ok(EventEnvelope {
            protocol_version: fields.protocol_version,
            event_id: fields.event_id,
            sequence: fields.sequence,
            session_id: fields.session_id,
            request_id: fields.request_id,
            occurred_at: fields.occurred_at,
            event_type: fields.event_type,
            data,
            rendered: RenderedJson(Arc::new(OnceLock::from(text))),
        })
    }
}

/// [`EventEnvelope`]'s fields with `data` left as text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StoredFields<'a> {
    protocol_version: ProtocolVersion,
    event_id: String,
    #[serde(deserialize_with = "super::fields::int")]
    sequence: u64,
    session_id: String,
    #[serde(default)]
    request_id: Option<String>,
    occurred_at: String,
    #[serde(rename = "type")]
    event_type: EventType,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// A cache of an envelope's JSON; equal to any other (it is derived from the envelope).
#[derive(Clone, Default)]
pub struct RenderedJson(Arc<OnceLock<Arc<str>>>);

impl PartialEq for RenderedJson {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for RenderedJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RenderedJson")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn envelope() -> EventEnvelope {
        serde_json::from_value(json!({
            "protocolVersion": 1,
            "eventId": "event-1",
            "sequence": 7,
            "sessionId": "session-1",
            "requestId": "request-1",
            "occurredAt": "2026-01-01T00:00:00.000Z",
            "type": "session.stream",
            "data": { "type": "content", "delta": "héllo \"quoted\"\nline" }
        }))
        .unwrap()
    }

    #[test]
    fn the_rendered_json_is_the_serialised_envelope_and_clones_share_it() {
        let event = envelope();
        let copy = event.clone();
        let rendered = event.json();
        assert_eq!(&*rendered, serde_json::to_string(&event).unwrap());
        assert!(!rendered.contains('\n'), "one SSE data line");
        // Rendered once: the copy made before rendering gets the same allocation.
        assert!(Arc::ptr_eq(&rendered, &copy.json()));
        assert!(event.data.ptr_eq(&copy.data));
    }

    #[test]
    fn the_cache_is_invisible_to_equality_and_parsing() {
        let event = envelope();
        let rendered = event.json();
        assert_eq!(event, envelope());
        let parsed: EventEnvelope = serde_json::from_str(&rendered).unwrap();
        assert_eq!(parsed, event);
        assert!(
            serde_json::from_str::<EventEnvelope>(
                &rendered.replace("\"sequence\":7", "\"sequence\":7,\"rendered\":\"x\"")
            )
            .is_err(),
            "`rendered` is not a wire field"
        );
    }

    #[test]
    fn a_stored_envelope_keeps_its_text_as_the_rendering_and_parses_data_on_demand() {
        let event = envelope();
        let stored = EventEnvelope::from_stored_json(event.json()).unwrap();
        assert!(
            Arc::ptr_eq(&stored.json(), &event.json()),
            "the text is reused"
        );
        assert_eq!(stored, event);
        assert_eq!(stored.data["delta"], "héllo \"quoted\"\nline");
    }

    #[test]
    fn a_stored_envelope_in_another_rendering_reads_the_same() {
        // What PostgreSQL's jsonb rendered for rows written before events were kept as text.
        let text = r#"{"data": {"type": "content", "delta": "héllo \"quoted\"\nline"}, "type": "session.stream", "eventId": "event-1", "sequence": 7, "requestId": "request-1", "sessionId": "session-1", "occurredAt": "2026-01-01T00:00:00.000Z", "protocolVersion": 1}"#;
        let stored = EventEnvelope::from_stored_json(text.into()).unwrap();
        assert_eq!(stored, envelope());
        assert_eq!(&*stored.json(), text, "sent as it was stored");
    }

    #[test]
    fn a_stored_envelope_must_be_a_whole_envelope_with_an_object_as_data() {
        let good = envelope().json();
        for bad in [
            good.replace("{\"delta\"", "[{\"delta\"")
                .replace("}}", "}]}"),
            good.replace("\"sequence\":7", "\"sequence\":7,\"extra\":1"),
            good.replace("\"sequence\":7,", ""),
            good[..good.len() - 1].to_owned(),
        ] {
            assert!(
                EventEnvelope::from_stored_json(bad.clone().into()).is_err(),
                "accepted {bad}"
            );
        }
    }
}
