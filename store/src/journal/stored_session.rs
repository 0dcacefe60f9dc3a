//! A session record as the memory engine keeps it: metadata as text (see `crate::frozen`).

use agent_runtime::protocol::{JsonObject, SessionStatus};
use serde::{Deserialize, Serialize, Serializer};

use crate::frozen::Frozen;
use crate::model::SessionRecord;

/// Reads and writes exactly like a [`SessionRecord`] (the journal line is the same).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(from = "SessionRecord")]
pub struct StoredSession {
    /// Every field but `metadata`, which is `None` here.
    pub record: SessionRecord,
    pub metadata: Option<Frozen<JsonObject>>,
}

impl StoredSession {
    /// The record as callers see it, metadata parsed.
    pub fn thaw(&self) -> SessionRecord {
        SessionRecord {
            metadata: self.metadata.as_ref().map(Frozen::thaw),
            ..self.record.clone()
        }
    }
}

impl From<SessionRecord> for StoredSession {
    fn from(mut record: SessionRecord) -> Self {
        let metadata = record
            .metadata
            .take()
            .map(|metadata| Frozen::new(&metadata));
        StoredSession { record, metadata }
    }
}

/// [`SessionRecord`]'s fields in its order, metadata written from its text.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RecordFields<'a> {
    tenant_id: &'a str,
    created_by: &'a str,
    session_id: &'a str,
    status: SessionStatus,
    created_at: &'a str,
    updated_at: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a Frozen<JsonObject>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<&'a str>,
}

impl Serialize for StoredSession {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let record = &self.record;
        RecordFields {
            tenant_id: &record.tenant_id,
            created_by: &record.created_by,
            session_id: &record.session_id,
            status: record.status,
            created_at: &record.created_at,
            updated_at: &record.updated_at,
            metadata: self.metadata.as_ref(),
            profile: record.profile.as_deref(),
        }
        .serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_stored_session_reads_and_writes_like_its_record() {
        let record: SessionRecord = serde_json::from_value(json!({
            "tenantId": "t", "createdBy": "u", "sessionId": "s", "status": "active",
            "createdAt": "2026-01-01T00:00:00.000Z", "updatedAt": "2026-01-01T00:00:00.000Z",
            "metadata": { "list": [0, 0, 0], "title": "x" }
        }))
        .unwrap();
        let stored = StoredSession::from(record.clone());
        assert_eq!(stored.thaw(), record);
        assert_eq!(
            serde_json::to_string(&stored).unwrap(),
            serde_json::to_string(&record).unwrap()
        );
        let read: StoredSession =
            serde_json::from_str(&serde_json::to_string(&record).unwrap()).unwrap();
        assert_eq!(read, stored);
    }
}
