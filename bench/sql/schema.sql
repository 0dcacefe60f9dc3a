-- Tables of the pgbench limits (agent-runtime-bench pgbench). Recreated before every run.
DROP TABLE IF EXISTS bench_rows, bench_commands, bench_events;
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
