//! Command receipts (docs/storage.md §1.2) with the PostgreSQL semantics for every backend (S6):
//! seal only from `claimed`, complete only from `claimed` or `sealed`.

use std::collections::HashMap;

use async_trait::async_trait;
use serde_json::Value;

use super::state::{Scope, State, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::StoreResult;
use crate::frozen::Frozen;
use crate::journal::{CommandLease, JournalEntry};
use crate::model::{CommandClaim, CommandTarget, UnfinishedCommand};
use crate::ports::CommandReceipts;
use crate::rules::{
    abandon_reason_required, command_lease_lost as lease_lost, decide_existing_claim,
    new_command_lease, validate_claim_command,
};

fn journal(cx: &mut Ctx<'_>, key: &Scope, lease: Option<CommandLease>) {
    cx.record(JournalEntry::Lease {
        tenant_id: key.0.clone(),
        command_id: key.1.clone(),
        lease,
    });
}

impl State {
    fn claim_command(
        &mut self,
        cx: &mut Ctx<'_>,
        key: Scope,
        fingerprint: &str,
        ttl_ms: u64,
        seal: Option<&CommandTarget>,
    ) -> CommandClaim {
        if let Some(existing) = self.commands.get(&key)
            && let Some(decided) = decide_existing_claim(existing, fingerprint, cx.now)
        {
            return decided;
        }
        let mut lease = new_command_lease(fingerprint, ttl_ms, cx.now);
        if let Some(target) = seal {
            // Claimed and sealed at once: one journal entry with the sealed lease.
            seal_lease(&mut lease, target, cx.now);
        }
        let lease_id = lease.lease_id.clone();
        self.commands.insert(key.clone(), lease.clone());
        journal(cx, &key, Some(lease));
        CommandClaim::Claimed { lease_id }
    }

    fn seal_command(
        &mut self,
        cx: &mut Ctx<'_>,
        key: Scope,
        lease_id: &str,
        target: &CommandTarget,
    ) -> StoreResult<()> {
        let Some(lease) = self.commands.get_mut(&key) else {
            return Err(lease_lost(&key.1, lease_id));
        };
        if lease.lease_id != lease_id || !lease.is_claimed() {
            return Err(lease_lost(&key.1, lease_id));
        }
        seal_lease(lease, target, cx.now);
        let snapshot = lease.clone();
        journal(cx, &key, Some(snapshot));
        Ok(())
    }

    fn complete_command(
        &mut self,
        cx: &mut Ctx<'_>,
        key: Scope,
        lease_id: &str,
        result: &Value,
    ) -> StoreResult<()> {
        let Some(lease) = self.commands.get_mut(&key) else {
            return Err(lease_lost(&key.1, lease_id));
        };
        let open = lease.result.is_none() && lease.abandon_reason.is_none();
        if lease.lease_id == lease_id && lease.result.as_ref().is_some_and(|r| r.thaw() == *result)
        {
            // Completed already by this lease with this result (`complete_again_is_a_no_op`).
            return Ok(());
        }
        if lease.lease_id != lease_id || !open {
            return Err(lease_lost(&key.1, lease_id));
        }
        let result = Frozen::new(result);
        lease.result_bytes = Some(result.len() as u64);
        lease.result = Some(result);
        lease.expires_at = None;
        lease.finished_at = Some(cx.now);
        let snapshot = lease.clone();
        journal(cx, &key, Some(snapshot));
        Ok(())
    }

    fn release_command(&mut self, cx: &mut Ctx<'_>, key: Scope, lease_id: &str) {
        let releasable = self
            .commands
            .get(&key)
            .is_some_and(|lease| lease.lease_id == lease_id && lease.is_claimed());
        if releasable {
            self.commands.remove(&key);
            journal(cx, &key, None);
        }
    }

    fn reopen_sealed_command(&mut self, cx: &mut Ctx<'_>, key: Scope, lease_id: &str) {
        let reopenable = self.commands.get(&key).is_some_and(|lease| {
            lease.lease_id == lease_id
                && lease.sealed
                && lease.result.is_none()
                && lease.abandon_reason.is_none()
        });
        if reopenable {
            self.commands.remove(&key);
            journal(cx, &key, None);
        }
    }

    pub(super) fn abandon_command(&mut self, cx: &mut Ctx<'_>, key: &Scope, reason: &str) -> bool {
        let Some(lease) = self.commands.get_mut(key) else {
            return false;
        };
        if !lease.sealed || lease.result.is_some() || lease.abandon_reason.is_some() {
            return false;
        }
        lease.abandon_reason = Some(reason.to_owned());
        lease.finished_at = Some(cx.now);
        let snapshot = lease.clone();
        journal(cx, key, Some(snapshot.clone()));
        self.enqueue_command_uncertain(cx, &key.0, &key.1, &snapshot);
        true
    }
}

impl State {
    /// The finished receipts past each tenant's budget, newest kept first (see the port). One
    /// pass sums each tenant's bytes; only a tenant over its budget has its receipts sorted, so
    /// the sweep's pass under the state lock is linear while every tenant is within budget.
    fn receipts_over_budget(&self, max_bytes_per_tenant: u64, limit: usize) -> Vec<Scope> {
        let finished = || {
            self.commands.iter().filter_map(|(key, lease)| {
                let finished_at = lease.finished_at?;
                Some((key, finished_at, stored_bytes(lease)))
            })
        };
        let mut totals: HashMap<&str, u64> = HashMap::new();
        for (key, _, bytes) in finished() {
            *totals.entry(key.0.as_str()).or_default() += bytes;
        }
        totals.retain(|_, total| *total > max_bytes_per_tenant);
        if totals.is_empty() {
            return Vec::new();
        }
        let mut over_budget: Vec<(&Scope, u64, u64)> = finished()
            .filter(|(key, _, _)| totals.contains_key(key.0.as_str()))
            .collect();
        // Per tenant, newest first.
        over_budget.sort_by(|a, b| {
            a.0.0
                .cmp(&b.0.0)
                .then(b.1.cmp(&a.1))
                .then(b.0.1.cmp(&a.0.1))
        });
        let mut over = Vec::new();
        let mut tenant: Option<&str> = None;
        let mut newer_bytes = 0u64;
        for (key, _, bytes) in over_budget {
            if tenant != Some(key.0.as_str()) {
                tenant = Some(key.0.as_str());
                newer_bytes = 0;
            }
            newer_bytes = newer_bytes.saturating_add(bytes);
            if newer_bytes > max_bytes_per_tenant {
                over.push(key.clone());
                if over.len() == limit {
                    break;
                }
            }
        }
        over
    }
}

/// What a receipt's stored result counts against its tenant's budget.
fn stored_bytes(lease: &CommandLease) -> u64 {
    match (&lease.result, lease.result_bytes) {
        (_, Some(bytes)) => bytes,
        (Some(result), None) => result.len() as u64,
        (None, None) => 0,
    }
}

#[async_trait]
impl<B: Backend> CommandReceipts for StoreEngine<B> {
    async fn claim_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
    ) -> StoreResult<CommandClaim> {
        validate_claim_command(tenant_id, command_id, fingerprint, ttl_ms)?;
        self.write(|state, cx| {
            let key = scope(tenant_id, command_id);
            Ok(state.claim_command(cx, key, fingerprint, ttl_ms, None))
        })
    }

    async fn claim_and_seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
        target: &CommandTarget,
    ) -> StoreResult<CommandClaim> {
        validate_claim_command(tenant_id, command_id, fingerprint, ttl_ms)?;
        self.write(|state, cx| {
            let key = scope(tenant_id, command_id);
            Ok(state.claim_command(cx, key, fingerprint, ttl_ms, Some(target)))
        })
    }

    async fn seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        target: &CommandTarget,
    ) -> StoreResult<()> {
        self.write(|state, cx| {
            state.seal_command(cx, scope(tenant_id, command_id), lease_id, target)
        })
    }

    async fn list_unfinished_commands(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<UnfinishedCommand>> {
        use std::ops::Bound;
        let from = match after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Unbounded,
        };
        self.read(|state, _| {
            Ok(state
                .commands
                .range((from, Bound::Unbounded))
                .filter(|(_, lease)| lease.result.is_none() && lease.abandon_reason.is_none())
                .take(limit as usize)
                .map(|((tenant_id, command_id), lease)| UnfinishedCommand {
                    tenant_id: tenant_id.clone(),
                    command_id: command_id.clone(),
                    lease_id: lease.lease_id.clone(),
                    sealed: lease.sealed,
                    sealed_at_ms: lease.sealed_at,
                    target: lease.target.as_deref().cloned(),
                })
                .collect())
        })
    }

    async fn complete_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        result: &Value,
    ) -> StoreResult<()> {
        self.write(|state, cx| {
            state.complete_command(cx, scope(tenant_id, command_id), lease_id, result)
        })
    }

    async fn command_receipt_exists(&self, tenant_id: &str, command_id: &str) -> StoreResult<bool> {
        self.read(|state, _| Ok(state.commands.contains_key(&scope(tenant_id, command_id))))
    }

    async fn release_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        self.write(|state, cx| {
            state.release_command(cx, scope(tenant_id, command_id), lease_id);
            Ok(())
        })
    }

    async fn reopen_sealed_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        self.write(|state, cx| {
            state.reopen_sealed_command(cx, scope(tenant_id, command_id), lease_id);
            Ok(())
        })
    }

    async fn abandon_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        reason: &str,
    ) -> StoreResult<bool> {
        abandon_reason_required(reason)?;
        self.write(|state, cx| Ok(state.abandon_command(cx, &scope(tenant_id, command_id), reason)))
    }

    async fn reap_receipts_over_budget(
        &self,
        max_bytes_per_tenant: u64,
        limit: u32,
    ) -> StoreResult<u64> {
        self.write(|state, cx| {
            let over = state.receipts_over_budget(max_bytes_per_tenant, limit as usize);
            for key in &over {
                state.commands.remove(key);
                journal(cx, key, None);
            }
            Ok(over.len() as u64)
        })
    }

    async fn reap_command_receipts(&self, finished_before_ms: u64, limit: u32) -> StoreResult<u64> {
        self.write(|state, cx| {
            let reaped: Vec<Scope> = state
                .commands
                .iter()
                .filter(|(_, lease)| lease.finished_at.is_some_and(|at| at <= finished_before_ms))
                .map(|(key, _)| key.clone())
                .take(limit as usize)
                .collect();
            for key in &reaped {
                state.commands.remove(key);
                journal(cx, key, None);
            }
            Ok(reaped.len() as u64)
        })
    }
}

/// Seals `lease` for `target`: it never expires and is never released from now on.
fn seal_lease(lease: &mut CommandLease, target: &CommandTarget, now: u64) {
    lease.sealed = true;
    lease.expires_at = None;
    lease.sealed_at = Some(now);
    lease.target = Some(Box::new(target.clone()));
}
