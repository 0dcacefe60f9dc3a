-- The receipt reaper deletes finished commands a retention period after they finished
-- (`reap_command_receipts`); this keeps each pass an index range scan on a large table.
CREATE INDEX commands_finished_idx ON commands (updated_at_ms) WHERE status IN ('completed', 'abandoned');
