-- Appends of many sessions in one statement, so one commit (and one WAL flush) carries them all:
-- the store's commit queue (`append_queue.rs`) sends everything that piled up while the previous
-- batch committed. Each session is appended exactly as `append_agent_events` does it (its locks,
-- its head and fence checks, its trim), in the order given, which the caller sorts by session so
-- that two processes' batches lock sessions in one order. Item i of the per-session arrays owns
-- the next p_counts[i] elements of p_sequences and p_envelopes. Returns, per session, whether its
-- append was made (FALSE: head moved or fence not held, nothing of it written).
CREATE OR REPLACE FUNCTION append_agent_events_batch(
    p_tenants TEXT[], p_sessions TEXT[],
    p_first BIGINT[], p_next BIGINT[], p_new_first BIGINT[], p_new_next BIGINT[],
    p_counts INT[], p_sequences BIGINT[], p_envelopes TEXT[],
    p_lease_ids TEXT[], p_fencing_tokens BIGINT[], p_now BIGINT)
RETURNS BOOLEAN[]
LANGUAGE plpgsql AS $$
DECLARE
    done BOOLEAN[] := '{}';
    offset_at INT := 0;
    i INT;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_sessions, 1), 0) LOOP
        done := done || append_agent_events(
            p_tenants[i], p_sessions[i],
            p_first[i], p_next[i], p_new_first[i], p_new_next[i],
            p_sequences[offset_at + 1 : offset_at + p_counts[i]],
            p_envelopes[offset_at + 1 : offset_at + p_counts[i]],
            p_lease_ids[i], p_fencing_tokens[i], p_now, NULL, NULL);
        offset_at := offset_at + p_counts[i];
    END LOOP;
    RETURN done;
END
$$;
