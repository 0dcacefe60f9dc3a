//! What one event may carry (docs/protocol.md §6.5): the `data` of every event the executor
//! publishes renders to at most `max_event_bytes` of JSON, so that no SSE frame reaches the
//! 4 MiB of UTF-8 that clients refuse (`STREAM_FRAME_TOO_LARGE`) — whatever a model or a tool
//! produces. A longer text delta is split over several events (nothing is lost); a longer final
//! answer, tool output or other text is cut with a marker saying how much was left out; the
//! input of a tool call that does not fit is shown as a marker (and the call is refused, see
//! `tool_step`).

use agent_runtime::protocol::JsonObject;
use agent_runtime::protocol::event::MAX_SSE_FRAME_BYTES;
use serde_json::{Value, json};

/// `max_event_bytes` unless configured: a quarter of what a client accepts.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1 << 20;
/// Room for the envelope around `data` (ids of at most 256 bytes, the time, the type) and the
/// frame's `id:` and `event:` lines.
const FRAME_HEADROOM: usize = 16 << 10;
/// The largest `max_event_bytes` that still keeps every frame under the clients' limit.
pub const MAX_EVENT_BYTES_LIMIT: usize = MAX_SSE_FRAME_BYTES - FRAME_HEADROOM;
/// The smallest `max_event_bytes` accepted: below it ordinary events would be cut.
pub const MIN_EVENT_BYTES: usize = 64 << 10;
/// Strings at most this long are never cut (ids, names, types); the marker fits in it.
const UNCUT: usize = 256;

/// The bound on one event's `data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventBound {
    max_bytes: usize,
}

