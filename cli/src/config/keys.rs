//! Every key the configuration file accepts, read off the loader's own types: the file is
//! deserialised once with a deserializer that answers every field with a placeholder and records
//! the dotted path of every value it is asked for. Unknown keys are refused by the loader
//! (`deny_unknown_fields`), so this is exactly the set of keys a file may use — the reference in
//! `docs/configuration.md` is tested against it.
//!
//! Paths: `section.key`, `section.sub.key`; array-of-tables entries as `section.list[].key`
//! (`[[auth.tokens]]`), and arrays of plain values as `section.key`.

use std::collections::BTreeSet;
use std::fmt;

use serde::Deserialize;
use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};

use super::FileConfig;

/// The dotted paths of every leaf key, sorted.
pub fn accepted_keys() -> Vec<String> {
    let mut keys = BTreeSet::new();
    FileConfig::deserialize(Recorder {
        path: String::new(),
        keys: &mut keys,
    })
    .expect("every configuration type deserialises from placeholders");
    keys.into_iter().collect()
}

#[derive(Debug)]
struct RecordError(String);

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RecordError {}

impl de::Error for RecordError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        RecordError(message.to_string())
    }
}

struct Recorder<'k> {
    path: String,
    keys: &'k mut BTreeSet<String>,
}

impl Recorder<'_> {
    /// A plain value sits here: its path is a key (an element of a plain array is its array).
    fn leaf(&mut self) {
        let key = self.path.trim_end_matches("[]").to_owned();
        self.keys.insert(key);
    }

    fn child(&mut self, name: &str) -> Recorder<'_> {
        let path = if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        };
        Recorder {
            path,
            keys: self.keys,
        }
    }
}

macro_rules! leaf_with {
    ($($method:ident => $visit:ident($value:expr)),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, RecordError> {
                self.leaf();
                visitor.$visit($value)
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for Recorder<'_> {
    type Error = RecordError;

    leaf_with! {
        deserialize_bool => visit_bool(false),
        deserialize_i8 => visit_i64(1),
        deserialize_i16 => visit_i64(1),
        deserialize_i32 => visit_i64(1),
        deserialize_i64 => visit_i64(1),
        deserialize_u8 => visit_u64(1),
        deserialize_u16 => visit_u64(1),
        deserialize_u32 => visit_u64(1),
        deserialize_u64 => visit_u64(1),
        deserialize_f32 => visit_f64(1.0),
        deserialize_f64 => visit_f64(1.0),
        deserialize_char => visit_char('x'),
        deserialize_str => visit_str("x"),
        deserialize_string => visit_str("x"),
        deserialize_bytes => visit_bytes(b"x"),
        deserialize_byte_buf => visit_bytes(b"x"),
        deserialize_identifier => visit_str("x"),
        deserialize_any => visit_str("x"),
    }

    fn deserialize_unit<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, RecordError> {
        self.leaf();
        visitor.visit_unit()
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, RecordError> {
        visitor.visit_unit()
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, RecordError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, RecordError> {
        let element = self.child_element();
        visitor.visit_seq(OneElement {
            element: Some(element),
        })
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, RecordError> {
        // A free-form table: the key itself is what a file may set.
        self.leaf();
        visitor.visit_map(Fields {
            recorder: self,
            fields: &[],
            next: 0,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        visitor.visit_map(Fields {
            recorder: self,
            fields,
            next: 0,
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        mut self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, RecordError> {
        self.leaf();
        let variant = variants.first().copied().unwrap_or("x");
        visitor.visit_enum(variant.into_deserializer())
    }
}

impl Recorder<'_> {
    fn child_element(&mut self) -> Recorder<'_> {
        Recorder {
            path: format!("{}[]", self.path),
            keys: self.keys,
        }
    }
}

/// A struct's fields, each answered by a recorder at its path.
struct Fields<'k> {
    recorder: Recorder<'k>,
    fields: &'static [&'static str],
    next: usize,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = RecordError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, RecordError> {
        let Some(field) = self.fields.get(self.next) else {
            return Ok(None);
        };
        let key: StrDeserializer<'_, RecordError> = field.into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, RecordError> {
        let field = self.fields[self.next];
        self.next += 1;
        seed.deserialize(self.recorder.child(field))
    }
}

/// An array with one element, so that the element's type is visited once.
struct OneElement<'k> {
    element: Option<Recorder<'k>>,
}

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = RecordError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, RecordError> {
        match self.element.take() {
            Some(element) => seed.deserialize(element).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cover_sections_nested_tables_and_arrays_of_tables() {
        let keys = accepted_keys();
        for expected in [
            "server.listen",
            "gateway.max_header_bytes",
            "gateway.cors_allowed_origins",
            "gateway.tenant_limits[].tenant",
            "executor.tenant_limits[].max_active_sessions",
            "auth.tokens[].sha256",
            "auth.jwt.algorithm",
            "audit.path",
            "telemetry.otlp_endpoint",
        ] {
            assert!(
                keys.iter().any(|key| key == expected),
                "{expected}: {keys:?}"
            );
        }
        assert!(
            !keys
                .iter()
                .any(|key| key == "gateway" || key.ends_with("[]")),
            "only leaf keys: {keys:?}"
        );
    }
}
