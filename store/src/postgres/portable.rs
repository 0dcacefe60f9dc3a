//! Whole sessions and tenant records in and out of PostgreSQL (`crate::portable`). A session is
//! read in one repeatable-read snapshot and written in one transaction, under its execution lock,
//! with `agent_runtime.importing` set so its history notifies no webhook endpoint (migration
//! 0028). Incoming entries are first applied to an empty engine state, exactly as a JSONL replay
//! would, which checks them and gives them the shape every backend exports.

use agent_runtime::protocol::EventEnvelope;
use async_trait::async_trait;
use sqlx::types::Json;

use super::memories::{COLUMNS as MEMORY_COLUMNS, MemoryRow, record as memory_record};
use super::rows::{LeaseRow, put_lease_row};
use super::sessions::{SessionRow, status_str};
use super::transcripts::{read_whole, whole};
use super::{PostgresStore, Tx, db_error, json_text, lock_session, to_i64, to_u64};
use crate::error::{StoreError, StoreResult};
use crate::frozen::Frozen;
use crate::journal::{CommandLease, JournalEntry, StoredSession};
use crate::memory::State;
use crate::model::{
    CommandTarget, DurableEvent, ExecutionLease, MemoryRecord, SessionRecord, Transcript,
};
use crate::portable::{
    ImportCounts, ImportOutcome, Portable, outcome_against, record_key, session_of,
};

/// A receipt row: `(command_id, lease_id, fingerprint, status, expires_at_ms, result,
/// abandon_reason, sealed_at_ms, updated_at_ms, target)`.
type ReceiptRow = (
    String,
    String,
    String,
    String,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<i64>,
    i64,
    Option<Json<CommandTarget>>,
);

const RECEIPT_COLUMNS: &str = "command_id, lease_id, fingerprint, status, expires_at_ms, \
     result::text, abandon_reason, sealed_at_ms, updated_at_ms, target";

fn receipt_entry(tenant_id: &str, row: ReceiptRow) -> JournalEntry {
    let (
        command_id,
        lease_id,
        fingerprint,
        status,
        expires_at,
        result,
        reason,
        sealed_at,
        updated_at,
        target,
    ) = row;
    let finished = matches!(status.as_str(), "completed" | "abandoned");
    let abandon_reason = (status == "abandoned")
        .then(|| reason.unwrap_or_else(|| "This command was abandoned after sealing".to_owned()));
    JournalEntry::Lease {
        tenant_id: tenant_id.to_owned(),
        command_id,
        lease: Some(CommandLease {
            lease_id,
            command_fingerprint: fingerprint,
            expires_at: expires_at.map(to_u64),
            sealed: sealed_at.is_some(),
            result: result
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .map(|value| Frozen::new(&value)),
            abandon_reason,
            sealed_at: sealed_at.map(to_u64),
            finished_at: finished.then(|| to_u64(updated_at)),
            target: target.map(|target| Box::new(target.0)),
            result_bytes: None,
        }),
    }
}

fn memory_entry(tenant_id: &str, row: MemoryRow) -> JournalEntry {
    JournalEntry::Memory {
        tenant_id: tenant_id.to_owned(),
        record: memory_record(row),
    }
}

/// Rows of the listed kinds, or a refusal naming what is wrong with them.
fn parsed<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> StoreResult<T> {
    serde_json::from_str(text).map_err(|error| {
        StoreError::invalid(format!("A stored {what} does not read back: {error}"))
    })
}

