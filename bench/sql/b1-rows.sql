-- The rows one B1 command (`input.submit` and the request it starts) writes in the product, in
-- the product's three transactions, as plain SQL: no server, no fence check, no stored function.
-- Counted during B1 on `serve --store postgres` with `pg_stat_user_tables`, per command: the
-- receipt inserted and completed, 8 stream events, 2 journal entries, 2 transcript entries, 2
-- transcript documents and 4 stream heads updated. A pgbench transaction here is one command, so
-- its TPS bounds B1 with the server's own CPU taken as zero.
\set n random(1, 9000000000000000000)
\set sid :client_id * 8 + random(0, 7)
\set seq :n % 1000000000 * 16
-- The claim: flushed by the step that follows it.
BEGIN;
SET LOCAL synchronous_commit = off;
INSERT INTO bench_commands (tenant_id, command_id, status, updated_at_ms) VALUES ('bench', 'c-' || :n, 'sealed', 1);
END;
-- The request's start: its events, journal entry, user message, and the receipt's result.
BEGIN;
INSERT INTO bench_events (tenant_id, session_id, sequence, envelope) VALUES ('bench', 's-' || :sid, :seq::bigint + 0, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}'), ('bench', 's-' || :sid, :seq::bigint + 1, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}');
INSERT INTO bench_heads VALUES ('bench', 's-' || :sid, 'agent', 2) ON CONFLICT (tenant_id, session_id, stream_name) DO UPDATE SET next_sequence = bench_heads.next_sequence + 2;
INSERT INTO bench_durable (tenant_id, session_id, sequence, envelope) VALUES ('bench', 's-' || :sid, :seq::bigint, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}');
INSERT INTO bench_heads VALUES ('bench', 's-' || :sid, 'durable', 1) ON CONFLICT (tenant_id, session_id, stream_name) DO UPDATE SET next_sequence = bench_heads.next_sequence + 1;
INSERT INTO bench_entries (tenant_id, session_id, position, entry) VALUES ('bench', 's-' || :sid, :seq::bigint, '{"id":"m-V1StGXR8_Z5jdHi6B","role":"user","content":"hello from client 1, input 42"}');
INSERT INTO bench_transcripts VALUES ('bench', 's-' || :sid, 1, '{"summary": null}') ON CONFLICT (tenant_id, session_id) DO UPDATE SET revision = bench_transcripts.revision + 1;
UPDATE bench_commands SET status = 'completed', result = '{"ok": true, "commandId":"c","data":{"status":"started"}}', updated_at_ms = 2 WHERE tenant_id = 'bench' AND command_id = 'c-' || :n;
END;
-- The request's end: its events, journal entry and the answer's message.
BEGIN;
INSERT INTO bench_events (tenant_id, session_id, sequence, envelope) VALUES ('bench', 's-' || :sid, :seq::bigint + 2, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}'), ('bench', 's-' || :sid, :seq::bigint + 3, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}'), ('bench', 's-' || :sid, :seq::bigint + 4, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}'), ('bench', 's-' || :sid, :seq::bigint + 5, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}'), ('bench', 's-' || :sid, :seq::bigint + 6, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}'), ('bench', 's-' || :sid, :seq::bigint + 7, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}');
UPDATE bench_heads SET next_sequence = next_sequence + 6 WHERE tenant_id = 'bench' AND session_id = 's-' || :sid AND stream_name = 'agent';
INSERT INTO bench_durable (tenant_id, session_id, sequence, envelope) VALUES ('bench', 's-' || :sid, :seq::bigint + 1, '{"protocolVersion":1,"eventId":"V1StGXR8_Z5jdHi6B-myT","sequence":1,"sessionId":"s-V1StGXR8_Z5jdHi6B","requestId":"r-V1StGXR8_Z5jdHi6B","occurredAt":"2025-01-01T00:00:00.000Z","type":"session.stream","data":{"type":"content","sessionId":"s-V1StGXR8_Z5jdHi6B","delta":"delta-1 "}}');
UPDATE bench_heads SET next_sequence = next_sequence + 1 WHERE tenant_id = 'bench' AND session_id = 's-' || :sid AND stream_name = 'durable';
INSERT INTO bench_entries (tenant_id, session_id, position, entry) VALUES ('bench', 's-' || :sid, :seq::bigint + 1, '{"id":"m-V1StGXR8_Z5jdHi6B","role":"user","content":"hello from client 1, input 42"}');
UPDATE bench_transcripts SET revision = revision + 1 WHERE tenant_id = 'bench' AND session_id = 's-' || :sid;
END;
