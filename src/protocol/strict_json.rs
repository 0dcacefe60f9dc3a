//! Strict JSON input: the one door every request parser goes through.
//!
//! `serde_json::from_slice::<Value>` keeps the *last* of duplicate object keys, so `{"a":1,"a":2}`
//! would be read differently by us and by a peer that keeps the first. A body with a duplicate key
//! at any depth is therefore rejected outright, as are numbers that are not finite (`1e400`
//! overflows to infinity; `NaN` is not JSON at all). Protocol JSON values are finite by definition
//! (docs/protocol.md §1.1). So is a number that would not be kept exactly ([`exact_numbers`]): an
//! integer past 64 bits, or a decimal with more precision than a 64-bit float, would silently
//! become the nearest float, and two commands that differ only there would share a fingerprint.
//!
//! [`decode_exact`] then turns such a value into a typed shape and proves the shape took the value
//! exactly. serde's derives are more lenient than the protocol's strict schemas in ways attributes
//! cannot switch off: a struct also deserialises from a JSON *array* of its fields, and a tagged
//! enum from an array whose first element is the tag. Re-serialising the typed value and comparing
//! canonical forms rejects every such reading, and anything else a schema would have lost or
//! invented on the way.

use std::fmt;

use serde::Serialize;
use serde::de::{self, Deserialize, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::canonical::canonical_json;

mod exact_numbers;

/// Why a body is not strict JSON.
#[derive(Debug, thiserror::Error)]
pub enum StrictJsonError {
    #[error("invalid JSON: {0}")]
    Syntax(#[from] serde_json::Error),
    /// A number literal that parsing would not keep exactly (its text is not kept: it is data).
    #[error("invalid JSON: a number cannot be represented exactly")]
    InexactNumber,
}

/// Parses one JSON document, rejecting duplicate keys at any depth, non-finite numbers, numbers
/// that would not be kept exactly, invalid UTF-8 and trailing characters.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, StrictJsonError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let StrictValue(value) = StrictValue::deserialize(&mut deserializer)?;
    deserializer.end()?;
    // Only a document that parsed is scanned, so every literal found is a valid JSON number.
    if !exact_numbers::all_exact(bytes) {
        return Err(StrictJsonError::InexactNumber);
    }
    Ok(value)
}

/// Why a value does not fit a strict schema (kept for logs; clients only see the protocol error).
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("schema validation failed: {0}")]
    Invalid(#[from] serde_json::Error),
    #[error("schema validation failed: the value is not in the schema's exact shape")]
    NotExact,
}

/// Deserialises `value` as `T`, and accepts it only if `T` serialises back to the same canonical
/// JSON (see the module docs). Numbers compare by value, so `1.0` where an integer is expected
/// still passes.
pub fn decode_exact<T: DeserializeOwned + Serialize>(value: Value) -> Result<T, SchemaError> {
    let expected = canonical_json(&value);
    let typed: T = serde_json::from_value(value)?;
    let actual = canonical_json(&serde_json::to_value(&typed)?);
    if actual == expected {
        Ok(typed)
    } else {
        Err(SchemaError::NotExact)
    }
}

/// A `Value` built by a visitor that enforces the strict rules while parsing.
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate object key {key:?}"
                )));
            }
            let StrictValue(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests;