impl PostgresStore {
    /// The session's entries as its transaction `tx` sees them.
    async fn session_entries(
        &self,
        tx: &mut Tx,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Vec<JournalEntry>>> {
        let row: Option<SessionRow> =
            sqlx::query_as("SELECT * FROM sessions WHERE tenant_id = $1 AND session_id = $2")
                .bind(tenant_id)
                .bind(session_id)
                .fetch_optional(&mut **tx)
                .await
                .map_err(db_error)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let record = SessionRecord::try_from(row)?;
        let mut entries = vec![JournalEntry::Session {
            record: StoredSession::from(record),
        }];
        let events: Vec<(String,)> = sqlx::query_as(
            "SELECT envelope::text FROM agent_events WHERE tenant_id = $1 AND session_id = $2 \
             ORDER BY sequence",
        )
        .bind(tenant_id)
        .bind(session_id)
        .fetch_all(&mut **tx)
        .await
        .map_err(db_error)?;
        let mut events: Vec<(EventEnvelope, Option<String>)> = events
            .into_iter()
            .map(|(text,)| {
                EventEnvelope::from_stored_json(text.into())
                    .map(|event| (event, None))
                    .map_err(|error| {
                        StoreError::invalid(format!("A stored event does not read back: {error}"))
                    })
            })
            .collect::<StoreResult<_>>()?;
        let keys: Vec<(String, String)> = sqlx::query_as(
            "SELECT idempotency_key, envelope::text FROM event_keys \
             WHERE tenant_id = $1 AND session_id = $2 ORDER BY idempotency_key",
        )
        .bind(tenant_id)
        .bind(session_id)
        .fetch_all(&mut **tx)
        .await
        .map_err(db_error)?;
        let first = events.first().map_or(0, |(event, _)| event.sequence);
        let mut orphaned = Vec::new();
        for (key, text) in keys {
            let event: EventEnvelope =
                EventEnvelope::from_stored_json(text.into()).map_err(|error| {
                    StoreError::invalid(format!("A stored event key does not read back: {error}"))
                })?;
            let retained = event
                .sequence
                .checked_sub(first)
                .and_then(|offset| events.get_mut(usize::try_from(offset).ok()?))
                .filter(|(kept, _)| kept.event_id == event.event_id);
            match retained {
                Some((_, slot)) => *slot = Some(key),
                None => orphaned.push(JournalEntry::EventKey {
                    tenant_id: tenant_id.to_owned(),
                    session_id: session_id.to_owned(),
                    idempotency_key: key,
                    event,
                }),
            }
        }
        entries.extend(
            events
                .into_iter()
                .map(|(event, idempotency_key)| JournalEntry::Event {
                    tenant_id: tenant_id.to_owned(),
                    session_id: session_id.to_owned(),
                    event,
                    idempotency_key,
                }),
        );
        entries.extend(orphaned);
        let rows = read_whole(tenant_id, session_id)
            .fetch_all(&mut **tx)
            .await
            .map_err(db_error)?;
        if let Some(transcript) = whole(rows) {
            entries.push(JournalEntry::Transcript {
                tenant_id: tenant_id.to_owned(),
                session_id: session_id.to_owned(),
                transcript: Some(transcript),
            });
        }
        let durable: Vec<(String,)> = sqlx::query_as(
            "SELECT event::text FROM durable_events WHERE tenant_id = $1 AND session_id = $2 \
             ORDER BY sequence",
        )
        .bind(tenant_id)
        .bind(session_id)
        .fetch_all(&mut **tx)
        .await
        .map_err(db_error)?;
        for (text,) in durable {
            let event: DurableEvent = parsed(&text, "journal entry")?;
            entries.push(JournalEntry::DurableEvent {
                tenant_id: tenant_id.to_owned(),
                event: Frozen::new(&event),
            });
        }
        let lease: Option<LeaseRow> = sqlx::query_as(
            "SELECT session_id, lease_id, owner_id, fencing_token, acquired_at_ms, \
             renewed_at_ms, expires_at_ms, released_at_ms FROM execution_leases \
             WHERE tenant_id = $1 AND session_id = $2",
        )
        .bind(tenant_id)
        .bind(session_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
        entries.extend(lease.map(|row| JournalEntry::ExecutionLease {
            tenant_id: tenant_id.to_owned(),
            lease: ExecutionLease::from(row),
        }));
        Ok(Some(entries))
    }

    /// Whether anything is kept under the session's id, record or not.
    async fn holds_session_data(
        &self,
        tx: &mut Tx,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<bool> {
        let (held,): (bool,) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE tenant_id = $1 AND session_id = $2) \
             OR EXISTS (SELECT 1 FROM stream_heads WHERE tenant_id = $1 AND session_id = $2) \
             OR EXISTS (SELECT 1 FROM event_keys WHERE tenant_id = $1 AND session_id = $2) \
             OR EXISTS (SELECT 1 FROM transcripts WHERE tenant_id = $1 AND session_id = $2) \
             OR EXISTS (SELECT 1 FROM execution_leases WHERE tenant_id = $1 AND session_id = $2)",
        )
        .bind(tenant_id)
        .bind(session_id)
        .fetch_one(&mut **tx)
        .await
        .map_err(db_error)?;
        Ok(held)
    }

    /// Writes a session's entries (checked, in export order) into an empty place.
    async fn write_session(&self, tx: &mut Tx, entries: Vec<JournalEntry>) -> StoreResult<()> {
        let mut events: Vec<(EventEnvelope, Option<String>)> = Vec::new();
        let mut keys: Vec<(String, EventEnvelope)> = Vec::new();
        let mut durable: Vec<Frozen<DurableEvent>> = Vec::new();
        let mut tenant = String::new();
        let mut session = String::new();
        for entry in entries {
            match entry {
                JournalEntry::Session { record } => {
                    let record = record.thaw();
                    tenant = record.tenant_id.clone();
                    session = record.session_id.clone();
                    insert_session(tx, &record).await?;
                }
                JournalEntry::Event {
                    event,
                    idempotency_key,
                    ..
                } => events.push((event, idempotency_key)),
                JournalEntry::EventKey {
                    idempotency_key,
                    event,
                    ..
                } => keys.push((idempotency_key, event)),
                JournalEntry::Transcript {
                    transcript: Some(transcript),
                    ..
                } => insert_transcript(tx, &tenant, transcript).await?,
                JournalEntry::DurableEvent { event, .. } => durable.push(event),
                JournalEntry::ExecutionLease { lease, .. } => {
                    put_lease_row(tx, &tenant, &lease).await?
                }
                other => {
                    return Err(StoreError::invalid(format!(
                        "A `{}` entry is not part of a session",
                        other.kind()
                    )));
                }
            }
        }
        keys.extend(
            events
                .iter()
                .filter_map(|(event, key)| Some((key.clone()?, event.clone()))),
        );
        insert_events(tx, &tenant, &session, &events).await?;
        if !keys.is_empty() {
            let (names, texts): (Vec<String>, Vec<String>) = keys
                .into_iter()
                .map(|(key, event)| (key, event.json().to_string()))
                .unzip();
            sqlx::query(
                "INSERT INTO event_keys (tenant_id, session_id, idempotency_key, envelope) \
                 SELECT $1, $2, k, e::json FROM unnest($3::text[], $4::text[]) AS u(k, e)",
            )
            .bind(&tenant)
            .bind(&session)
            .bind(&names)
            .bind(&texts)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        }
        if !durable.is_empty() {
            let texts: Vec<String> = durable.iter().map(json_text).collect();
            let sequences: Vec<i64> = (1..=texts.len() as i64).collect();
            sqlx::query(
                "WITH head AS (INSERT INTO stream_heads (tenant_id, session_id, stream_name, \
                   first_sequence, next_sequence) VALUES ($1, $2, 'durable', 1, $5)) \
                 INSERT INTO durable_events (tenant_id, session_id, sequence, event) \
                 SELECT $1, $2, s, e::json FROM unnest($3::bigint[], $4::text[]) AS u(s, e)",
            )
            .bind(&tenant)
            .bind(&session)
            .bind(&sequences)
            .bind(&texts)
            .bind(texts.len() as i64 + 1)
            .execute(&mut **tx)
            .await
            .map_err(db_error)?;
        }
        Ok(())
    }

    async fn import_receipt(
        &self,
        tx: &mut Tx,
        tenant_id: &str,
        command_id: &str,
        lease: &CommandLease,
    ) -> StoreResult<bool> {
        let status = if lease.abandon_reason.is_some() {
            "abandoned"
        } else if lease.result.is_some() {
            "completed"
        } else if lease.sealed {
            "sealed"
        } else {
            "claimed"
        };
        let now = self.now();
        let created = lease.sealed_at.or(lease.finished_at).unwrap_or(now);
        let updated = lease.finished_at.or(lease.sealed_at).unwrap_or(now);
        let result = lease.result.as_ref().map(json_text);
        let inserted = sqlx::query(
            "INSERT INTO commands (tenant_id, command_id, fingerprint, lease_id, status, \
             expires_at_ms, result, result_bytes, abandon_reason, sealed_at_ms, created_at_ms, \
             updated_at_ms, target) VALUES ($1, $2, $3, $4, $5, $6, $7::json, octet_length($7::text), \
             $8, $9, $10, $11, $12::jsonb) ON CONFLICT (tenant_id, command_id) DO NOTHING",
        )
        .bind(tenant_id)
        .bind(command_id)
        .bind(&lease.command_fingerprint)
        .bind(&lease.lease_id)
        .bind(status)
        .bind(lease.expires_at.map(to_i64))
        .bind(result)
        .bind(&lease.abandon_reason)
        .bind(lease.sealed_at.map(to_i64))
        .bind(to_i64(created))
        .bind(to_i64(updated))
        .bind(lease.target.as_deref().map(json_text))
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
        Ok(inserted.rows_affected() == 1)
    }

    async fn import_memory(
        &self,
        tx: &mut Tx,
        tenant_id: &str,
        record: &MemoryRecord,
    ) -> StoreResult<bool> {
        let inserted = sqlx::query(
            "INSERT INTO agent_memories (tenant_id, scope, name, description, memory_type, body, \
             updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (tenant_id, scope, name) DO NOTHING",
        )
        .bind(tenant_id)
        .bind(&record.scope)
        .bind(&record.name)
        .bind(&record.description)
        .bind(&record.memory_type)
        .bind(&record.body)
        .bind(to_i64(record.updated_at_ms))
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
        Ok(inserted.rows_affected() == 1)
    }

    async fn memory(
        &self,
        tx: &mut Tx,
        tenant_id: &str,
        record: &MemoryRecord,
    ) -> StoreResult<Option<JournalEntry>> {
        let row: Option<MemoryRow> = sqlx::query_as(&format!(
            "SELECT {MEMORY_COLUMNS} FROM agent_memories \
             WHERE tenant_id = $1 AND scope = $2 AND name = $3"
        ))
        .bind(tenant_id)
        .bind(&record.scope)
        .bind(&record.name)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
        Ok(row.map(|row| memory_entry(tenant_id, row)))
    }

    async fn receipt(
        &self,
        tx: &mut Tx,
        tenant_id: &str,
        command_id: &str,
    ) -> StoreResult<Option<JournalEntry>> {
        let row: Option<ReceiptRow> = sqlx::query_as(&format!(
            "SELECT {RECEIPT_COLUMNS} FROM commands WHERE tenant_id = $1 AND command_id = $2"
        ))
        .bind(tenant_id)
        .bind(command_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_error)?;
        Ok(row.map(|row| receipt_entry(tenant_id, row)))
    }
}

async fn insert_session(tx: &mut Tx, record: &SessionRecord) -> StoreResult<()> {
    let metadata = record.metadata.clone().unwrap_or_default();
    sqlx::query(
        "INSERT INTO sessions (tenant_id, session_id, created_by, status, created_at, \
         updated_at, metadata, profile) VALUES ($1, $2, $3, $4, $5, $6, $7::json, $8)",
    )
    .bind(&record.tenant_id)
    .bind(&record.session_id)
    .bind(&record.created_by)
    .bind(status_str(record.status))
    .bind(&record.created_at)
    .bind(&record.updated_at)
    .bind(json_text(&metadata))
    .bind(&record.profile)
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

async fn insert_events(
    tx: &mut Tx,
    tenant_id: &str,
    session_id: &str,
    events: &[(EventEnvelope, Option<String>)],
) -> StoreResult<()> {
    let (Some((first, _)), Some((last, _))) = (events.first(), events.last()) else {
        return Ok(());
    };
    let sequences: Vec<i64> = events
        .iter()
        .map(|(event, _)| to_i64(event.sequence))
        .collect();
    let texts: Vec<String> = events
        .iter()
        .map(|(event, _)| event.json().to_string())
        .collect();
    sqlx::query(
        "WITH head AS (INSERT INTO stream_heads (tenant_id, session_id, stream_name, \
           first_sequence, next_sequence) VALUES ($1, $2, 'agent', $5, $6)) \
         INSERT INTO agent_events (tenant_id, session_id, sequence, envelope) \
         SELECT $1, $2, s, e::json FROM unnest($3::bigint[], $4::text[]) AS u(s, e)",
    )
    .bind(tenant_id)
    .bind(session_id)
    .bind(&sequences)
    .bind(&texts)
    .bind(to_i64(first.sequence))
    .bind(to_i64(last.sequence + 1))
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

async fn insert_transcript(tx: &mut Tx, tenant_id: &str, mut doc: Transcript) -> StoreResult<()> {
    let entries = std::mem::take(&mut doc.entries);
    let pending = std::mem::take(&mut doc.pending_inputs);
    let texts: Vec<String> = entries.iter().map(json_text).collect();
    let positions: Vec<i64> = (0..texts.len() as i64).collect();
    sqlx::query(
        "WITH appended AS (INSERT INTO transcript_entries (tenant_id, session_id, position, entry) \
           SELECT $1, $2, p, e::json FROM unnest($3::bigint[], $4::text[]) AS u(p, e)) \
         INSERT INTO transcripts (tenant_id, session_id, document, updated_at_ms, revision) \
         VALUES ($1, $2, $5::json, $6, nextval('transcript_revisions'))",
    )
    .bind(tenant_id)
    .bind(&doc.session_id)
    .bind(&positions)
    .bind(&texts)
    .bind(json_text(&doc))
    .bind(to_i64(doc.last_activity_ms))
    .execute(&mut **tx)
    .await
    .map_err(db_error)?;
    for input in pending {
        let input_id = input
            .get("inputId")
            .and_then(|id| id.as_str())
            .ok_or_else(|| StoreError::invalid("A pending input has no inputId"))?
            .to_owned();
        sqlx::query(
            "INSERT INTO transcript_pending_inputs (tenant_id, session_id, input_id, input) \
             VALUES ($1, $2, $3, $4::json)",
        )
        .bind(tenant_id)
        .bind(&doc.session_id)
        .bind(input_id)
        .bind(json_text(&input))
        .execute(&mut **tx)
        .await
        .map_err(db_error)?;
    }
    Ok(())
}

#[async_trait]
impl Portable for PostgresStore {
    async fn list_tenants(&self, after: Option<&str>, limit: u32) -> StoreResult<Vec<String>> {
        self.ensure_open()?;
        let after = after.unwrap_or_default();
        let rows: Vec<(String,)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT tenant_id FROM (SELECT tenant_id FROM sessions \
                     UNION SELECT tenant_id FROM commands \
                     UNION SELECT tenant_id FROM agent_memories) t \
                     WHERE tenant_id > $1 ORDER BY tenant_id LIMIT $2",
                )
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(self.pool())
            })
            .await?;
        Ok(rows.into_iter().map(|(tenant,)| tenant).collect())
    }

