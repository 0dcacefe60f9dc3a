-- The retention trim of `append_agent_events` deletes from the head's old first sequence instead
-- of from the start of the session. Rows below it were deleted by earlier trims; until a vacuum
-- removes them, their index entries stay, and a trim without a lower bound walked all of them
-- on every append to a busy session (in B2 the store slowed down run after run as the dead
-- entries piled up). Same signature and results; only the DELETE changes.
CREATE OR REPLACE FUNCTION append_agent_events(
    p_tenant TEXT, p_session TEXT,
    p_first BIGINT, p_next BIGINT, p_new_first BIGINT, p_new_next BIGINT,
    p_sequences BIGINT[], p_envelopes TEXT[],
    p_lease_id TEXT, p_fencing_token BIGINT, p_now BIGINT,
    p_channel TEXT, p_payload TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    lease execution_leases%ROWTYPE;
    head stream_heads%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('execution' || chr(31) || p_tenant || chr(31) || p_session, 0));
    SELECT * INTO lease FROM execution_leases l
     WHERE l.tenant_id = p_tenant AND l.session_id = p_session
       FOR UPDATE;
    SELECT * INTO head FROM stream_heads h
     WHERE h.tenant_id = p_tenant AND h.session_id = p_session AND h.stream_name = 'agent'
       FOR UPDATE;
    IF NOT FOUND OR head.first_sequence <> p_first OR head.next_sequence <> p_next THEN
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
    INSERT INTO agent_events (tenant_id, session_id, sequence, envelope)
    SELECT p_tenant, p_session, t.sequence, t.envelope::json
      FROM UNNEST(p_sequences, p_envelopes) AS t(sequence, envelope);
    UPDATE stream_heads SET first_sequence = p_new_first, next_sequence = p_new_next
     WHERE tenant_id = p_tenant AND session_id = p_session AND stream_name = 'agent';
    IF p_new_first > p_first THEN
        DELETE FROM agent_events
         WHERE tenant_id = p_tenant AND session_id = p_session
           AND sequence >= p_first AND sequence < p_new_first;
    END IF;
    PERFORM pg_notify(p_channel, p_payload);
    RETURN TRUE;
END
$$;
