-- A command-shaped transaction: claim the command row, complete it, insert an event.
\set n random(1, 9000000000000000000)
BEGIN;
INSERT INTO bench_commands (tenant_id, command_id, status, updated_at_ms) VALUES ('bench-' || :client_id, 'c-' || :n, 'claimed', 1);
UPDATE bench_commands SET status = 'completed', result = '{"ok": true, "commandId":"c","data":{"status":"started"}}', updated_at_ms = 2 WHERE tenant_id = 'bench-' || :client_id AND command_id = 'c-' || :n;
INSERT INTO bench_events (tenant_id, session_id, sequence, envelope) VALUES ('bench-' || :client_id, 's-' || :client_id, :n, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}');
END;
