//! Start-up reconciliation of the commands a crash left unfinished, for a process that owns its
//! store (`serve`): nothing else can still be running them, so each one is decided now instead
//! of answering `COMMAND_IN_PROGRESS` until its claim expires or the abandonment window ends it.
//! A claim that was never sealed ran nothing and is released; a sealed command whose effect was
//! stored completes with the result it would have answered; any other is reopened. Either way a
//! retry with the same id gets an answer at once. A cluster cannot decide this at start-up (another
//! gateway may be running the command); there the abandonment window still applies.

use agent_runtime::executor_port::{CommandEffect, CommandEffects};
use agent_runtime_store::{Store, UnfinishedCommand};

use crate::response::success_value;

/// Receipts read per store call.
const PAGE: u32 = 100;

/// What the reconciliation did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Claims that were never sealed, released.
    pub released: usize,
    /// Completed with the result their stored effect answers.
    pub completed: usize,
    /// Reopened: they run when retried.
    pub reopened: usize,
    /// Left sealed (no recorded target, or a store failure): the abandonment window decides.
    pub left: usize,
}

/// Decides every unfinished command of `store`. Call before serving anything.
pub async fn reconcile_sealed_commands(
    store: &dyn Store,
    effects: &dyn CommandEffects,
) -> Reconciled {
    let mut done = Reconciled::default();
    let mut after = None;
    loop {
        let page = match store.list_unfinished_commands(after.clone(), PAGE).await {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(error = %error, "listing the commands a crash left unfinished failed; they are decided after the usual windows");
                return done;
            }
        };
        for sealed in &page {
            match reconcile_one(store, effects, sealed).await {
                Ok(Some(Decision::Released)) => done.released += 1,
                Ok(Some(Decision::Completed)) => done.completed += 1,
                Ok(Some(Decision::Reopened)) => done.reopened += 1,
                Ok(None) => done.left += 1,
                Err(error) => {
                    tracing::warn!(command_id = %sealed.command_id, error = %error, "reconciling an unfinished command failed; it is decided after the usual windows");
                    done.left += 1;
                }
            }
        }
        if page.len() < PAGE as usize {
            return done;
        }
        after = page
            .last()
            .map(|last| (last.tenant_id.clone(), last.command_id.clone()));
    }
}

enum Decision {
    Released,
    Completed,
    Reopened,
}

async fn reconcile_one(
    store: &dyn Store,
    effects: &dyn CommandEffects,
    sealed: &UnfinishedCommand,
) -> Result<Option<Decision>, String> {
    let tenant = &sealed.tenant_id;
    let command_id = &sealed.command_id;
    if !sealed.sealed {
        store
            .release_command(tenant, command_id, &sealed.lease_id)
            .await
            .map_err(|error| error.to_string())?;
        return Ok(Some(Decision::Released));
    }
    let Some(target) = &sealed.target else {
        return Ok(None);
    };
    let effect = effects
        .effect_of(
            tenant,
            &target.command_type,
            target.session_id.as_deref(),
            &sealed.lease_id,
        )
        .await?;
    match effect {
        CommandEffect::Found(data) => {
            let result = success_value(command_id, data);
            store
                .complete_command(tenant, command_id, &sealed.lease_id, &result)
                .await
                .map_err(|error| error.to_string())?;
            Ok(Some(Decision::Completed))
        }
        CommandEffect::RunAgain => {
            store
                .reopen_sealed_command(tenant, command_id, &sealed.lease_id)
                .await
                .map_err(|error| error.to_string())?;
            Ok(Some(Decision::Reopened))
        }
    }
}
