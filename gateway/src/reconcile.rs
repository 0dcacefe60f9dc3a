//! Start-up reconciliation of the commands a crash left unfinished, for a process that owns its
//! store (`serve`): nothing else can still be running them, so each one is decided now instead
//! of answering `COMMAND_IN_PROGRESS` until its claim expires or the abandonment window ends it.
//! A claim that was never sealed ran nothing and is released; a sealed command whose effect was
//! stored completes with the result it would have answered; any other is reopened. Either way a
//! retry with the same id gets an answer at once. A cluster cannot decide this at start-up (another
//! gateway may be running the command): there a sweep completes the commands sealed longer than
//! any dispatch lasts whose effect is stored ([`complete_stored_effects`]), and the abandonment
//! window ends the rest.

use agent_runtime::executor_port::{CommandEffect, CommandEffects};
use agent_runtime::protocol::command::CommandName;
use agent_runtime::protocol::success_value;
use agent_runtime_store::{Store, UnfinishedCommand};

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
    let mut pages = UnfinishedPages::new(store);
    while let Some(page) = pages.next().await {
        for command in &page {
            match reconcile_one(store, effects, command).await {
                Ok(Some(Decision::Released)) => done.released += 1,
                Ok(Some(Decision::Completed)) => done.completed += 1,
                Ok(Some(Decision::Reopened)) => done.reopened += 1,
                Ok(None) => done.left += 1,
                Err(error) => {
                    tracing::warn!(command_id = %command.command_id, error = %error, "reconciling an unfinished command failed; it is decided after the usual windows");
                    done.left += 1;
                }
            }
        }
    }
    done
}

/// Completes, with the result their stored effect answers, the commands sealed at or before
/// `sealed_before_ms` (store clock) whose effect is found: a cluster gateway's sweep, for the
/// commands of a gateway that crashed after the executor ran them (R5 in docs/reliability.md). The
/// cut-off must lie further back than the longest dispatch, so that no gateway is still waiting for
/// one of them. A command whose effect is not found stays sealed: in a cluster, another gateway may
/// still be running it, and only the abandonment window may end it. Returns how many it completed.
pub async fn complete_stored_effects(
    store: &dyn Store,
    effects: &dyn CommandEffects,
    sealed_before_ms: u64,
) -> usize {
    let mut completed = 0;
    let mut pages = UnfinishedPages::new(store);
    while let Some(page) = pages.next().await {
        let long_sealed = page.iter().filter(|command| {
            command.sealed
                && command
                    .sealed_at_ms
                    .is_some_and(|sealed_at| sealed_at <= sealed_before_ms)
        });
        for command in long_sealed {
            match complete_if_found(store, effects, command).await {
                Ok(Stored::Completed) => completed += 1,
                Ok(Stored::RunAgain | Stored::NoTarget) => {}
                Err(error) => {
                    tracing::warn!(command_id = %command.command_id, error = %error, "completing a long-sealed command from its effect failed; the next sweep tries again");
                }
            }
        }
    }
    completed
}

/// The unfinished commands of a store, a page at a time; a listing failure ends them (the
/// commands left are decided later, by the usual windows or the next sweep).
struct UnfinishedPages<'a> {
    store: &'a dyn Store,
    after: Option<(String, String)>,
    done: bool,
}

impl<'a> UnfinishedPages<'a> {
    fn new(store: &'a dyn Store) -> Self {
        Self {
            store,
            after: None,
            done: false,
        }
    }

    async fn next(&mut self) -> Option<Vec<UnfinishedCommand>> {
        if self.done {
            return None;
        }
        let page = match self
            .store
            .list_unfinished_commands(self.after.take(), PAGE)
            .await
        {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(error = %error, "listing the unfinished commands failed; they are decided later");
                self.done = true;
                return None;
            }
        };
        self.done = page.len() < PAGE as usize;
        self.after = page
            .last()
            .map(|last| (last.tenant_id.clone(), last.command_id.clone()));
        Some(page)
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
    match complete_if_found(store, effects, sealed).await? {
        Stored::Completed => Ok(Some(Decision::Completed)),
        Stored::RunAgain => {
            store
                .reopen_sealed_command(tenant, command_id, &sealed.lease_id)
                .await
                .map_err(|error| error.to_string())?;
            Ok(Some(Decision::Reopened))
        }
        Stored::NoTarget => Ok(None),
    }
}

