-- A session's pending inputs become rows: queueing an input writes that input, instead of the
-- transcript document with the whole queue in it (each queued input rewrote, and WAL-logged, the
-- queue, so queueing n inputs wrote O(n²) bytes). `position` orders them; an input replaced by its
-- `input_id` keeps its place. They are deleted when applied or cancelled, and with their session.
--
-- Documents written before this migration keep their `pendingInputs` until their next write moves
-- them here (store/src/postgres/transcripts.rs), as migration 0006 did for entries.
CREATE SEQUENCE transcript_pending_positions;

CREATE TABLE transcript_pending_inputs (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    input_id   TEXT COLLATE "C" NOT NULL,
    position   BIGINT NOT NULL DEFAULT nextval('transcript_pending_positions'),
    input      json NOT NULL,
    PRIMARY KEY (tenant_id, session_id, input_id)
);
