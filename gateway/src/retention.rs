//! Retention beyond the receipts' age. Stored results: each tenant's finished command receipts
//! are kept within a byte budget, newest first, so one tenant cannot fill memory and disk with
//! large answers inside the retention period.
//!
//! Event retention by age: events older than the retention are trimmed from every session's
//! log (its newest event is kept: it anchors the session's cursors), as retention by count trims
//! at append time.
//!
//! Session retention: closed sessions, with everything they own (events, journal, transcript,
//! lease, route), are purged a retention period after they were closed: the default period, or a
//! tenant's own (`tenant_limits`). A period of zero keeps them. Each pass works in bounded
//! batches, one session per store transaction, so it never holds a long one; what a pass leaves
//! the next tick picks up.

use std::time::Duration;

use agent_runtime::timefmt::format_iso_ms;
use agent_runtime_store::{ClosedSession, TenantScope};

use crate::state::AppState;

/// Sessions listed per store read, and batches per tenant scope and pass.
const BATCH: u32 = 100;
const MAX_BATCHES_PER_PASS: usize = 10;

/// Receipts deleted per store call, and calls per pass: one pass never holds a long
/// transaction, and what it leaves the next tick picks up.
const RECEIPT_BATCH: u32 = 1000;
const MAX_RECEIPT_BATCHES: usize = 100;

/// Deletes the receipts of commands finished at or before `finished_before_ms`.
pub(crate) async fn reap_receipts(state: &AppState, finished_before_ms: u64) -> u64 {
    let reaped = in_batches(
        "the receipts of old commands",
        RECEIPT_BATCH,
        MAX_RECEIPT_BATCHES,
        || {
            state
                .store
                .reap_command_receipts(finished_before_ms, RECEIPT_BATCH)
        },
    )
    .await;
    if reaped > 0 {
        tracing::info!(
            reaped_receipts = reaped,
            "deleted the receipts of old commands"
        );
    }
    reaped
}

/// Deletes the receipts past each tenant's budget of stored results.
pub(crate) async fn reap_receipts_over_budget(state: &AppState) -> u64 {
    let budget = state.config.max_stored_result_bytes_per_tenant;
    if budget == 0 {
        return 0;
    }
    let reaped = in_batches(
        "the receipts past a stored-result budget",
        RECEIPT_BATCH,
        MAX_RECEIPT_BATCHES,
        || state.store.reap_receipts_over_budget(budget, RECEIPT_BATCH),
    )
    .await;
    if reaped > 0 {
        tracing::info!(
            reaped,
            "reaped receipts past their tenant's stored-result budget"
        );
    }
    reaped
}

/// Runs `reap` (which handles up to `batch` items) until a call comes back short, at most
/// `max_calls` times; returns the total.
async fn in_batches<F, Fut>(what: &str, batch: u32, max_calls: usize, reap: F) -> u64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = agent_runtime_store::StoreResult<u64>>,
{
    let mut reaped = 0;
    for _ in 0..max_calls {
        match reap().await {
            Ok(count) => {
                reaped += count;
                if count < u64::from(batch) {
                    break;
                }
            }
            Err(error) => {
                tracing::warn!(error = %error, "deleting {what} failed");
                break;
            }
        }
    }
    reaped
}

/// Trims every session's events older than `event_retention` (always keeping its newest), in
/// batches of sessions.
pub(crate) async fn trim_old_events(state: &AppState) -> u64 {
    let retention = state.config.event_retention;
    if retention.is_zero() {
        return 0;
    }
    let cutoff = state
        .clock
        .now_ms()
        .saturating_sub(retention.as_millis() as u64);
    let cutoff = format_iso_ms(cutoff);
    let trimmed = in_batches("old events", BATCH, MAX_BATCHES_PER_PASS, || {
        state.store.trim_events_by_age(&cutoff, BATCH)
    })
    .await;
    if trimmed > 0 {
        tracing::info!(sessions = trimmed, "trimmed events past their retention");
    }
    trimmed
}

/// One pass over every session retention policy; returns how many sessions it purged.
pub(crate) async fn purge_closed_sessions(state: &AppState) -> u64 {
    let now = state.clock.now_ms();
    let mut purged = 0;
    let mut own_policy = Vec::new();
    for limits in &state.config.tenant_limits {
        let Some(retention) = limits.closed_session_retention else {
            continue;
        };
        own_policy.push(limits.tenant.clone());
        let scope = TenantScope::Only(limits.tenant.clone());
        purged += purge_scope(state, &scope, now, retention).await;
    }
    let default = state.config.closed_session_retention;
    purged += purge_scope(state, &TenantScope::AllExcept(own_policy), now, default).await;
    if purged > 0 {
        tracing::info!(purged, "purged closed sessions past their retention");
    }
    purged
}

/// One pass over every closed-session byte budget: each tenant keeps its newest closed sessions
/// within its budget, and the older ones are purged before their retention ends.
pub(crate) async fn purge_closed_sessions_over_budget(state: &AppState) -> u64 {
    let mut purged = 0;
    let mut own_budget = Vec::new();
    for limits in &state.config.tenant_limits {
        let Some(budget) = limits.max_closed_session_bytes else {
            continue;
        };
        own_budget.push(limits.tenant.clone());
        purged += purge_over_budget(state, TenantScope::Only(limits.tenant.clone()), budget).await;
    }
    let default = state.config.max_closed_session_bytes_per_tenant;
    purged += purge_over_budget(state, TenantScope::AllExcept(own_budget), default).await;
    if purged > 0 {
        tracing::info!(
            purged,
            "purged closed sessions past their tenant's byte budget"
        );
    }
    purged
}

async fn purge_over_budget(state: &AppState, scope: TenantScope, budget: u64) -> u64 {
    if budget == 0 {
        return 0;
    }
    let mut purged = 0;
    for _ in 0..MAX_BATCHES_PER_PASS {
        let over = match state
            .store
            .closed_sessions_over_budget(&scope, budget, BATCH)
            .await
        {
            Ok(over) => over,
            Err(error) => {
                tracing::warn!(error = %error, "listing closed sessions past a byte budget failed");
                return purged;
            }
        };
        let (done, stop) = purge_each(state, &over).await;
        purged += done;
        if stop || over.len() < BATCH as usize {
            break;
        }
    }
    purged
}

/// Purges `sessions`; returns how many, and whether a failure should end the pass.
async fn purge_each(state: &AppState, sessions: &[ClosedSession]) -> (u64, bool) {
    let mut purged = 0;
    for session in sessions {
        match state
            .store
            .purge_session(&session.tenant_id, &session.session_id)
            .await
        {
            Ok(true) => purged += 1,
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(session_id = %session.session_id, error = %error, "purging a closed session failed");
                return (purged, true);
            }
        }
    }
    (purged, false)
}

async fn purge_scope(state: &AppState, scope: &TenantScope, now: u64, retention: Duration) -> u64 {
    if retention.is_zero() {
        return 0;
    }
    let cutoff = format_iso_ms(now.saturating_sub(retention.as_millis() as u64));
    let mut purged = 0;
    for _ in 0..MAX_BATCHES_PER_PASS {
        let due = match state
            .store
            .list_closed_sessions(scope, &cutoff, BATCH)
            .await
        {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!(error = %error, "listing closed sessions to purge failed");
                return purged;
            }
        };
        let (done, stop) = purge_each(state, &due).await;
        purged += done;
        if stop || due.len() < BATCH as usize {
            break;
        }
    }
    purged
}
