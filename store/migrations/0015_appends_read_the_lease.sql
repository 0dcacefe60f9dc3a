-- Appends stop locking the session's lease row (issue 21 item 5, risk R3). A batch of appends
-- (migration 14) held the lease rows of many sessions while the lease renewal, which updates
-- every lease of an executor in one statement, and the recovery sweep took them in another
-- order: deadlocks (40P01) failed renewals until executors dropped their sessions. The fence is
-- still checked in the append's own transaction, under the session's execution lock. Same
-- signature and results.
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
    -- A plain read, after the execution lock: every change of who holds the session (acquire,
    -- claim, release by its holder) takes that lock, so this sees the current holder. Renewals
    -- and the recovery sweep change only the expiry or the release of expired leases, and need
    -- not wait for appends, nor appends for them.
    SELECT * INTO lease FROM execution_leases l
     WHERE l.tenant_id = p_tenant AND l.session_id = p_session;
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
    IF p_channel IS NOT NULL THEN
        PERFORM pg_notify(p_channel, p_payload);
    END IF;
    RETURN TRUE;
END
$$;
