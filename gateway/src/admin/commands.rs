//! Commands left without a result (`COMMAND_IN_PROGRESS` to their clients), what the store knows
//! of their effect, and deciding each: the reconciliation the production checklist asks for
//! instead of a blind replay.

use std::collections::HashMap;
use std::sync::Arc;

use agent_runtime::executor_port::CommandEffect;
use agent_runtime::protocol::command::CommandName;
use agent_runtime::protocol::success_value;
use agent_runtime_store::UnfinishedCommand;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::HeaderMap;

use crate::http::ClientAddr;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AdminError, MAX_PAGE, Target, act, key_after, read, tenant_id};
use crate::state::AppState;

/// What the store knows of an unfinished command's effect.
enum Effect {
    /// Its effect is stored: completing it answers this result's `data`.
    Stored(agent_runtime::protocol::JsonObject),
    /// Its effect is not stored: it can run again.
    NotStored,
    /// Only claimed: nothing of it ran.
    NotStarted,
    /// It names no target this build can look at.
    Unknown,
}

impl Effect {
    fn name(&self) -> &'static str {
        match self {
            Effect::Stored(_) => "stored",
            Effect::NotStored => "not_stored",
            Effect::NotStarted => "not_started",
            Effect::Unknown => "unknown",
        }
    }
}

async fn effect(state: &AppState, command: &UnfinishedCommand) -> Result<Effect, AdminError> {
    if !command.sealed {
        return Ok(Effect::NotStarted);
    }
    let (Some(effects), Some(target)) = (&state.effects, &command.target) else {
        return Ok(Effect::Unknown);
    };
    let Some(name) = CommandName::parse(&target.command_type) else {
        return Ok(Effect::Unknown);
    };
    let found = effects
        .effect_of(
            &command.tenant_id,
            name,
            target.session_id.as_deref(),
            &command.lease_id,
        )
        .await
        .map_err(AdminError::internal)?;
    Ok(match found {
        CommandEffect::Found(data) => Effect::Stored(data),
        CommandEffect::RunAgain => Effect::NotStored,
    })
}

/// Every unfinished command (at most [`MAX_PAGE`] per call, after `after` = `tenant/command`).
async fn unfinished(
    state: &AppState,
    after: Option<(String, String)>,
) -> Result<Vec<UnfinishedCommand>, AdminError> {
    Ok(state
        .store
        .list_unfinished_commands(after, MAX_PAGE)
        .await?)
}

/// The unfinished command `command_id` of `tenant`, paging through the tenant's.
async fn find(
    state: &AppState,
    tenant: &str,
    command_id: &str,
) -> Result<Option<UnfinishedCommand>, AdminError> {
    let mut after = Some((tenant.to_owned(), String::new()));
    loop {
        let page = unfinished(state, after).await?;
        let full = page.len() == MAX_PAGE as usize;
        let last = page
            .last()
            .map(|c| (c.tenant_id.clone(), c.command_id.clone()));
        let mut mine = page
            .into_iter()
            .take_while(|c| c.tenant_id == tenant)
            .peekable();
        let more_of_tenant = full && last.as_ref().is_some_and(|(t, _)| t == tenant);
        if let Some(found) = mine.find(|c| c.command_id == command_id) {
            return Ok(Some(found));
        }
        if !more_of_tenant {
            return Ok(None);
        }
        after = last;
    }
}

/// `GET admin/commands`: commands claimed or sealed without a result, each with what the store
/// knows of its effect (`stored`: complete it; `not_stored`: release it so that a retry runs it;
/// `not_started`: only claimed; `unknown`).
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    query: Query<HashMap<String, String>>,
) -> Response {
    read(state, headers, client, query, |state, query| async move {
        let after = key_after(&query, "tenant/command")?;
        let mut listed = Vec::new();
        for command in unfinished(&state, after).await? {
            let effect = effect(&state, &command).await?;
            listed.push(describe(&command, &effect));
        }
        Ok(json!({"commands": listed}))
    })
    .await
}

fn describe(command: &UnfinishedCommand, effect: &Effect) -> Value {
    json!({
        "tenantId": command.tenant_id,
        "commandId": command.command_id,
        "commandType": command.target.as_ref().map(|t| t.command_type.clone()),
        "sessionId": command.target.as_ref().and_then(|t| t.session_id.clone()),
        "state": if command.sealed { "sealed" } else { "claimed" },
        "sealedAtMs": command.sealed_at_ms,
        "effect": effect.name(),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resolve {
    tenant_id: String,
    command_id: String,
    /// `complete` (its effect is stored: store the result it answers) or `release` (its effect is
    /// not stored: drop the receipt, so that a retry with the same id runs it).
    action: String,
}

/// `POST admin/commands/resolve {tenantId, commandId, action}`.
pub async fn resolve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
) -> Response {
    let target = |r: &Resolve| Target::tenant(&r.tenant_id);
    act(state, headers, client, bytes, "admin.command.resolve", target, |state, _, r: Resolve| async move {
        let tenant = tenant_id(&r.tenant_id)?;
        let command = find(&state, tenant, &r.command_id).await?.ok_or_else(|| {
            AdminError::not_found(format!(
                "Tenant {tenant} has no unfinished command {}",
                r.command_id
            ))
        })?;
        let effect = effect(&state, &command).await?;
        let store = &state.store;
        let (id, lease) = (&command.command_id, &command.lease_id);
        match (r.action.as_str(), effect) {
            ("complete", Effect::Stored(data)) => {
                let result = success_value(id, data);
                store.complete_command(tenant, id, lease, &result).await?;
                Ok(json!({"resolved": "completed", "result": result}))
            }
            ("complete", other) => Err(AdminError::conflict(format!(
                "Its effect is {}: only a command whose effect is stored can be completed; release it instead",
                other.name().replace('_', " ")
            ))),
            ("release", Effect::Stored(_)) => Err(AdminError::conflict(
                "Its effect is stored: releasing it would run it twice; complete it instead",
            )),
            ("release", Effect::NotStarted) => {
                store.release_command(tenant, id, lease).await?;
                Ok(json!({"resolved": "released"}))
            }
            ("release", _) => {
                store.reopen_sealed_command(tenant, id, lease).await?;
                Ok(json!({"resolved": "released"}))
            }
            (other, _) => Err(AdminError::invalid(format!(
                "action {other:?} is not one of: complete, release"
            ))),
        }
    })
    .await
}
