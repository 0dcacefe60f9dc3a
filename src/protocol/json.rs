//! JSON building blocks shared by every protocol shape.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A JSON object (`metadata`, `details`, event `data`, ...).
pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// The `protocolVersion` field: the JSON number literal `1`, nothing else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProtocolVersion;

/// `AGENT_PROTOCOL_VERSION`.
pub const PROTOCOL_VERSION: u64 = 1;

impl Serialize for ProtocolVersion {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(PROTOCOL_VERSION)
    }
}

impl<'de> Deserialize<'de> for ProtocolVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct VersionVisitor;

        impl Visitor<'_> for VersionVisitor {
            type Value = ProtocolVersion;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the protocol version 1")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                if v == PROTOCOL_VERSION {
                    Ok(ProtocolVersion)
                } else {
                    Err(E::custom("unsupported protocolVersion"))
                }
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                if v == 1 {
                    Ok(ProtocolVersion)
                } else {
                    Err(E::custom("unsupported protocolVersion"))
                }
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                if v == 1.0 {
                    Ok(ProtocolVersion)
                } else {
                    Err(E::custom("unsupported protocolVersion"))
                }
            }
        }

        deserializer.deserialize_any(VersionVisitor)
    }
}

/// Serialises a protocol shape that is a JSON object by construction (a struct, or an enum
/// tagged inside an object).
///
/// # Panics
/// Only on a programming error: a type whose serialisation is not an object, or fails. Every
/// protocol type has string keys and finite numbers, so serde_json cannot fail on it.
pub fn to_object<T: Serialize + ?Sized>(value: &T) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(object)) => object,
        Ok(other) => panic!("protocol shape serialised to a non-object: {other}"),
        Err(error) => panic!("protocol shape failed to serialise: {error}"),
    }
}
