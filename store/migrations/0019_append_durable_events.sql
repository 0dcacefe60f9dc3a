-- A journal append in one statement (issue 21), as `append_agent_events` is for the agent stream.
-- Given the durable head this process's last journal write of the session left, it takes the
-- session's execution lock, checks that head and the fence, inserts the entries and moves the
-- head. When it cannot prove both it changes nothing and answers FALSE, and the caller takes the
-- locked path (`lock_session_stream`), which decides with the store's own rules.
CREATE FUNCTION append_durable_events(
    p_tenant TEXT, p_session TEXT, p_next BIGINT,
    p_sequences BIGINT[], p_events TEXT[],
    p_lease_id TEXT, p_fencing_token BIGINT, p_now BIGINT)
RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    lease execution_leases%ROWTYPE;
    head stream_heads%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('execution' || chr(31) || p_tenant || chr(31) || p_session, 0));
    -- A plain read after the execution lock, which every change of holder takes (migration 15).
    SELECT * INTO lease FROM execution_leases l
     WHERE l.tenant_id = p_tenant AND l.session_id = p_session;
    SELECT * INTO head FROM stream_heads h
     WHERE h.tenant_id = p_tenant AND h.session_id = p_session AND h.stream_name = 'durable'
       FOR UPDATE;
    IF NOT FOUND OR head.next_sequence <> p_next THEN
        RETURN FALSE;
    END IF;
    IF p_lease_id IS NULL THEN
        -- Unfenced: only for a session that has no lease row.
        IF lease.lease_id IS NOT NULL THEN
            RETURN FALSE;
        END IF;
    ELSIF NOT COALESCE(
            lease.lease_id = p_lease_id
            AND lease.fencing_token = p_fencing_token
            AND lease.released_at_ms IS NULL
            AND lease.expires_at_ms > p_now, FALSE) THEN
        RETURN FALSE;
    END IF;
    INSERT INTO durable_events (tenant_id, session_id, sequence, event)
    SELECT p_tenant, p_session, t.sequence, t.event::json
      FROM UNNEST(p_sequences, p_events) AS t(sequence, event);
    UPDATE stream_heads SET next_sequence = p_next + cardinality(p_sequences)
     WHERE tenant_id = p_tenant AND session_id = p_session AND stream_name = 'durable';
    RETURN TRUE;
END
$$;