/// What [`complete_if_found`] found of a sealed command.
enum Stored {
    /// Its effect was stored; the receipt now holds the result it answers.
    Completed,
    /// Its effect was not stored, or a repeat answers from the state it finds (nothing changed).
    RunAgain,
    /// It names no target to look at.
    NoTarget,
}

/// Completes a sealed command whose effect is stored.
async fn complete_if_found(
    store: &dyn Store,
    effects: &dyn CommandEffects,
    sealed: &UnfinishedCommand,
) -> Result<Stored, String> {
    // A receipt whose type this build does not know (written by a newer one) is left as it is.
    let Some((target, command)) = sealed.target.as_ref().and_then(|target| {
        CommandName::parse(&target.command_type).map(|command| (target, command))
    }) else {
        return Ok(Stored::NoTarget);
    };
    let tenant = &sealed.tenant_id;
    let effect = effects
        .effect_of(
            tenant,
            command,
            target.session_id.as_deref(),
            &sealed.lease_id,
        )
        .await?;
    match effect {
        CommandEffect::Found(data) => {
            let result = success_value(&sealed.command_id, data);
            store
                .complete_command(tenant, &sealed.command_id, &sealed.lease_id, &result)
                .await
                .map_err(|error| error.to_string())?;
            Ok(Stored::Completed)
        }
        CommandEffect::RunAgain => Ok(Stored::RunAgain),
    }
}

#[cfg(test)]
mod tests {
    use agent_runtime::protocol::JsonObject;
    use agent_runtime_store::{
        CommandClaim, CommandReceipts, CommandTarget, MemoryStore, StoreOptions,
    };
    use async_trait::async_trait;

    use super::*;

    /// Finds every command's effect.
    struct EverythingRan;

    #[async_trait]
    impl CommandEffects for EverythingRan {
        async fn effect_of(
            &self,
            _tenant_id: &str,
            _command: CommandName,
            session_id: Option<&str>,
            _execution_id: &str,
        ) -> Result<CommandEffect, String> {
            let mut data = JsonObject::new();
            data.insert("sessionId".into(), session_id.unwrap_or_default().into());
            Ok(CommandEffect::Found(data))
        }
    }

    async fn sealed(store: &MemoryStore, command_id: &str) -> u64 {
        let CommandClaim::Claimed { lease_id } = store
            .claim_command("tenant-a", command_id, "fp", 30_000)
            .await
            .unwrap()
        else {
            panic!("claimed");
        };
        let target = CommandTarget::new("input.submit", Some("session-1"));
        store
            .seal_command("tenant-a", command_id, &lease_id, &target)
            .await
            .unwrap();
        let listed = store.list_unfinished_commands(None, 10).await.unwrap();
        listed[0].sealed_at_ms.expect("sealed at")
    }

    /// A command sealed after the cut-off may still be dispatched by its gateway: the sweep
    /// leaves it alone, even though its effect is found; once it is older, the sweep completes
    /// it with the result that effect answers, and a retry replays that.
    #[tokio::test]
    async fn the_sweep_completes_only_commands_sealed_before_the_cut_off() {
        let store = MemoryStore::new(StoreOptions::default());
        let sealed_at = sealed(&store, "c-1").await;

        let completed = complete_stored_effects(&store, &EverythingRan, sealed_at - 1).await;
        assert_eq!(completed, 0);
        assert_eq!(
            store
                .list_unfinished_commands(None, 10)
                .await
                .unwrap()
                .len(),
            1
        );

        let completed = complete_stored_effects(&store, &EverythingRan, sealed_at).await;
        assert_eq!(completed, 1);
        let replay = store
            .claim_command("tenant-a", "c-1", "fp", 30_000)
            .await
            .unwrap();
        let CommandClaim::Completed { result } = replay else {
            panic!("completed: {replay:?}");
        };
        assert_eq!(result["ok"], true);
        assert_eq!(result["data"]["sessionId"], "session-1");
    }
}
