//! Command receipts (storage.md §1.2) with the PostgreSQL semantics for every backend (S6):
//! seal only from `claimed`, complete only from `claimed` or `sealed`.

use agent_runtime::ids::nanoid;
use async_trait::async_trait;
use serde_json::Value;

use super::state::{Scope, State, scope};
use super::{Backend, Ctx, StoreEngine};
use crate::error::{StoreError, StoreResult};
use crate::journal::{CommandLease, JournalEntry};
use crate::model::{CommandClaim, MAX_LEASE_TTL_MS};
use crate::ports::CommandReceipts;

/// `retryAfterMs` for a sealed (non-expiring) command.
const SEALED_RETRY_AFTER_MS: u64 = 1000;

fn lease_lost(command_id: &str, lease_id: &str) -> StoreError {
    StoreError::CommandLeaseLost(format!(
        "Command lease {command_id}/{lease_id} is no longer active"
    ))
}

fn blank(value: &str) -> bool {
    value.trim().is_empty()
}

impl CommandLease {
    /// Claimed (not sealed, no result, not abandoned): the only state seal and release accept.
    fn is_claimed(&self) -> bool {
        !self.sealed && self.result.is_none() && self.abandon_reason.is_none()
    }
}

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
    ) -> CommandClaim {
        if let Some(existing) = self.commands.get(&key) {
            if existing.command_fingerprint != fingerprint {
                return CommandClaim::Conflict;
            }
            if let Some(result) = &existing.result {
                return CommandClaim::Completed {
                    result: result.clone(),
                };
            }
            if let Some(reason) = &existing.abandon_reason {
                return CommandClaim::Abandoned {
                    reason: reason.clone(),
                };
            }
            match existing.expires_at {
                None => {
                    return CommandClaim::InProgress {
                        retry_after_ms: SEALED_RETRY_AFTER_MS,
                    };
                }
                Some(expires_at) if existing.sealed || expires_at > cx.now => {
                    return CommandClaim::InProgress {
                        retry_after_ms: expires_at.saturating_sub(cx.now).max(1),
                    };
                }
                // An expired, unsealed claim: replaced below.
                Some(_) => {}
            }
        }
        let lease = CommandLease {
            lease_id: nanoid(),
            command_fingerprint: fingerprint.to_owned(),
            expires_at: Some(cx.now.saturating_add(ttl_ms)),
            sealed: false,
            result: None,
            abandon_reason: None,
            sealed_at: None,
        };
        let lease_id = lease.lease_id.clone();
        self.commands.insert(key.clone(), lease.clone());
        journal(cx, &key, Some(lease));
        CommandClaim::Claimed { lease_id }
    }

    fn seal_command(&mut self, cx: &mut Ctx<'_>, key: Scope, lease_id: &str) -> StoreResult<()> {
        let Some(lease) = self.commands.get_mut(&key) else {
            return Err(lease_lost(&key.1, lease_id));
        };
        if lease.lease_id != lease_id || !lease.is_claimed() {
            return Err(lease_lost(&key.1, lease_id));
        }
        lease.sealed = true;
        lease.expires_at = None;
        lease.sealed_at = Some(cx.now);
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
        if lease.lease_id != lease_id || !open {
            return Err(lease_lost(&key.1, lease_id));
        }
        lease.result = Some(result.clone());
        lease.expires_at = None;
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

    pub(super) fn abandon_command(&mut self, cx: &mut Ctx<'_>, key: &Scope, reason: &str) -> bool {
        let Some(lease) = self.commands.get_mut(key) else {
            return false;
        };
        if !lease.sealed || lease.result.is_some() || lease.abandon_reason.is_some() {
            return false;
        }
        lease.abandon_reason = Some(reason.to_owned());
        let snapshot = lease.clone();
        journal(cx, key, Some(snapshot));
        true
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
        if blank(tenant_id)
            || blank(command_id)
            || blank(fingerprint)
            || !(1..=MAX_LEASE_TTL_MS).contains(&ttl_ms)
        {
            return Err(StoreError::invalid("Command claim parameters are invalid"));
        }
        self.write(|state, cx| {
            Ok(state.claim_command(cx, scope(tenant_id, command_id), fingerprint, ttl_ms))
        })
    }

    async fn seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()> {
        self.write(|state, cx| state.seal_command(cx, scope(tenant_id, command_id), lease_id))
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

    async fn abandon_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        reason: &str,
    ) -> StoreResult<bool> {
        if blank(reason) {
            return Err(StoreError::invalid(
                "An abandoned command requires a reason",
            ));
        }
        self.write(|state, cx| Ok(state.abandon_command(cx, &scope(tenant_id, command_id), reason)))
    }
}