    async fn list_session_ids(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<String>> {
        self.ensure_open()?;
        let after = after.unwrap_or_default();
        let rows: Vec<(String,)> = self
            .reading(|| {
                sqlx::query_as(
                    "SELECT session_id FROM sessions WHERE tenant_id = $1 AND session_id > $2 \
                     ORDER BY session_id LIMIT $3",
                )
                .bind(tenant_id)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(self.pool())
            })
            .await?;
        Ok(rows.into_iter().map(|(session,)| session).collect())
    }

    async fn export_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Vec<JournalEntry>>> {
        let mut tx = self
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        let entries = self.session_entries(&mut tx, tenant_id, session_id).await?;
        tx.rollback().await.map_err(db_error)?;
        Ok(entries)
    }

    async fn export_receipts(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<JournalEntry>> {
        self.ensure_open()?;
        let after = after.unwrap_or_default();
        let sql = format!(
            "SELECT {RECEIPT_COLUMNS} FROM commands WHERE tenant_id = $1 AND command_id > $2 \
             ORDER BY command_id LIMIT $3"
        );
        let rows: Vec<ReceiptRow> = self
            .reading(|| {
                sqlx::query_as(&sql)
                    .bind(tenant_id)
                    .bind(after)
                    .bind(i64::from(limit))
                    .fetch_all(self.pool())
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| receipt_entry(tenant_id, row))
            .collect())
    }

    async fn export_memories(&self, tenant_id: &str) -> StoreResult<Vec<JournalEntry>> {
        self.ensure_open()?;
        let sql = format!(
            "SELECT {MEMORY_COLUMNS} FROM agent_memories WHERE tenant_id = $1 ORDER BY scope, name"
        );
        let rows: Vec<MemoryRow> = self
            .reading(|| sqlx::query_as(&sql).bind(tenant_id).fetch_all(self.pool()))
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| memory_entry(tenant_id, row))
            .collect())
    }

