-- A transcript change in one statement (issue 21 item 6). The live session is the only writer of
-- its transcript while it holds the lease, so the store keeps the document it last wrote and
-- applies the next change to that copy; `revision` tells whether the copy is still what the row
-- holds. Every write of a document gives it a revision never used before (from the sequence, so
-- also across a delete and a new row, a rollback, or another writer): a copy matches the row
-- only if the row is the write that made the copy. Rows from before this migration keep 0,
-- which no copy has. A write whose copy is stale changes nothing and the full path runs.
CREATE SEQUENCE transcript_revisions;
ALTER TABLE transcripts ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;

-- Takes the session's execution lock and tells whether a write under the fence may be made
-- without further reading: a fenced write only while its lease is the current, unreleased and
-- unexpired one; an unfenced write only for a session that never had a lease. (The rule of
-- `append_agent_events`; anything else is for the store's full path to judge.)
CREATE FUNCTION lock_session_for_fence(
    p_tenant TEXT, p_session TEXT, p_lease_id TEXT, p_fencing_token BIGINT, p_now BIGINT)
RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
DECLARE
    lease execution_leases%ROWTYPE;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('execution' || chr(31) || p_tenant || chr(31) || p_session, 0));
    SELECT * INTO lease FROM execution_leases l
     WHERE l.tenant_id = p_tenant AND l.session_id = p_session;
    IF p_lease_id IS NULL THEN
        RETURN lease.lease_id IS NULL;
    END IF;
    RETURN COALESCE(lease.lease_id = p_lease_id AND lease.fencing_token = p_fencing_token
                    AND lease.released_at_ms IS NULL AND lease.expires_at_ms > p_now, FALSE);
END
$$;

-- The fence, the document locked at the expected revision, then the new entry rows and the
-- document with a new revision, which it returns; NULL, with nothing written, when the fence or
-- the revision cannot be proven.
CREATE FUNCTION write_transcript_at(
    p_tenant TEXT, p_session TEXT,
    p_lease_id TEXT, p_fencing_token BIGINT, p_now BIGINT,
    p_revision BIGINT, p_positions BIGINT[], p_entries TEXT[],
    p_document TEXT, p_updated_at_ms BIGINT)
RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    found_revision BIGINT;
    new_revision BIGINT;
BEGIN
    IF NOT lock_session_for_fence(p_tenant, p_session, p_lease_id, p_fencing_token, p_now) THEN
        RETURN NULL;
    END IF;
    SELECT t.revision INTO found_revision FROM transcripts t
     WHERE t.tenant_id = p_tenant AND t.session_id = p_session
       FOR UPDATE;
    IF NOT FOUND OR found_revision <> p_revision THEN
        RETURN NULL;
    END IF;
    INSERT INTO transcript_entries (tenant_id, session_id, position, entry)
    SELECT p_tenant, p_session, u.p, u.e::json FROM UNNEST(p_positions, p_entries) AS u(p, e);
    new_revision := nextval('transcript_revisions');
    UPDATE transcripts SET document = p_document::json, updated_at_ms = p_updated_at_ms,
           revision = new_revision
     WHERE tenant_id = p_tenant AND session_id = p_session;
    RETURN new_revision;
END
$$;
