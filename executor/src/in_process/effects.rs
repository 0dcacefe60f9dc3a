//! What a sealed command left in the store: the session or input a command creates takes an id
//! derived from its execution id, so the id says where to look, and finding it proves the effect
//! was stored. `serve` asks at start-up; a cluster gateway asks of commands sealed so long ago
//! that no dispatch can still be running them.

use std::ops::ControlFlow;
use std::sync::Arc;

use agent_runtime::executor_port::{CommandEffect, CommandEffects};
use agent_runtime::ids::{INPUT_PURPOSE, SESSION_PURPOSE, derived_nanoid};
use agent_runtime::protocol::JsonObject;
use agent_runtime::protocol::command::CommandName;
use agent_runtime::protocol::content::Priority;
use agent_runtime::protocol::message_compat;
use agent_runtime::protocol::result::{SubmitOutcome, SubmitResult};
use agent_runtime_store::{Store, StoreError, Transcript};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::session::{scan_journal, stored_pending};

/// Reads command effects from a store: `serve`'s start-up reconciliation, and a cluster
/// gateway's sweep (neither needs an executor).
pub struct StoredEffects {
    store: Arc<dyn Store>,
}

impl StoredEffects {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl CommandEffects for StoredEffects {
    async fn effect_of(
        &self,
        tenant_id: &str,
        command: CommandName,
        session_id: Option<&str>,
        execution_id: &str,
    ) -> Result<CommandEffect, String> {
        effect_in(
            self.store.as_ref(),
            tenant_id,
            command,
            session_id,
            execution_id,
        )
        .await
    }
}

async fn effect_in(
    store: &dyn Store,
    tenant_id: &str,
    command: CommandName,
    session_id: Option<&str>,
    execution_id: &str,
) -> Result<CommandEffect, String> {
    let found = match (command, session_id) {
        (CommandName::CreateSession | CommandName::ForkSession, _) => {
            let created = derived_nanoid(execution_id, SESSION_PURPOSE);
            created_session(store, tenant_id, &created).await
        }
        (CommandName::SubmitInput, Some(session_id)) => {
            let input_id = derived_nanoid(execution_id, INPUT_PURPOSE);
            submitted_input(store, tenant_id, session_id, &input_id).await
        }
        // Resume, close, abort and resolve create nothing; a repeat answers from the state it
        // finds (a closed session closes again without effect, decision P4; the request an
        // abort or an approval was for is closed by the recovery that follows).
        _ => return Ok(CommandEffect::RunAgain),
    };
    match found {
        Ok(Some(data)) => Ok(CommandEffect::Found(data)),
        Ok(None) => Ok(CommandEffect::RunAgain),
        Err(error) => Err(error.to_string()),
    }
}

async fn created_session(
    store: &dyn Store,
    tenant_id: &str,
    session_id: &str,
) -> Result<Option<JsonObject>, StoreError> {
    let record = store.get_session(tenant_id, session_id).await?;
    Ok(record.map(|record| object(json!({ "session": record.descriptor() }))))
}

/// Where an accepted input can be: started as a request (the journal's `request_accepted`),
/// waiting (the transcript's pending inputs), or applied to the running request (a user message
/// correlated with it). A queued input that has started since answers as started.
async fn submitted_input(
    store: &dyn Store,
    tenant_id: &str,
    session_id: &str,
    input_id: &str,
) -> Result<Option<JsonObject>, StoreError> {
    let outcome = match started_request(store, tenant_id, session_id, input_id).await? {
        Some(request_id) => Some(SubmitOutcome::Started { request_id }),
        None => match store.load_transcript(tenant_id, session_id).await? {
            Some(transcript) => waiting_or_applied(&transcript, input_id),
            None => None,
        },
    };
    Ok(outcome.map(|outcome| {
        let result = SubmitResult {
            session_id: session_id.to_owned(),
            input_id: input_id.to_owned(),
            outcome,
        };
        object(serde_json::to_value(result).unwrap_or(Value::Null))
    }))
}

async fn started_request(
    store: &dyn Store,
    tenant_id: &str,
    session_id: &str,
    input_id: &str,
) -> Result<Option<String>, StoreError> {
    let mut started = None;
    scan_journal(store, tenant_id, session_id, |event| {
        let accepted = event.event_type == "request_accepted"
            && event.data.get("inputId").and_then(Value::as_str) == Some(input_id);
        match &event.correlation.request_id {
            Some(request_id) if accepted => {
                started = Some(request_id.clone());
                ControlFlow::Break(())
            }
            _ => ControlFlow::Continue(()),
        }
    })
    .await?;
    Ok(started)
}

fn waiting_or_applied(transcript: &Transcript, input_id: &str) -> Option<SubmitOutcome> {
    let pending = transcript
        .pending_inputs
        .iter()
        .filter(|record| record.get("inputId").and_then(Value::as_str) == Some(input_id))
        .find_map(|record| stored_pending(record).map(|(pending, _)| pending));
    if let Some(pending) = pending {
        return Some(match pending.target_request_id {
            Some(request_id) => SubmitOutcome::Steered {
                request_id,
                priority: pending.priority,
            },
            None => SubmitOutcome::Queued,
        });
    }
    transcript.entries.iter().find_map(|entry| {
        let correlation = message_compat::correlation_of(&entry.message)?;
        if correlation.get("inputId").and_then(Value::as_str) != Some(input_id) {
            return None;
        }
        let request_id = correlation.get("requestId")?.as_str()?.to_owned();
        // Applied to a running request: it steered it (its `now`/`next` is not kept).
        Some(SubmitOutcome::Steered {
            request_id,
            priority: Priority::Next,
        })
    })
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}
