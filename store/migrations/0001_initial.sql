-- Schema version 1 of the PostgreSQL store (storage.md §3.2, adapted).
--
-- * Every table is keyed by tenant first; only `workers` is global.
-- * Times the store compares (claim and lease expiries, heartbeats, the abandonment window) are
--   epoch milliseconds taken from the store's injected clock, never NOW(), so that every backend
--   expires things on the same clock and tests can move it.
-- * Protocol timestamps (`createdAt`, `updatedAt`) are kept as the ISO-8601 strings clients see.
-- * Identifiers and those strings use the "C" collation so that ordering is bytewise, exactly
--   like the memory and JSONL backends (decision S6).

-- Command receipts (§1.2). expires_at_ms NULL means "never" (sealed, completed, abandoned).
CREATE TABLE commands (
    tenant_id      TEXT COLLATE "C" NOT NULL,
    command_id     TEXT COLLATE "C" NOT NULL,
    fingerprint    TEXT NOT NULL,
    lease_id       TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('claimed', 'sealed', 'completed', 'abandoned')),
    expires_at_ms  BIGINT,
    result         JSONB,
    abandon_reason TEXT,
    sealed_at_ms   BIGINT,
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, command_id)
);
-- The abandonment sweep only looks at sealed commands.
CREATE INDEX commands_sealed_idx ON commands (sealed_at_ms) WHERE status = 'sealed';

-- Session records (§1.3).
CREATE TABLE sessions (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    created_by TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('active', 'closed')),
    created_at TEXT COLLATE "C" NOT NULL,
    updated_at TEXT COLLATE "C" NOT NULL,
    metadata   JSONB NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, session_id)
);
CREATE INDEX sessions_listing_idx ON sessions (tenant_id, updated_at DESC, session_id ASC);

-- One head row per stream; appenders lock it FOR UPDATE, which serialises sequence assignment
-- per stream (no gaps, no duplicates) without SERIAL sequences (§3.3).
CREATE TABLE stream_heads (
    tenant_id      TEXT COLLATE "C" NOT NULL,
    session_id     TEXT COLLATE "C" NOT NULL,
    stream_name    TEXT NOT NULL CHECK (stream_name IN ('agent', 'durable')),
    first_sequence BIGINT NOT NULL CHECK (first_sequence >= 1),
    next_sequence  BIGINT NOT NULL CHECK (next_sequence >= first_sequence),
    PRIMARY KEY (tenant_id, session_id, stream_name)
);

-- The agent event log behind SSE (§1.4), trimmed to the retention from the front.
CREATE TABLE agent_events (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    sequence   BIGINT NOT NULL CHECK (sequence >= 1),
    envelope   JSONB NOT NULL,
    PRIMARY KEY (tenant_id, session_id, sequence)
);

-- Idempotency keys of agent events: never trimmed with the log.
CREATE TABLE event_keys (
    tenant_id       TEXT COLLATE "C" NOT NULL,
    session_id      TEXT COLLATE "C" NOT NULL,
    idempotency_key TEXT COLLATE "C" NOT NULL,
    envelope        JSONB NOT NULL,
    PRIMARY KEY (tenant_id, session_id, idempotency_key)
);

-- The durable execution journal (§7.1): no retention, a per-session quota.
CREATE TABLE durable_events (
    tenant_id  TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    sequence   BIGINT NOT NULL CHECK (sequence >= 1),
    event      JSONB NOT NULL,
    PRIMARY KEY (tenant_id, session_id, sequence)
);

-- The transcript projection (§8): one document per session.
CREATE TABLE transcripts (
    tenant_id     TEXT COLLATE "C" NOT NULL,
    session_id    TEXT COLLATE "C" NOT NULL,
    document      JSONB NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);

-- One execution lease row per session, overwritten by every acquire (§4.1).
CREATE TABLE execution_leases (
    tenant_id      TEXT COLLATE "C" NOT NULL,
    session_id     TEXT COLLATE "C" NOT NULL,
    lease_id       TEXT NOT NULL,
    owner_id       TEXT NOT NULL,
    fencing_token  BIGINT NOT NULL CHECK (fencing_token > 0),
    acquired_at_ms BIGINT NOT NULL,
    renewed_at_ms  BIGINT NOT NULL,
    expires_at_ms  BIGINT NOT NULL,
    released_at_ms BIGINT,
    PRIMARY KEY (tenant_id, session_id)
);
CREATE INDEX execution_leases_open_idx ON execution_leases (expires_at_ms) WHERE released_at_ms IS NULL;

-- The global worker registry (§4.5).
CREATE TABLE workers (
    worker_id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    status               TEXT NOT NULL CHECK (status IN ('active', 'draining', 'offline')),
    capacity             BIGINT NOT NULL CHECK (capacity > 0),
    metadata             JSONB NOT NULL DEFAULT '{}',
    registered_at_ms     BIGINT NOT NULL,
    last_heartbeat_at_ms BIGINT NOT NULL,
    lease_expires_at_ms  BIGINT NOT NULL,
    draining_at_ms       BIGINT
);

-- Session routes (§4.4).
CREATE TABLE session_routes (
    tenant_id           TEXT COLLATE "C" NOT NULL,
    session_id          TEXT COLLATE "C" NOT NULL,
    state               TEXT NOT NULL CHECK (state IN ('queued', 'provisioning', 'running',
                            'waiting_approval', 'suspended', 'idle', 'completed', 'failed')),
    priority            BIGINT NOT NULL DEFAULT 0,
    attempt             BIGINT NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    fencing_token       BIGINT NOT NULL DEFAULT 0 CHECK (fencing_token >= 0),
    worker_id           TEXT COLLATE "C",
    lease_id            TEXT,
    lease_expires_at_ms BIGINT,
    queued_at_ms        BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    metadata            JSONB NOT NULL DEFAULT '{}',
    failure             JSONB,
    PRIMARY KEY (tenant_id, session_id)
);
CREATE INDEX session_routes_queue_idx
    ON session_routes (state, priority DESC, queued_at_ms ASC, tenant_id, session_id);
CREATE INDEX session_routes_worker_idx ON session_routes (worker_id, state, lease_expires_at_ms);
