-- The session retention sweep finds closed sessions by the time they were closed
-- (`list_closed_sessions`), oldest first.
CREATE INDEX sessions_closed_idx ON sessions (updated_at) WHERE status = 'closed';