    async fn import_session(&self, entries: Vec<JournalEntry>) -> StoreResult<ImportOutcome> {
        let (tenant_id, session_id) = session_of(&entries)?;
        let key = (tenant_id.clone(), session_id.clone());
        let mut checked = State::default();
        for entry in entries {
            checked
                .apply(entry, self.options().max_events_per_session.max(1))
                .map_err(StoreError::invalid)?;
        }
        let incoming = checked
            .session_entries(&key)
            .ok_or_else(|| StoreError::invalid("A session's entries must hold its record"))?;
        // Unflushed: an import is made durable as a whole by `flush_imports`.
        let mut tx = self.begin_unflushed().await?;
        sqlx::query("SET LOCAL agent_runtime.importing = 'on'")
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        lock_session(&mut tx, &tenant_id, &session_id).await?;
        if self
            .holds_session_data(&mut tx, &tenant_id, &session_id)
            .await?
        {
            let existing = self
                .session_entries(&mut tx, &tenant_id, &session_id)
                .await?
                .unwrap_or_default();
            tx.rollback().await.map_err(db_error)?;
            let what = format!("Session {session_id} of tenant {tenant_id}");
            return Ok(outcome_against(Some(&existing), &incoming, &what)
                .unwrap_or(ImportOutcome::Unchanged));
        }
        self.write_session(&mut tx, incoming).await?;
        self.commit(tx).await?;
        Ok(ImportOutcome::Imported)
    }

