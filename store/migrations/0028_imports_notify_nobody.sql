-- Sessions imported from a bundle (docs/bundles.md) bring their history: the events and journal
-- entries that notified webhook endpoints where they first happened must not notify again here.
-- An import sets `agent_runtime.importing` for its transaction, and the triggers' enqueue then
-- does nothing. Every other caller leaves the setting unset (NULL with `missing_ok`).
CREATE OR REPLACE FUNCTION enqueue_webhooks(p_tenant TEXT, p_session TEXT, p_type TEXT, p_source JSON)
RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('agent_runtime.importing', true) = 'on' THEN
        RETURN;
    END IF;
    INSERT INTO webhook_deliveries
        (delivery_id, tenant_id, endpoint_id, session_id, event_type, source, created_at_ms)
    SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), e.tenant_id, e.endpoint_id,
           p_session, p_type, p_source,
           (extract(epoch FROM clock_timestamp()) * 1000)::int8
      FROM webhook_endpoints e
     WHERE e.tenant_id = p_tenant AND e.disabled_at_ms IS NULL AND p_type = ANY (e.event_types)
     ORDER BY e.endpoint_id;
END;
$$;
