//! The `[gateway]` and `[executor]` sections: the HTTP surface's limits and timeouts, admission,
//! shutdown, and the per-tenant overrides (`[[gateway.tenant_limits]]`,
//! `[[executor.tenant_limits]]`).

use std::collections::HashSet;
use std::time::Duration;

use agent_runtime::ids::is_valid_tenant_id;
use agent_runtime_executor::{
    ExecutorConfig, MAX_EVENT_BYTES_LIMIT, MIN_EVENT_BYTES, PendingInputLimits,
};
use agent_runtime_gateway::{GatewayConfig, TenantLimits};
use anyhow::bail;
use serde::Deserialize;

use super::set;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GatewaySection {
    base_path: Option<String>,
    heartbeat_interval_ms: Option<u64>,
    command_lease_ttl_ms: Option<u64>,
    max_request_bytes: Option<usize>,
    max_header_bytes: Option<usize>,
    header_read_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    write_timeout_ms: Option<u64>,
    write_buffer_bytes: Option<usize>,
    max_concurrent_commands: Option<usize>,
    max_queued_commands: Option<usize>,
    commands_per_minute: Option<usize>,
    max_sse_connections_per_tenant: Option<usize>,
    max_sse_connections: Option<usize>,
    cors_allowed_origins: Option<Vec<String>>,
    allowed_hosts: Option<Vec<String>>,
    abandon_sealed_after_ms: Option<u64>,
    reconcile_sealed_after_ms: Option<u64>,
    command_retention_ms: Option<u64>,
    closed_session_retention_ms: Option<u64>,
    max_closed_session_bytes_per_tenant: Option<u64>,
    max_stored_result_bytes_per_tenant: Option<u64>,
    event_retention_ms: Option<u64>,
    shutdown_readiness_delay_ms: Option<u64>,
    shutdown_grace_ms: Option<u64>,
    console: Option<bool>,
    auth_failures_per_minute: Option<u32>,
    #[serde(default)]
    tenant_limits: Vec<GatewayTenantSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GatewayTenantSection {
    tenant: String,
    max_concurrent_commands: Option<usize>,
    max_queued_commands: Option<usize>,
    commands_per_minute: Option<usize>,
    max_sse_connections: Option<usize>,
    closed_session_retention_ms: Option<u64>,
    max_closed_session_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExecutorSection {
    max_active_sessions_per_tenant: Option<usize>,
    approval_timeout_ms: Option<u64>,
    default_max_turns: Option<u64>,
    max_turns_limit: Option<u64>,
    max_request_tokens: Option<u64>,
    demo_slow_delta_interval_ms: Option<u64>,
    stop_grace_ms: Option<u64>,
    shutdown_grace_ms: Option<u64>,
    max_pending_inputs_per_session: Option<usize>,
    max_pending_input_bytes_per_session: Option<usize>,
    max_event_bytes: Option<usize>,
    #[serde(default)]
    tenant_limits: Vec<ExecutorTenantSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecutorTenantSection {
    tenant: String,
    max_active_sessions: Option<usize>,
    max_pending_inputs: Option<usize>,
    max_pending_input_bytes: Option<usize>,
}

fn ms(value: Option<u64>) -> Option<Duration> {
    value.map(Duration::from_millis)
}

pub(super) fn apply_gateway(g: &mut GatewayConfig, section: GatewaySection) -> anyhow::Result<()> {
    set(&mut g.base_path, section.base_path);
    set(&mut g.heartbeat_interval, ms(section.heartbeat_interval_ms));
    set(&mut g.command_lease_ttl_ms, section.command_lease_ttl_ms);
    set(&mut g.max_request_bytes, section.max_request_bytes);
    set(&mut g.max_header_bytes, section.max_header_bytes);
    set(
        &mut g.header_read_timeout,
        ms(section.header_read_timeout_ms),
    );
    set(&mut g.idle_timeout, ms(section.idle_timeout_ms));
    set(&mut g.request_timeout, ms(section.request_timeout_ms));
    set(&mut g.write_timeout, ms(section.write_timeout_ms));
    set(&mut g.write_buffer_bytes, section.write_buffer_bytes);
    let limits = &mut g.admission;
    set(
        &mut limits.max_concurrent_commands,
        section.max_concurrent_commands,
    );
    set(&mut limits.max_queued_commands, section.max_queued_commands);
    set(&mut limits.commands_per_minute, section.commands_per_minute);
    set(
        &mut g.max_sse_connections_per_tenant,
        section.max_sse_connections_per_tenant,
    );
    set(&mut g.max_sse_connections, section.max_sse_connections);
    set(&mut g.cors_allowed_origins, section.cors_allowed_origins);
    set(&mut g.allowed_hosts, section.allowed_hosts);
    set(
        &mut g.abandon_sealed_after,
        ms(section.abandon_sealed_after_ms),
    );
    set(
        &mut g.reconcile_sealed_after,
        ms(section.reconcile_sealed_after_ms),
    );
    set(&mut g.command_retention, ms(section.command_retention_ms));
    set(
        &mut g.closed_session_retention,
        ms(section.closed_session_retention_ms),
    );
    set(
        &mut g.max_stored_result_bytes_per_tenant,
        section.max_stored_result_bytes_per_tenant,
    );
    set(
        &mut g.max_closed_session_bytes_per_tenant,
        section.max_closed_session_bytes_per_tenant,
    );
    set(&mut g.event_retention, ms(section.event_retention_ms));
    set(
        &mut g.shutdown_readiness_delay,
        ms(section.shutdown_readiness_delay_ms),
    );
    set(&mut g.shutdown_grace, ms(section.shutdown_grace_ms));
    set(&mut g.console, section.console);
    set(
        &mut g.auth_failures_per_minute,
        section.auth_failures_per_minute,
    );
    if !section.tenant_limits.is_empty() {
        g.tenant_limits = gateway_tenant_limits(section.tenant_limits)?;
    }
    Ok(())
}

/// `[[gateway.tenant_limits]]`: one entry per tenant at most.
fn gateway_tenant_limits(sections: Vec<GatewayTenantSection>) -> anyhow::Result<Vec<TenantLimits>> {
    let mut seen = HashSet::new();
    sections
        .into_iter()
        .map(|tenant| {
            check_tenant(&tenant.tenant, "gateway", &mut seen)?;
            Ok(TenantLimits {
                tenant: tenant.tenant,
                max_concurrent_commands: tenant.max_concurrent_commands,
                max_queued_commands: tenant.max_queued_commands,
                commands_per_minute: tenant.commands_per_minute,
                max_sse_connections: tenant.max_sse_connections,
                closed_session_retention: ms(tenant.closed_session_retention_ms),
                max_closed_session_bytes: tenant.max_closed_session_bytes,
            })
        })
        .collect()
}

/// `[executor]`, returning the cluster executor's drain deadline when the file sets it.
pub(super) fn apply_executor(
    e: &mut ExecutorConfig,
    demo_slow_delta_interval: &mut Duration,
    section: ExecutorSection,
) -> anyhow::Result<Option<Duration>> {
    set(
        &mut e.max_active_sessions_per_tenant,
        section.max_active_sessions_per_tenant,
    );
    set(&mut e.approval_timeout, ms(section.approval_timeout_ms));
    set(&mut e.default_max_turns, section.default_max_turns);
    set(&mut e.max_turns_limit, section.max_turns_limit);
    if let Some(tokens) = section.max_request_tokens {
        if tokens == 0 {
            bail!("executor.max_request_tokens must be a positive integer");
        }
        e.max_request_tokens = Some(tokens);
    }
    set(&mut e.stop_grace, ms(section.stop_grace_ms));
    set(
        demo_slow_delta_interval,
        ms(section.demo_slow_delta_interval_ms),
    );
    set(
        &mut e.pending_inputs.inputs,
        section.max_pending_inputs_per_session,
    );
    set(
        &mut e.pending_inputs.bytes,
        section.max_pending_input_bytes_per_session,
    );
    if let Some(bytes) = section.max_event_bytes {
        let range = MIN_EVENT_BYTES..=MAX_EVENT_BYTES_LIMIT;
        if !range.contains(&bytes) {
            bail!(
                "executor.max_event_bytes must be between {MIN_EVENT_BYTES} and \
                 {MAX_EVENT_BYTES_LIMIT} (an SSE frame stays under the 4 MiB clients accept)"
            );
        }
        e.max_event_bytes = bytes;
    }
    if !section.tenant_limits.is_empty() {
        let mut seen = HashSet::new();
        e.tenant_max_active_sessions.clear();
        e.tenant_pending_inputs.clear();
        for tenant in section.tenant_limits {
            check_tenant(&tenant.tenant, "executor", &mut seen)?;
            let positive = |name: &str, value: Option<usize>| match value {
                Some(0) => bail!(
                    "executor.tenant_limits: {name} of {:?} must be a positive integer",
                    tenant.tenant
                ),
                _ => Ok(value),
            };
            let sessions = positive("max_active_sessions", tenant.max_active_sessions)?;
            let inputs = positive("max_pending_inputs", tenant.max_pending_inputs)?;
            let bytes = positive("max_pending_input_bytes", tenant.max_pending_input_bytes)?;
            if let Some(cap) = sessions {
                e.tenant_max_active_sessions
                    .insert(tenant.tenant.clone(), cap);
            }
            if inputs.is_some() || bytes.is_some() {
                let limits = PendingInputLimits {
                    inputs: inputs.unwrap_or(e.pending_inputs.inputs),
                    bytes: bytes.unwrap_or(e.pending_inputs.bytes),
                };
                e.tenant_pending_inputs.insert(tenant.tenant, limits);
            }
        }
    }
    Ok(ms(section.shutdown_grace_ms))
}

/// A tenant named in an override must be a valid tenant id (or it could never match), once.
fn check_tenant(tenant: &str, section: &str, seen: &mut HashSet<String>) -> anyhow::Result<()> {
    if !is_valid_tenant_id(tenant) {
        bail!("{section}.tenant_limits: {tenant:?} is not a valid tenant id");
    }
    if !seen.insert(tenant.to_owned()) {
        bail!("{section}.tenant_limits: tenant {tenant:?} is listed twice");
    }
    Ok(())
}

/// Every limit of the gateway must be usable: positive, and buffers large enough for hyper.
pub(super) fn validate_gateway(g: &GatewayConfig) -> anyhow::Result<()> {
    let positive = [
        ("gateway.command_lease_ttl_ms", g.command_lease_ttl_ms),
        ("gateway.max_request_bytes", g.max_request_bytes as u64),
        ("gateway.max_header_bytes", g.max_header_bytes as u64),
        (
            "gateway.header_read_timeout_ms",
            g.header_read_timeout.as_millis() as u64,
        ),
        ("gateway.idle_timeout_ms", g.idle_timeout.as_millis() as u64),
        (
            "gateway.request_timeout_ms",
            g.request_timeout.as_millis() as u64,
        ),
        (
            "gateway.write_timeout_ms",
            g.write_timeout.as_millis() as u64,
        ),
        (
            "gateway.max_concurrent_commands",
            g.admission.max_concurrent_commands as u64,
        ),
        (
            "gateway.max_queued_commands",
            g.admission.max_queued_commands as u64,
        ),
        (
            "gateway.commands_per_minute",
            g.admission.commands_per_minute as u64,
        ),
        (
            "gateway.max_sse_connections_per_tenant",
            g.max_sse_connections_per_tenant as u64,
        ),
        ("gateway.max_sse_connections", g.max_sse_connections as u64),
        (
            "gateway.heartbeat_interval_ms",
            g.heartbeat_interval.as_millis() as u64,
        ),
    ];
    for (name, value) in positive {
        if value == 0 {
            bail!("{name} must be a positive integer");
        }
    }
    for tenant in &g.tenant_limits {
        let values = [
            ("max_concurrent_commands", tenant.max_concurrent_commands),
            ("max_queued_commands", tenant.max_queued_commands),
            ("commands_per_minute", tenant.commands_per_minute),
            ("max_sse_connections", tenant.max_sse_connections),
        ];
        for (name, value) in values {
            if value == Some(0) {
                bail!(
                    "gateway.tenant_limits: {name} of {:?} must be a positive integer",
                    tenant.tenant
                );
            }
        }
    }
    // hyper's buffer floor; and a buffer smaller than the head limit would lower that limit.
    const MIN_BUFFER: usize = 8192;
    if g.write_buffer_bytes < MIN_BUFFER.max(g.max_header_bytes) {
        bail!(
            "gateway.write_buffer_bytes must be at least 8192 and at least gateway.max_header_bytes"
        );
    }
    Ok(())
}
