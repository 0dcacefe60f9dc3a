-- Fenced writes read the session's lease row instead of locking it (issue 21 item 5, as
-- migration 15 did for the one-statement append). The execution lock they take first is what
-- every change of the session's holder takes too, so the plain read sees the current holder and
-- the fence check still commits with the write; lease renewals, which only move expiries, no
-- longer queue behind journal, transcript and event writes (nor those behind a renewal of
-- hundreds of leases), and the writes no longer log a row lock each. Lease and route changes
-- keep `lock_session`, which locks the row they update.

-- The execution lock, then the lease row as it is (no row when the session never had a lease).
CREATE FUNCTION read_session_lease(p_tenant TEXT, p_session TEXT)
RETURNS SETOF execution_leases
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('execution' || chr(31) || p_tenant || chr(31) || p_session, 0));
    RETURN QUERY
        SELECT * FROM execution_leases l
         WHERE l.tenant_id = p_tenant AND l.session_id = p_session;
END
$$;

-- The execution lock, the lease row as it is, then the stream head (created at (1, 1) on first
-- use), locked. Same signature and results as before.
CREATE OR REPLACE FUNCTION lock_session_stream(p_tenant TEXT, p_session TEXT, p_stream TEXT)
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
