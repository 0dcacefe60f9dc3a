-- Tables of the pgbench limits (agent-runtime-bench pgbench). Recreated before every run.
DROP TABLE IF EXISTS bench_rows, bench_commands, bench_events, bench_durable, bench_entries, bench_transcripts, bench_heads;
CREATE TABLE bench_rows (
    id      BIGSERIAL PRIMARY KEY,
    client  INT NOT NULL,
    payload JSONB NOT NULL
);
-- Shaped like the store's `commands` and `agent_events` tables.
CREATE TABLE bench_commands (
    tenant_id     TEXT COLLATE "C" NOT NULL,
    command_id    TEXT COLLATE "C" NOT NULL,
    status        TEXT NOT NULL,
    result        JSONB,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, command_id)
);
CREATE TABLE bench_events (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    sequence   BIGINT NOT NULL,
    envelope   JSONB NOT NULL,
    PRIMARY KEY (tenant_id, session_id, sequence)
);
-- The rest of the rows one B1 command writes (`bench/sql/b1-rows.sql`): the durable journal,
-- the transcript's entries and document, and the streams' heads.
DROP TABLE IF EXISTS bench_durable, bench_entries, bench_transcripts, bench_heads;
CREATE TABLE bench_durable (LIKE bench_events INCLUDING ALL);
CREATE TABLE bench_entries (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    position   BIGINT NOT NULL,
    entry      JSONB NOT NULL,
    PRIMARY KEY (tenant_id, session_id, position)
);
CREATE TABLE bench_transcripts (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    revision   BIGINT NOT NULL,
    document   JSONB NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);
CREATE TABLE bench_heads (
    tenant_id   TEXT COLLATE "C" NOT NULL,
    session_id  TEXT COLLATE "C" NOT NULL,
    stream_name TEXT COLLATE "C" NOT NULL,
    next_sequence BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, session_id, stream_name)
);
