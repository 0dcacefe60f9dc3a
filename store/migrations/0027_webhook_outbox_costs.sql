-- What the webhook outbox costs the command path and the metrics (storage.md §11).
--
-- `enqueue_webhooks` in PL/pgSQL: a `LANGUAGE sql` function called from a trigger is planned
-- again on every call, on the command path of every request that ends; PL/pgSQL keeps the
-- INSERT's plan for the session (pg_stat_statements under B1: 0.47 -> 0.29 ms a call). Same rows.
CREATE OR REPLACE FUNCTION enqueue_webhooks(p_tenant TEXT, p_session TEXT, p_type TEXT, p_source JSON)
RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
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

-- The failed deliveries of each endpoint, for the outbox metrics: counted from this index, not by
-- reading every delivery kept for redelivery.
CREATE INDEX webhook_deliveries_failed_idx
    ON webhook_deliveries (tenant_id, endpoint_id) WHERE status = 'failed';