impl Default for EventBound {
    fn default() -> Self {
        EventBound::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl EventBound {
    /// `max_bytes` is clamped into [`MIN_EVENT_BYTES`]..=[`MAX_EVENT_BYTES_LIMIT`] (the
    /// configuration refuses values outside it).
    pub fn new(max_bytes: usize) -> EventBound {
        EventBound {
            max_bytes: max_bytes.clamp(MIN_EVENT_BYTES, MAX_EVENT_BYTES_LIMIT),
        }
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The JSON size of `data` when it is over the bound.
    pub fn excess(&self, data: &JsonObject) -> Option<usize> {
        if self.surely_fits(data) {
            return None;
        }
        Some(json_len(data)).filter(|size| *size > self.max_bytes)
    }

    /// A streamed delta (the hot path: most events are small deltas) fits without being
    /// rendered when even its worst escaping (6 bytes a byte) does, beside an envelope of ids.
    fn surely_fits(&self, data: &JsonObject) -> bool {
        matches!(stream_type(data), Some("content" | "thinking"))
            && data.len() <= 3
            && data
                .get("delta")
                .and_then(Value::as_str)
                .is_some_and(|delta| delta.len() * 6 + UNCUT * 4 <= self.max_bytes)
    }

    /// `data` as events within the bound: a `content` or `thinking` delta split over several,
    /// anything else as one event, cut where it must be.
    pub fn fit(&self, data: JsonObject) -> Vec<JsonObject> {
        let Some(size) = self.excess(&data) else {
            return vec![data];
        };
        match stream_type(&data) {
            Some("content" | "thinking") => self.split_delta(data, size),
            _ => vec![self.shrink(data)],
        }
    }

    /// `data` as one event within the bound; a delta too long for one event is cut, so a
    /// caller that can publish several events uses [`EventBound::fit`].
    pub fn fit_one(&self, data: JsonObject) -> JsonObject {
        match self.excess(&data) {
            Some(_) => self.shrink(data),
            None => data,
        }
    }

    /// Whether [`EventBound::fit`] makes more than one event of `data`.
    pub fn splits(&self, data: &JsonObject) -> bool {
        matches!(stream_type(data), Some("content" | "thinking")) && self.excess(data).is_some()
    }

    fn split_delta(&self, data: JsonObject, size: usize) -> Vec<JsonObject> {
        let Some(Value::String(delta)) = data.get("delta") else {
            return vec![self.shrink(data)];
        };
        let budget = self.max_bytes - (size - escaped_len(delta));
        let mut events = Vec::new();
        let mut start = 0;
        let mut used = 2; // the quotes
        for (index, character) in delta.char_indices() {
            let width = escaped_char_len(character);
            if used + width > budget {
                events.push(with_field(&data, "delta", &delta[start..index]));
                start = index;
                used = 2;
            }
            used += width;
        }
        events.push(with_field(&data, "delta", &delta[start..]));
        events
    }

    /// Cuts the longest strings (and then the longest arrays) of `data` until it fits.
    fn shrink(&self, mut data: JsonObject) -> JsonObject {
        match stream_type(&data) {
            Some("tool_use") => {
                let omitted = self.marker(json_len(&data.get("input")));
                data.insert("input".into(), json!({ "omitted": omitted }));
            }
            // Structured output becomes its text, which can be cut like any other.
            Some("tool_result") => {
                if let Some(output) = data.get_mut("output").filter(|output| !output.is_string()) {
                    *output = Value::String(output.to_string());
                }
            }
            _ => {}
        }
        loop {
            let size = json_len(&data);
            if size <= self.max_bytes {
                return data;
            }
            let excess = size - self.max_bytes;
            if let Some(text) = longest_string(&mut data).filter(|text| text.len() > UNCUT) {
                self.cut(text, excess);
            } else if let Some(items) = longest_array(&mut data).filter(|items| items.len() > 1) {
                items.truncate(items.len() / 2);
            } else {
                return self.left_out(&data, size);
            }
        }
    }

    /// Removes at least `excess` bytes from the end of `text` and says how many it removed.
    fn cut(&self, text: &mut String, excess: usize) {
        let original = text.len();
        let mut keep = original.saturating_sub(excess + UNCUT);
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
        text.truncate(keep);
        text.push_str(&self.marker(original - keep));
    }

    fn marker(&self, bytes: usize) -> String {
        format!(
            "[… {bytes} more bytes left out: one event carries at most {} bytes …]",
            self.max_bytes
        )
    }

    /// What stands for an event nothing else could bring within the bound (many small fields:
    /// no string or list to cut).
    fn left_out(&self, data: &JsonObject, size: usize) -> JsonObject {
        let session_id = data.get("sessionId").cloned().unwrap_or(Value::Null);
        let message = format!(
            "An event of {size} bytes was left out: one event carries at most {} bytes",
            self.max_bytes
        );
        match json!({ "type": "error", "sessionId": session_id, "message": message, "code": "EVENT_TOO_LARGE" })
        {
            Value::Object(object) => object,
            _ => unreachable!("a json! object literal is an object"),
        }
    }
}

fn stream_type(data: &JsonObject) -> Option<&str> {
    data.get("type").and_then(Value::as_str)
}

fn with_field(data: &JsonObject, key: &str, text: &str) -> JsonObject {
    let mut copy = data.clone();
    copy.insert(key.into(), Value::String(text.to_owned()));
    copy
}

/// The longest string anywhere in `data`.
fn longest_string(data: &mut JsonObject) -> Option<&mut String> {
    fn visit<'a>(value: &'a mut Value, best: &mut Option<&'a mut String>) {
        match value {
            Value::String(text) if best.as_ref().is_none_or(|known| text.len() > known.len()) => {
                *best = Some(text);
            }
            Value::Array(items) => items.iter_mut().for_each(|item| visit(item, best)),
            Value::Object(fields) => fields.values_mut().for_each(|item| visit(item, best)),
            _ => {}
        }
    }
    let mut best = None;
    data.values_mut().for_each(|value| visit(value, &mut best));
    best
}

/// The longest array anywhere in `data` (by element count).
fn longest_array(data: &mut JsonObject) -> Option<&mut Vec<Value>> {
    fn visit<'a>(value: &'a mut Value, best: &mut Option<&'a mut Vec<Value>>) {
        match value {
            Value::Array(items) => {
                // Nested arrays first: the borrow of `items` must end before it can be kept.
                let longer = best.as_ref().is_none_or(|known| items.len() > known.len());
                if longer {
                    *best = Some(items);
                } else {
                    items.iter_mut().for_each(|item| visit(item, best));
                }
            }
            Value::Object(fields) => fields.values_mut().for_each(|item| visit(item, best)),
            _ => {}
        }
    }
    let mut best = None;
    data.values_mut().for_each(|value| visit(value, &mut best));
    best
}

/// Bytes of `value` as JSON, counted without building the text.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value).expect("JSON values always serialise");
    counter.0
}

struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The JSON length of `text` as a string, quotes included.
fn escaped_len(text: &str) -> usize {
    2 + text.chars().map(escaped_char_len).sum::<usize>()
}

/// What `serde_json` writes for one character of a string.
fn escaped_char_len(character: char) -> usize {
    match character {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        '\0'..='\u{1f}' => 6,
        other => other.len_utf8(),
    }
}

#[cfg(test)]
mod tests;
