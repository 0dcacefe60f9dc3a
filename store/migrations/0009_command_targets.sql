-- What a sealed command acts on (`seal_command`), and the commands in flight in key order: a
-- process that owns its store reconciles, at start-up, the commands a crash left unfinished.
ALTER TABLE commands ADD COLUMN target JSONB;
CREATE INDEX commands_unfinished_idx ON commands (tenant_id, command_id)
    WHERE status IN ('claimed', 'sealed');
