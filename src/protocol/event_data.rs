//! An event's `data` object, shared by the envelope's clones.
//!
//! An envelope read back from the JSON it was stored as keeps its `data` as a slice of that text
//! and parses it only when something looks inside. An SSE replay sends the stored text as it is
//! (the envelope's rendering), so a replayed event's payload is never parsed or rendered again.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::{Arc, OnceLock};

use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::json::JsonObject;

#[derive(Clone)]
pub struct EventData(Arc<Inner>);

struct Inner {
    object: OnceLock<JsonObject>,
    /// Where the object's JSON text is, until it is parsed: the stored envelope and the range of
    /// its `data` value.
    source: Option<(Arc<str>, Range<usize>)>,
}

impl EventData {
    /// A `data` object parsed on first access from `text[range]`, which must be a JSON object
    /// this server serialised (the stored envelope it was read from).
    pub(crate) fn stored(text: Arc<str>, range: Range<usize>) -> Self {
        EventData(Arc::new(Inner {
            object: OnceLock::new(),
            source: Some((text, range)),
        }))
    }

    /// Whether `other` is this very payload (a clone), not just an equal one.
    pub fn ptr_eq(&self, other: &EventData) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<JsonObject> for EventData {
    fn from(object: JsonObject) -> Self {
        EventData(Arc::new(Inner {
            object: OnceLock::from(object),
            source: None,
        }))
    }
}

impl Deref for EventData {
    type Target = JsonObject;

    fn deref(&self) -> &JsonObject {
        self.0.object.get_or_init(|| {
            let (text, range) = self
                .0
                .source
                .as_ref()
                .expect("a data object without text is created parsed");
            // The text is an object this server serialised and the store checked on the way
            // back (`EventEnvelope::from_stored_json`); only a database edited by hand could
            // make it fail here.
            serde_json::from_str(&text[range.clone()])
                .expect("a stored event's data is the JSON object it was stored as")
        })
    }
}

impl PartialEq for EventData {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl fmt::Debug for EventData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// Unparsed data is written as the text it was read from, so writing a stored event (a journal
/// line, a snapshot) neither parses it nor keeps a parsed copy.
impl Serialize for EventData {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match (self.0.object.get(), &self.0.source) {
            (None, Some((text, range))) => {
                let raw: &RawValue =
                    serde_json::from_str(&text[range.clone()]).map_err(S::Error::custom)?;
                raw.serialize(serializer)
            }
            _ => (**self).serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for EventData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        JsonObject::deserialize(deserializer).map(EventData::from)
    }
}
