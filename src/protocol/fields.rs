//! Field-level rules shared by the strict schemas, as serde `deserialize_with` helpers.
//!
//! They make a schema read like the spec: `#[serde(deserialize_with = "fields::identifier")]` is
//! the identifier rule of docs/protocol.md §1.1. Two JavaScript-isms are reproduced on purpose:
//!
//! * an optional key is either absent or holds a value of its type; an explicit `null` is a schema
//!   failure (zod's `.optional()`), whereas serde's `Option` would silently take it as absent.
//!   [`crate::protocol::strict_json::decode_exact`], which every strict parser uses, rejects such a
//!   `null` for any `Option<T>` because it would not survive the round trip; the `opt_*` helpers
//!   and [`present`] reject it at the field as well, and [`present`] is what lets an optional *JSON
//!   value* field hold `null` as a value;
//! * an "integer" is a JSON number with no fractional part, so `1.0` counts as `1` (JavaScript does
//!   not tell them apart) while `1.5` is rejected.

use serde::de::{Deserialize, Deserializer, Error};
use serde_json::Number;

use crate::ids::is_valid_identifier;
use crate::timefmt::is_iso_datetime;

/// `Number.MAX_SAFE_INTEGER`: above it a JavaScript peer cannot represent every integer.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// An optional key that, when present, must hold a `T` (never `null`, unless `T` takes `null`:
/// an `Option<serde_json::Value>` field then keeps `Some(Value::Null)`). Use with
/// `#[serde(default)]` so that absence still means `None`.
pub fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// The common identifier rule as a regular expression, for the published JSON Schema (the reader
/// is [`is_valid_identifier`]; tests/protocol/schema.rs checks that both agree).
pub const IDENTIFIER_PATTERN: &str = "^[A-Za-z0-9_-][A-Za-z0-9._:-]{0,255}$";

/// An identifier field's published schema, `#[schemars(with = "fields::Identifier")]`: a string
/// that matches [`IDENTIFIER_PATTERN`], described where the field is.
#[cfg(feature = "schema")]
pub struct Identifier;

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Identifier {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Identifier".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "pattern": IDENTIFIER_PATTERN })
    }
}

/// The common identifier rule (docs/protocol.md §1.1).
pub fn identifier<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let value = String::deserialize(deserializer)?;
    if is_valid_identifier(&value) {
        Ok(value)
    } else {
        Err(D::Error::custom("value does not match the identifier rule"))
    }
}

/// An optional identifier.
pub fn opt_identifier<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    identifier(deserializer).map(Some)
}

/// A non-empty string (the relaxed id rule inside `session.stream` payloads).
pub fn non_empty<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let value = String::deserialize(deserializer)?;
    if value.is_empty() {
        Err(D::Error::custom("value must not be empty"))
    } else {
        Ok(value)
    }
}

/// An ISO-8601 date-time with an offset.
pub fn iso_datetime<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let value = String::deserialize(deserializer)?;
    if is_iso_datetime(&value) {
        Ok(value)
    } else {
        Err(D::Error::custom(
            "value is not an ISO-8601 date-time with offset",
        ))
    }
}

/// The length JavaScript reports for a string: UTF-16 code units.
pub fn utf16_len(value: &str) -> usize {
    value.encode_utf16().count()
}

/// An optional string of `MIN..=MAX` UTF-16 code units.
pub fn opt_utf16_len<'de, const MIN: usize, const MAX: usize, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let value = String::deserialize(deserializer)?;
    let len = utf16_len(&value);
    if (MIN..=MAX).contains(&len) {
        Ok(Some(value))
    } else {
        Err(D::Error::custom(format_args!(
            "string length must be {MIN}..={MAX}"
        )))
    }
}

/// A non-negative integer (an integral JSON number).
pub fn int<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let number = Number::deserialize(deserializer)?;
    if let Some(value) = number.as_u64() {
        return Ok(value);
    }
    // `as_u64` is `None` for negative integers and for every float; a float is still an integer
    // to JavaScript when it has no fractional part.
    match number.as_f64() {
        Some(value) if value >= 0.0 && value.fract() == 0.0 && value <= MAX_SAFE_INTEGER as f64 => {
            Ok(value as u64)
        }
        _ => Err(D::Error::custom("value must be a non-negative integer")),
    }
}

/// An optional non-negative integer.
pub fn opt_int<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    int(deserializer).map(Some)
}

/// An optional integer in `MIN..=MAX`.
pub fn opt_int_in<'de, const MIN: u64, const MAX: u64, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    let value = int(deserializer)?;
    if (MIN..=MAX).contains(&value) {
        Ok(Some(value))
    } else {
        Err(D::Error::custom(format_args!(
            "integer must be {MIN}..={MAX}"
        )))
    }
}

/// Any integer, negative included (`turn`).
pub fn signed_int<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let number = Number::deserialize(deserializer)?;
    if let Some(value) = number.as_i64() {
        return Ok(value);
    }
    match number.as_f64() {
        Some(value) if value.fract() == 0.0 && value.abs() <= MAX_SAFE_INTEGER as f64 => {
            Ok(value as i64)
        }
        _ => Err(D::Error::custom("value must be an integer")),
    }
}

/// A non-negative number, kept as written so that it round-trips unchanged.
pub fn non_negative<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Number, D::Error> {
    let number = Number::deserialize(deserializer)?;
    match number.as_f64() {
        Some(value) if value >= 0.0 => Ok(number),
        _ => Err(D::Error::custom("value must be a non-negative number")),
    }
}

/// An optional non-negative number.
pub fn opt_non_negative<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Number>, D::Error> {
    non_negative(deserializer).map(Some)
}

/// The literal `true` (`aborted`, `resolved`, the initialize `features`).
pub fn literal_true<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    if bool::deserialize(deserializer)? {
        Ok(true)
    } else {
        Err(D::Error::custom("value must be true"))
    }
}

/// The literal `false` (the `ok` of a failure result).
pub fn literal_false<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    if bool::deserialize(deserializer)? {
        Err(D::Error::custom("value must be false"))
    } else {
        Ok(false)
    }
}
