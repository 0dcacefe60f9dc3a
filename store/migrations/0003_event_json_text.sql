-- Events keep the exact JSON an SSE `data:` line carries (`json` stores the text as written;
-- `jsonb` would re-render it on every read). A replay sends that text without parsing the
-- payload or serialising it again. Rows written before this keep jsonb's rendering of the same
-- object, which is equally valid JSON.
ALTER TABLE agent_events ALTER COLUMN envelope TYPE json USING envelope::json;
