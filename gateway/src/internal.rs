//! Commands the gateway's other protocols (AG-UI, A2A) make of what their clients send: each runs
//! through the same pipeline as a client's own (scopes, admission, the idempotent receipt,
//! audit, metrics), under the caller's principal and a command id made from the client's
//! idempotency key.

use std::sync::Arc;

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::{Command, CommandKind, Principal};
use serde_json::Value;

use crate::answer::Answer;
use crate::pipeline::execute;
use crate::state::AppState;

/// A command's result `data`, and whether it was an idempotent replay.
pub struct Ran {
    pub data: Value,
    pub replayed: bool,
}

/// Runs one command; a failure is its answer, for the caller to render.
pub async fn run_command(
    state: &Arc<AppState>,
    principal: &Principal,
    command_id: String,
    kind: CommandKind,
    chosen_session_id: Option<String>,
) -> Result<Ran, Box<Answer>> {
    let context = CommandContext {
        principal: principal.clone(),
        command_id: command_id.clone(),
        trace: None,
        execution_id: None,
        chosen_session_id,
    };
    let answer = execute(state, context, Command::new(command_id, kind)).await;
    if answer.error_code().is_some() {
        return Err(Box::new(answer));
    }
    let replayed = answer.is_replay();
    let mut body = answer.into_body();
    let data = body.get_mut("data").map(Value::take).unwrap_or(Value::Null);
    Ok(Ran { data, replayed })
}
