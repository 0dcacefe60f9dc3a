-- The memories of the memory tools (tools.md §2.7): one row per (tenant, scope, name). The
-- executor's configuration chooses the scope (the whole tenant, or one user of it); saves of a
-- new name count the scope's rows under a per-scope advisory lock, so the quota holds under
-- concurrent saves.
CREATE TABLE agent_memories (
    tenant_id     TEXT COLLATE "C" NOT NULL,
    scope         TEXT COLLATE "C" NOT NULL,
    name          TEXT COLLATE "C" NOT NULL,
    description   TEXT NOT NULL,
    memory_type   TEXT NOT NULL,
    body          TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, scope, name)
);
