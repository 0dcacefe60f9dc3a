-- The agent profile a session was created under (issue 22 item 9): resolved by the executor from
-- the session's tenant and kept, like created_by, from the first insert on, so every executor
-- that loads the session later runs it with the same profile.
ALTER TABLE sessions ADD COLUMN profile TEXT;
