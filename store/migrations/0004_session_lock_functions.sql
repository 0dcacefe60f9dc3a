-- Every write to a session starts by taking its locks in the order of storage.md §3.5: the
-- session's execution lock (an advisory lock: it also covers sessions without a lease row), then
-- its lease row, then (appends) the stream head. These functions do that in one round trip
-- instead of one per step; the statements run in order inside the caller's transaction.
-- PL/pgSQL rather than SQL functions: it keeps the statements' plans for the connection.

-- The execution lock and the lease row (no row when the session never had a lease).
CREATE FUNCTION lock_session(p_tenant TEXT, p_session TEXT)
RETURNS SETOF execution_leases
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('execution' || chr(31) || p_tenant || chr(31) || p_session, 0));
    RETURN QUERY
        SELECT * FROM execution_leases l
         WHERE l.tenant_id = p_tenant AND l.session_id = p_session
           FOR UPDATE;
END
$$;

-- The same, then the stream head (created at (1, 1) on first use), locked; one row with the
-- lease columns (those of execution_leases after the tenant) NULL when there is no lease row.
CREATE FUNCTION lock_session_stream(p_tenant TEXT, p_session TEXT, p_stream TEXT)
RETURNS TABLE (
    session_id     TEXT,
    lease_id       TEXT,
    owner_id       TEXT,
    fencing_token  BIGINT,
    acquired_at_ms BIGINT,
    renewed_at_ms  BIGINT,
    expires_at_ms  BIGINT,
    released_at_ms BIGINT,
    first_sequence BIGINT,
    next_sequence  BIGINT
)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('execution' || chr(31) || p_tenant || chr(31) || p_session, 0));
    PERFORM 1 FROM execution_leases l
      WHERE l.tenant_id = p_tenant AND l.session_id = p_session
        FOR UPDATE;
    INSERT INTO stream_heads AS h (tenant_id, session_id, stream_name, first_sequence, next_sequence)
    VALUES (p_tenant, p_session, p_stream, 1, 1)
    ON CONFLICT DO NOTHING;
    RETURN QUERY
        SELECT l.session_id, l.lease_id, l.owner_id, l.fencing_token, l.acquired_at_ms, l.renewed_at_ms,
               l.expires_at_ms, l.released_at_ms, h.first_sequence, h.next_sequence
          FROM stream_heads h
          LEFT JOIN execution_leases l
            ON l.tenant_id = h.tenant_id AND l.session_id = h.session_id
         WHERE h.tenant_id = p_tenant AND h.session_id = p_session AND h.stream_name = p_stream
           FOR UPDATE OF h;
END
$$;
