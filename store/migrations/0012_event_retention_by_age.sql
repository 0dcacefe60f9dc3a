-- Retention by age (`trim_events_by_age`) finds old agent events by when they occurred; the
-- column is derived from the envelope, so the append function writes nothing new.
ALTER TABLE agent_events
    ADD COLUMN occurred_at TEXT COLLATE "C" GENERATED ALWAYS AS (envelope ->> 'occurredAt') STORED;
CREATE INDEX agent_events_occurred_idx ON agent_events (occurred_at);
