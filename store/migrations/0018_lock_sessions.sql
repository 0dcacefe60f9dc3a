-- The execution locks of many sessions, in the order given (issue 21 item 3). A batch of the
-- process's one commit queue that carries event appends and other writes takes the locks of all
-- its sessions first, in the one order every batch and write uses (the store sorts the keys), so
-- that its later statements only take locks it holds: two batches in flight cannot deadlock.
CREATE FUNCTION lock_sessions(p_tenants TEXT[], p_sessions TEXT[])
RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    i INT;
BEGIN
    FOR i IN 1 .. COALESCE(array_length(p_sessions, 1), 0) LOOP
        PERFORM pg_advisory_xact_lock(
            hashtextextended('execution' || chr(31) || p_tenants[i] || chr(31) || p_sessions[i], 0));
    END LOOP;
END
$$;
