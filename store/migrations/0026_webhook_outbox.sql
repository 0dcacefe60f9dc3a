-- The webhook outbox (storage.md §11). Endpoints are what the operator subscribed per tenant;
-- deliveries are inserted by triggers in the same transaction as the row that causes them (an
-- agent event, a request's terminal journal entry, a command's abandonment), so a delivery
-- exists exactly when its cause is committed, whichever code path wrote it. The rules match
-- `store/src/outbox.rs`.
CREATE TABLE webhook_endpoints (
    tenant_id        TEXT COLLATE "C" NOT NULL,
    endpoint_id      TEXT COLLATE "C" NOT NULL,
    event_types      TEXT[] NOT NULL,
    disabled_at_ms   BIGINT,
    disabled_reason  TEXT,
    failing_since_ms BIGINT,
    PRIMARY KEY (tenant_id, endpoint_id)
);

CREATE TABLE webhook_deliveries (
    position           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id        TEXT COLLATE "C" NOT NULL,
    tenant_id          TEXT COLLATE "C" NOT NULL,
    endpoint_id        TEXT COLLATE "C" NOT NULL,
    session_id         TEXT COLLATE "C" NOT NULL,
    event_type         TEXT NOT NULL,
    source             JSON NOT NULL,
    created_at_ms      BIGINT NOT NULL,
    attempts           INTEGER NOT NULL DEFAULT 0,
    next_attempt_at_ms BIGINT NOT NULL DEFAULT 0,
    status             TEXT NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'delivered', 'failed')),
    last_error         TEXT,
    finished_at_ms     BIGINT,
    claim_id           TEXT,
    claim_expires_at_ms BIGINT,
    UNIQUE (tenant_id, delivery_id),
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints ON DELETE CASCADE
);
-- The head of each (endpoint, session) queue, and the pending count per tenant.
CREATE INDEX webhook_deliveries_pending_idx
    ON webhook_deliveries (tenant_id, endpoint_id, session_id, position) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_finished_idx
    ON webhook_deliveries (finished_at_ms) WHERE status <> 'pending';
CREATE INDEX webhook_deliveries_endpoint_idx
    ON webhook_deliveries (tenant_id, endpoint_id, position);

-- One delivery of `p_type` to each enabled endpoint of the tenant that wants it.
CREATE FUNCTION enqueue_webhooks(p_tenant TEXT, p_session TEXT, p_type TEXT, p_source JSON)
RETURNS VOID LANGUAGE sql AS $$
    INSERT INTO webhook_deliveries
        (delivery_id, tenant_id, endpoint_id, session_id, event_type, source, created_at_ms)
    SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), e.tenant_id, e.endpoint_id,
           p_session, p_type, p_source,
           (extract(epoch FROM clock_timestamp()) * 1000)::int8
      FROM webhook_endpoints e
     WHERE e.tenant_id = p_tenant AND e.disabled_at_ms IS NULL AND p_type = ANY (e.event_types)
     ORDER BY e.endpoint_id;
$$;

-- The type of an agent event or a durable journal entry, read from its text: the fields the store
-- writes before `data` (ids, numbers, timestamps; never a brace) end with `"type":"…"`. Reading it
-- with `->>` would parse the whole document, and one whose text holds a `\u0000` escape (user
-- content may) cannot be parsed into text (22P05).
CREATE FUNCTION document_type(p_document JSON) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT substring(p_document::text FROM '^\{[^{}]*"type":"([a-z_.]+)"');
$$;

CREATE FUNCTION agent_event_webhooks() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    PERFORM enqueue_webhooks(NEW.tenant_id, NEW.session_id, document_type(NEW.envelope),
                             json_build_object('event', NEW.envelope));
    RETURN NULL;
END;
$$;
CREATE TRIGGER agent_events_webhooks AFTER INSERT ON agent_events FOR EACH ROW
    WHEN (document_type(NEW.envelope) IN ('permission.requested', 'session.closed'))
    EXECUTE FUNCTION agent_event_webhooks();

CREATE FUNCTION durable_event_webhooks() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    PERFORM enqueue_webhooks(NEW.tenant_id, NEW.session_id, 'request.completed',
                             json_build_object('journal', NEW.event));
    RETURN NULL;
END;
$$;
CREATE TRIGGER durable_events_webhooks AFTER INSERT ON durable_events FOR EACH ROW
    WHEN (document_type(NEW.event) IN ('request_completed', 'request_failed', 'request_interrupted'))
    EXECUTE FUNCTION durable_event_webhooks();

CREATE FUNCTION command_webhooks() RETURNS TRIGGER LANGUAGE plpgsql AS $$
BEGIN
    PERFORM enqueue_webhooks(NEW.tenant_id, coalesce(NEW.target->>'sessionId', ''),
                             'command.uncertain',
                             json_build_object('command', json_build_object(
                                 'commandId', NEW.command_id,
                                 'commandType', NEW.target->>'commandType',
                                 'sessionId', NEW.target->>'sessionId',
                                 'sealedAtMs', NEW.sealed_at_ms,
                                 'reason', NEW.abandon_reason)));
    RETURN NULL;
END;
$$;
CREATE TRIGGER commands_webhooks AFTER UPDATE ON commands FOR EACH ROW
    WHEN (NEW.status = 'abandoned' AND OLD.status <> 'abandoned')
    EXECUTE FUNCTION command_webhooks();
