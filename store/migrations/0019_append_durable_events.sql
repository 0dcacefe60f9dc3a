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
    head stream_heads%ROWTYPE;
BEGIN
    -- The session's execution lock and the fence, as every fenced write checks them
    -- (`lock_session_for_fence`, migration 17).
    IF NOT lock_session_for_fence(p_tenant, p_session, p_lease_id, p_fencing_token, p_now) THEN
        RETURN FALSE;
    END IF;
    SELECT * INTO head FROM stream_heads h
     WHERE h.tenant_id = p_tenant AND h.session_id = p_session AND h.stream_name = 'durable'
       FOR UPDATE;
    IF NOT FOUND OR head.next_sequence <> p_next THEN
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
