//! A JSON object shared by clones, kept as the text it was stored as until something looks inside.
//!
//! An event's `data` and a transcript message are both such objects. An envelope read back from
//! the JSON it was stored as keeps its `data` as a slice of that text: an SSE replay sends the
//! stored text as it is, so a replayed payload is never parsed or rendered again. A store that
//! keeps records in memory keeps them as text ([`SharedObject::frozen`]), about one byte per byte
//! of JSON whatever its shape, and hands readers [`SharedObject::detached`] copies, so what a
//! reader parses is the reader's and leaves with it.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::json::JsonObject;

#[derive(Clone)]
pub struct SharedObject(Arc<Inner>);

struct Inner {
    object: OnceLock<JsonObject>,
    /// Where the object's JSON text is, until it is parsed: the text it was stored in and the
    /// range of the object there.
    source: Option<(Arc<str>, Range<usize>)>,
}

impl SharedObject {
    /// An object parsed on first access from `text[range]`, which must be a JSON object this
    /// server serialised (the stored envelope it was read from).
    pub(crate) fn stored(text: Arc<str>, range: Range<usize>) -> Self {
        SharedObject(Arc::new(Inner {
            object: OnceLock::new(),
            source: Some((text, range)),
        }))
    }

    /// Whether `other` is this very object (a clone), not just an equal one.
    pub fn ptr_eq(&self, other: &SharedObject) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// This object kept as its JSON text only: the parsed form, if any, is not kept.
    pub fn frozen(&self) -> SharedObject {
        match &self.0.source {
            Some((text, range)) => Self::stored(Arc::clone(text), range.clone()),
            None => {
                let text: Arc<str> = serde_json::to_string(&**self)
                    .expect("a JSON object always serialises")
                    .into();
                let range = 0..text.len();
                Self::stored(text, range)
            }
        }
    }

    /// A copy for a reader: it shares the text, but what the reader parses stays in the copy.
    pub fn detached(&self) -> SharedObject {
        match &self.0.source {
            Some((text, range)) => Self::stored(Arc::clone(text), range.clone()),
            None => self.clone(),
        }
    }

    /// The object decoded as a `T`: from the parsed object when there is one, else straight from
    /// the text (which is then not parsed into, or kept as, a JSON object).
    pub fn decode<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        match (self.0.object.get(), &self.0.source) {
            (None, Some((text, range))) => serde_json::from_str(&text[range.clone()]),
            _ => T::deserialize(&**self),
        }
    }

    /// The object to change in place: parsed, and no longer shared with clones or its text.
    pub fn make_mut(&mut self) -> &mut JsonObject {
        if Arc::get_mut(&mut self.0).is_none_or(|inner| inner.source.is_some()) {
            *self = SharedObject::from((**self).clone());
        }
        let inner = Arc::get_mut(&mut self.0).expect("a fresh object has one owner");
        inner.object.get_mut().expect("a fresh object is parsed")
    }
}

impl From<JsonObject> for SharedObject {
    fn from(object: JsonObject) -> Self {
        SharedObject(Arc::new(Inner {
            object: OnceLock::from(object),
            source: None,
        }))
    }
}

impl Deref for SharedObject {
    type Target = JsonObject;

    fn deref(&self) -> &JsonObject {
        self.0.object.get_or_init(|| {
            let (text, range) = self
                .0
                .source
                .as_ref()
                .expect("an object without text is created parsed");
            // The text is an object this server serialised (and a store checked on the way
            // back); only a database edited by hand could make it fail here.
            serde_json::from_str(&text[range.clone()])
                .expect("a stored object is the JSON object it was stored as")
        })
    }
}

impl PartialEq for SharedObject {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0.source, &other.0.source) {
            (Some((a, ra)), Some((b, rb))) if a[ra.clone()] == b[rb.clone()] => true,
            _ => **self == **other,
        }
    }
}

impl fmt::Debug for SharedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// An unparsed object is written as the text it was read from, so writing a stored record (a
/// journal line, a snapshot) neither parses it nor keeps a parsed copy.
impl Serialize for SharedObject {
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

impl<'de> Deserialize<'de> for SharedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        JsonObject::deserialize(deserializer).map(SharedObject::from)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_frozen_object_writes_its_text_and_reads_like_the_parsed_one() {
        let parsed = SharedObject::from(object(json!({ "b": [0, 1], "a": "x" })));
        let frozen = parsed.frozen();
        assert_eq!(frozen, parsed);
        assert_eq!(
            serde_json::to_string(&frozen).unwrap(),
            serde_json::to_string(&parsed).unwrap()
        );
        assert_eq!(
            frozen.decode::<Value>().unwrap(),
            json!({ "a": "x", "b": [0, 1] })
        );
        assert_eq!(frozen["a"], "x");
    }

    #[test]
    fn what_a_detached_copy_parses_stays_in_the_copy() {
        let frozen = SharedObject::from(object(json!({ "a": 1 }))).frozen();
        let copy = frozen.detached();
        assert_eq!(copy["a"], 1);
        assert!(copy.0.object.get().is_some());
        assert!(
            frozen.0.object.get().is_none(),
            "the kept object is still text only"
        );
        assert!(!copy.ptr_eq(&frozen));
    }

    #[test]
    fn a_change_in_place_leaves_clones_and_the_text_alone() {
        let frozen = SharedObject::from(object(json!({ "a": 1, "b": 2 }))).frozen();
        let mut changed = frozen.clone();
        changed.make_mut().remove("b");
        assert_eq!(*changed, object(json!({ "a": 1 })));
        assert_eq!(*frozen, object(json!({ "a": 1, "b": 2 })));
        assert!(frozen.0.source.is_some());
    }
}
