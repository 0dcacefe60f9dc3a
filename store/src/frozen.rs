//! Records the in-memory engine keeps as their JSON text.
//!
//! A parsed `serde_json::Value` costs far more memory than its JSON: 32 bytes per array element
//! (two bytes of JSON for `0,`), a B-tree node of several hundred bytes per object. Tenants choose
//! the shape of what they store (session metadata, inputs, command results), so parsed records
//! would let one tenant turn a megabyte of journal into tens of megabytes of memory. Kept as text,
//! a record costs about one byte of memory per byte of journal; it is parsed when it is read.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// A `T` kept as the JSON text it serialises to. Clones share the text.
pub struct Frozen<T> {
    text: Arc<str>,
    kind: PhantomData<fn() -> T>,
}

impl<T: Serialize> Frozen<T> {
    pub fn new(value: &T) -> Self {
        let text = serde_json::to_string(value).expect("a store record always serialises");
        Self::from_text(text)
    }
}

impl<T: DeserializeOwned> Frozen<T> {
    /// The record, parsed afresh (the text is what [`Frozen::new`] wrote, so it parses).
    pub fn thaw(&self) -> T {
        serde_json::from_str(&self.text).expect("a frozen record is JSON this store wrote")
    }
}

impl<T> Frozen<T> {
    fn from_text(text: String) -> Self {
        Frozen {
            text: text.into(),
            kind: PhantomData,
        }
    }

    /// The size of the JSON text in bytes.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

impl<T> Clone for Frozen<T> {
    fn clone(&self) -> Self {
        Frozen {
            text: Arc::clone(&self.text),
            kind: PhantomData,
        }
    }
}

impl<T> PartialEq for Frozen<T> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

/// Only the size: a record may hold a tenant's data, which never reaches a log.
impl<T> fmt::Debug for Frozen<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Frozen({} bytes)", self.text.len())
    }
}

/// Written as the JSON it holds, so a journal line is the same as for the parsed record.
impl<T> Serialize for Frozen<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.text).map_err(S::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// Read as a `T`, so a damaged journal line is refused when it is read (never when it is
/// thawed), and written again, so the text is the one [`Frozen::new`] makes. (Journal entries are
/// internally tagged enums, whose buffered content cannot hand a raw slice through anyway.)
impl<'de, T: Serialize + Deserialize<'de>> Deserialize<'de> for Frozen<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = T::deserialize(deserializer)?;
        let text = serde_json::to_string(&value).map_err(D::Error::custom)?;
        Ok(Self::from_text(text))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn a_frozen_value_serialises_like_the_value_and_thaws_back() {
        let value = json!({ "b": [0, 1.5, "x"], "a": { "nested": null } });
        let frozen = Frozen::new(&value);
        assert_eq!(frozen.len(), serde_json::to_string(&value).unwrap().len());
        assert_eq!(
            serde_json::to_string(&json!({ "kept": frozen })).unwrap(),
            serde_json::to_string(&json!({ "kept": value })).unwrap()
        );
        assert_eq!(frozen.thaw(), value);
        let read: Frozen<Value> = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(read, frozen);
    }

    #[test]
    fn debug_shows_the_size_not_the_content() {
        let frozen = Frozen::new(&json!({ "secret": "hunter2" }));
        assert_eq!(format!("{frozen:?}"), "Frozen(20 bytes)");
    }
}
