-- A transcript's entries become rows: a turn appends its messages instead of writing the whole
-- document again (a long session's every mutation rewrote, and WAL-logged, all of its history).
-- `transcripts.document` keeps the rest of the document (pending inputs, summary, history
-- progress, times) with `entries` empty. `position` counts from 0 in transcript order; entries
-- are only ever appended, and deleted with their transcript.
--
-- Documents written before this migration keep their entries until their next write moves them
-- here (store/src/postgres/transcripts.rs): moving them in SQL would need PostgreSQL to look
-- inside the JSON objects, which it refuses for content holding NUL (\u0000), see 0005.
CREATE TABLE transcript_entries (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    position   BIGINT NOT NULL,
    entry      json NOT NULL,
    PRIMARY KEY (tenant_id, session_id, position)
);
