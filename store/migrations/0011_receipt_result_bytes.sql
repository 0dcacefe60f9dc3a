-- The size of a stored result (its JSON text), for the per-tenant budget of stored results
-- (`reap_receipts_over_budget`); NULL on rows completed before it, which count their result.
ALTER TABLE commands ADD COLUMN result_bytes BIGINT;
