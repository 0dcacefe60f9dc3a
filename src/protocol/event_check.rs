//! Strict validation of event envelopes and their per-type `data` (docs/protocol.md §1.4, §6), as
//! the reference client applies it to every SSE frame.
//!
//! [`EventEnvelope`] keeps `data` as a plain object so that the store and transports stay
//! schema-agnostic; [`EventPayload`] is its typed view.

use serde_json::Value;

use super::error::ProtocolError;
use super::event::{EventEnvelope, EventType};
use super::json::JsonObject;
use super::permission::PermissionRequestedData;
use super::stream::StreamMessage;
use super::strict_json::{decode_exact, parse_strict};
use crate::ids::is_valid_identifier;
use crate::timefmt::is_iso_datetime;

/// The message of the cross-field rule of §1.4, as the reference client words it.
pub const STREAM_SESSION_MISMATCH: &str =
    "Stream event Session does not match the server event envelope";

/// The typed `data` of an event.
#[derive(Clone, Debug, PartialEq)]
pub enum EventPayload {
    Stream(StreamMessage),
    PermissionRequested(PermissionRequestedData),
    /// Any object; the in-process executor sends `{"reason": "user"}`.
    SessionClosed(JsonObject),
}

impl EventPayload {
    pub fn event_type(&self) -> EventType {
        match self {
            EventPayload::Stream(_) => EventType::SessionStream,
            EventPayload::PermissionRequested(_) => EventType::PermissionRequested,
            EventPayload::SessionClosed(_) => EventType::SessionClosed,
        }
    }

    /// The envelope's `data`.
    pub fn to_data(&self) -> JsonObject {
        match self {
            EventPayload::Stream(message) => message.to_data(),
            EventPayload::PermissionRequested(data) => data.to_data(),
            EventPayload::SessionClosed(data) => data.clone(),
        }
    }

    /// Strictly reads `data` as the schema of `event_type`.
    pub fn from_data(
        event_type: EventType,
        data: &JsonObject,
    ) -> Result<EventPayload, ProtocolError> {
        match event_type {
            EventType::SessionStream => StreamMessage::from_data(data).map(EventPayload::Stream),
            EventType::PermissionRequested => {
                PermissionRequestedData::from_data(data).map(EventPayload::PermissionRequested)
            }
            EventType::SessionClosed => Ok(EventPayload::SessionClosed(data.clone())),
        }
    }

    /// The typed payload of a validated envelope.
    pub fn from_event(event: &EventEnvelope) -> Result<EventPayload, ProtocolError> {
        validate_event(event)?;
        EventPayload::from_data(event.event_type, &event.data)
    }
}

/// Checks everything serde cannot: the identifier rule on `eventId`, `sessionId` and `requestId`,
/// a positive `sequence`, an ISO `occurredAt`, the per-type `data` schema, and that a stream
/// message belongs to the envelope's session.
pub fn validate_event(event: &EventEnvelope) -> Result<(), ProtocolError> {
    validated_payload(event).map(|_| ())
}

/// [`validate_event`], returning the typed `data` it decoded on the way.
fn validated_payload(event: &EventEnvelope) -> Result<EventPayload, ProtocolError> {
    let ids_valid = is_valid_identifier(&event.event_id)
        && is_valid_identifier(&event.session_id)
        && event.request_id.as_deref().is_none_or(is_valid_identifier);
    if !ids_valid {
        return Err(ProtocolError::invalid_event(
            "Event identifiers do not match the identifier rule",
        ));
    }
    if event.sequence == 0 {
        return Err(ProtocolError::invalid_event(
            "Event sequence must be positive",
        ));
    }
    if !is_iso_datetime(&event.occurred_at) {
        return Err(ProtocolError::invalid_event(
            "Event occurredAt is not an ISO-8601 date-time with offset",
        ));
    }
    let payload = EventPayload::from_data(event.event_type, &event.data)?;
    if let EventPayload::Stream(message) = &payload
        && message.session_id() != event.session_id
    {
        return Err(ProtocolError::invalid_event(STREAM_SESSION_MISMATCH));
    }
    Ok(payload)
}

/// Parses one event envelope (an SSE `data:` payload) strictly.
pub fn parse_event(bytes: &[u8]) -> Result<EventEnvelope, ProtocolError> {
    let value =
        parse_strict(bytes).map_err(|_| ProtocolError::invalid_event("Event is not valid JSON"))?;
    event_from_value(value)
}

/// [`parse_event`] that also returns the typed `data` (decoded once, by the validation).
pub fn parse_event_payload(bytes: &[u8]) -> Result<(EventEnvelope, EventPayload), ProtocolError> {
    let value =
        parse_strict(bytes).map_err(|_| ProtocolError::invalid_event("Event is not valid JSON"))?;
    let event: EventEnvelope = decode_exact(value).map_err(|error| {
        ProtocolError::invalid_event(format!("Event envelope is invalid: {error}"))
    })?;
    let payload = validated_payload(&event)?;
    Ok((event, payload))
}

/// [`parse_event`] for an already parsed value.
pub fn event_from_value(value: Value) -> Result<EventEnvelope, ProtocolError> {
    let event: EventEnvelope = decode_exact(value).map_err(|error| {
        ProtocolError::invalid_event(format!("Event envelope is invalid: {error}"))
    })?;
    validate_event(&event)?;
    Ok(event)
}

#[cfg(test)]
mod tests;
