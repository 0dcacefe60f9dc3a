-- What a closed session retains (its record, events and their keys, durable journal, transcript),
-- in stored bytes: measured once by the closed-session budget sweep (a closed session no longer
-- grows) so that each tenant's closed sessions can be kept within a byte budget, newest first.
-- NULL until measured.
ALTER TABLE sessions ADD COLUMN retained_bytes BIGINT;
