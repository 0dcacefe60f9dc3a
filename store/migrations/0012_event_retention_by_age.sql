-- Retention by age (`trim_events_by_age`) finds old agent events by when they occurred; the
-- column is derived from the envelope, so the append function writes nothing new. It is taken
-- from the text, not with `->>`: json operators refuse an envelope whose payload holds `\u0000`
-- (22P05), and such payloads are valid events. The envelope's own `occurredAt` comes before its
-- `data` and after fields that are plain identifiers, so the first match is the envelope's.
ALTER TABLE agent_events
    ADD COLUMN occurred_at TEXT COLLATE "C"
    GENERATED ALWAYS AS (substring(envelope::text FROM '"occurredAt":"([^"]*)"')) STORED;
CREATE INDEX agent_events_occurred_idx ON agent_events (occurred_at);