    async fn flush_imports(&self) -> StoreResult<()> {
        // A transaction with an id commits synchronously, and its commit record flushes the WAL
        // before it: every unflushed import's commit with it.
        let mut tx = self.begin().await?;
        sqlx::query("SELECT pg_current_xact_id()")
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        self.commit(tx).await
    }

    async fn import_records(&self, entries: Vec<JournalEntry>) -> StoreResult<ImportCounts> {
        // Unflushed: an import is made durable as a whole by `flush_imports`.
        let mut tx = self.begin_unflushed().await?;
        let mut counts = ImportCounts::default();
        for entry in entries {
            let (kind, id) = record_key(&entry)?;
            let (inserted, existing) = match &entry {
                JournalEntry::Lease {
                    tenant_id,
                    command_id,
                    lease: Some(lease),
                } => match self
                    .import_receipt(&mut tx, tenant_id, command_id, lease)
                    .await?
                {
                    true => (true, None),
                    false => (false, self.receipt(&mut tx, tenant_id, command_id).await?),
                },
                JournalEntry::Memory { tenant_id, record } => {
                    match self.import_memory(&mut tx, tenant_id, record).await? {
                        true => (true, None),
                        false => (false, self.memory(&mut tx, tenant_id, record).await?),
                    }
                }
                _ => unreachable!("record_key accepts receipts and memories only"),
            };
            let outcome = match inserted {
                true => ImportOutcome::Imported,
                false => outcome_against(
                    existing.as_ref().map(std::slice::from_ref),
                    std::slice::from_ref(&entry),
                    &format!("The {kind} {id}"),
                )
                .unwrap_or(ImportOutcome::Unchanged),
            };
            counts.add(kind, &id, outcome);
        }
        self.commit(tx).await?;
        Ok(counts)
    }
}
