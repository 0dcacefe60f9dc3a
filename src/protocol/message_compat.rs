//! Transcript messages stored in the older shape, read as the newest strict `ModelMessage`.
//!
//! Transcripts written by earlier versions of this server give each message a free-form
//! `metadata` object: the input and request it records under `metadata.correlation`, a
//! compaction's summary marked by `metadata.provenance` (and the reference v4.2.0's system
//! messages by `metadata._systemSource`). The newest schema rejects `metadata`; stored transcripts
//! are converted when read (never rewritten), so every backend and every old document keeps loading
//! without a migration.

use serde_json::Value;

use super::content::ProvenanceSource;
use super::json::JsonObject;

/// Where other keys of an old `metadata` object go, so nothing stored is lost.
pub const LEGACY_METADATA_EXTENSION: &str = "legacyMetadata";

/// Rewrites a message of the older shape in place: `metadata.correlation` becomes `correlation`,
/// a known `metadata.provenance` / `metadata._systemSource` becomes `provenance.source`, and any
/// other `metadata` key is kept under `extensions.legacyMetadata`. A message without `metadata`
/// is left as it is.
pub fn upgrade_legacy_message(message: &mut JsonObject) {
    let Some(metadata) = message.remove("metadata") else {
        return;
    };
    let Value::Object(mut metadata) = metadata else {
        return;
    };
    // The newest schema requires both ids: a partial correlation stays in the legacy metadata.
    if metadata
        .get("correlation")
        .is_some_and(complete_correlation)
    {
        let correlation = metadata.remove("correlation").unwrap_or_default();
        message.entry("correlation").or_insert(correlation);
    }
    let source = ["provenance", "_systemSource"]
        .into_iter()
        .filter_map(|key| metadata.remove(key))
        .find_map(|value| value.as_str().and_then(ProvenanceSource::parse));
    if let Some(source) = source {
        message.entry("provenance").or_insert_with(|| {
            let mut provenance = JsonObject::new();
            provenance.insert("source".to_owned(), Value::from(source.as_str()));
            Value::Object(provenance)
        });
    }
    if metadata.is_empty() {
        return;
    }
    let extensions = message
        .entry("extensions")
        .or_insert_with(|| Value::Object(JsonObject::new()));
    if let Value::Object(extensions) = extensions {
        extensions
            .entry(LEGACY_METADATA_EXTENSION)
            .or_insert(Value::Object(metadata));
    }
}

fn complete_correlation(correlation: &Value) -> bool {
    ["inputId", "requestId"]
        .iter()
        .all(|key| correlation[key].as_str().is_some_and(|id| !id.is_empty()))
}

/// The message's `correlation` object, in either shape.
pub fn correlation_of(message: &JsonObject) -> Option<&JsonObject> {
    message
        .get("correlation")
        .or_else(|| message.get("metadata")?.get("correlation"))?
        .as_object()
}

/// The input a message records (`correlation.inputId`), in either shape.
pub fn correlated_input_id(message: &JsonObject) -> Option<&str> {
    correlation_of(message)?.get("inputId")?.as_str()
}

/// The message's `provenance.source`, in either shape.
pub fn provenance_of(message: &JsonObject) -> Option<ProvenanceSource> {
    if let Some(source) = message.get("provenance").and_then(|p| p.get("source")) {
        return source.as_str().and_then(ProvenanceSource::parse);
    }
    let metadata = message.get("metadata")?;
    ["provenance", "_systemSource"].into_iter().find_map(|key| {
        metadata
            .get(key)?
            .as_str()
            .and_then(ProvenanceSource::parse)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::content::{ModelMessage, Role};

    fn object(value: Value) -> JsonObject {
        value.as_object().cloned().expect("an object")
    }

    #[test]
    fn an_old_user_message_becomes_a_strict_message_with_its_correlation() {
        let mut message = object(json!({
            "role": "user", "content": "hi",
            "metadata": {"correlation": {"inputId": "i-1", "requestId": "r-1"}}
        }));
        assert_eq!(correlated_input_id(&message), Some("i-1"));
        upgrade_legacy_message(&mut message);
        assert_eq!(
            Value::Object(message.clone()),
            json!({"role": "user", "content": "hi",
                   "correlation": {"inputId": "i-1", "requestId": "r-1"}})
        );
        let parsed: ModelMessage = serde_json::from_value(Value::Object(message)).unwrap();
        assert_eq!(parsed.role, Role::User);
        assert_eq!(parsed.correlation.unwrap().request_id, "r-1");
    }

    #[test]
    fn a_partial_old_correlation_is_kept_as_legacy_metadata() {
        let mut message = object(json!({
            "role": "user", "content": "hi",
            "metadata": {"correlation": {"inputId": "i-1"}}
        }));
        upgrade_legacy_message(&mut message);
        assert_eq!(
            Value::Object(message.clone()),
            json!({"role": "user", "content": "hi",
                   "extensions": {"legacyMetadata": {"correlation": {"inputId": "i-1"}}}})
        );
        let parsed: ModelMessage = serde_json::from_value(Value::Object(message)).unwrap();
        assert!(parsed.correlation.is_none());
    }

    #[test]
    fn old_provenance_markers_become_typed_provenance_and_other_keys_are_kept() {
        for key in ["provenance", "_systemSource"] {
            let mut message = object(json!({
                "role": "system", "content": "summary",
                "metadata": {key: "compaction_summary", "custom": [1, 2]}
            }));
            assert_eq!(
                provenance_of(&message),
                Some(ProvenanceSource::CompactionSummary)
            );
            upgrade_legacy_message(&mut message);
            assert_eq!(
                Value::Object(message.clone()),
                json!({"role": "system", "content": "summary",
                       "provenance": {"source": "compaction_summary"},
                       "extensions": {"legacyMetadata": {"custom": [1, 2]}}})
            );
            assert!(serde_json::from_value::<ModelMessage>(Value::Object(message)).is_ok());
        }
    }

    #[test]
    fn a_message_of_the_newest_shape_is_left_alone_and_metadata_is_rejected() {
        let newest = json!({"role": "user", "content": "x",
                            "correlation": {"inputId": "i", "requestId": "r"}});
        let mut message = object(newest.clone());
        upgrade_legacy_message(&mut message);
        assert_eq!(Value::Object(message), newest);
        let old = json!({"role": "user", "content": "x", "metadata": {}});
        assert!(serde_json::from_value::<ModelMessage>(old).is_err());
    }
}
