-- Columns that hold user content (session metadata, command results, transcripts, durable
-- events, keyed event envelopes) become `json`, like agent_events.envelope in 0003: any JSON
-- string is valid content, NUL (\u0000) included, which jsonb refuses ("unsupported Unicode
-- escape sequence"); the JSONL store keeps it, and so must this one. Nothing queries inside
-- these documents, so nothing needs jsonb.
ALTER TABLE commands ALTER COLUMN result TYPE json USING result::json;
ALTER TABLE sessions ALTER COLUMN metadata DROP DEFAULT;
ALTER TABLE sessions ALTER COLUMN metadata TYPE json USING metadata::json;
ALTER TABLE sessions ALTER COLUMN metadata SET DEFAULT '{}';
ALTER TABLE event_keys ALTER COLUMN envelope TYPE json USING envelope::json;
ALTER TABLE durable_events ALTER COLUMN event TYPE json USING event::json;
ALTER TABLE transcripts ALTER COLUMN document TYPE json USING document::json;
