//! Commands the gateway's other protocols (AG-UI, A2A) make of what their clients send: each runs
//! through the same pipeline as a client's own (scopes, admission, the idempotent receipt,
//! audit, metrics), under the caller's principal and a command id made from the client's
//! idempotency key.

use std::sync::Arc;

use agent_runtime::executor_port::CommandContext;
use agent_runtime::protocol::{Command, CommandKind, Principal};
use agent_runtime::telemetry::TraceContext;
use serde_json::Value;

use crate::answer::Answer;
use crate::pipeline::execute;
use crate::state::AppState;

/// Who asks: the authenticated principal, and the trace its request continues (W3C
/// `traceparent`), which every command span it causes continues.
#[derive(Clone, Debug)]
pub struct Caller {
    pub principal: Principal,
    pub trace: Option<TraceContext>,
}

/// A command's result `data`, and whether it was an idempotent replay.
pub struct Ran {
    pub data: Value,
    pub replayed: bool,
}

/// Runs one command; a failure is its answer, for the caller to render.
pub async fn run_command(
    state: &Arc<AppState>,
    caller: &Caller,
    command_id: String,
    kind: CommandKind,
    chosen_session_id: Option<String>,
) -> Result<Ran, Box<Answer>> {
    let context = CommandContext {
        principal: caller.principal.clone(),
        command_id: command_id.clone(),
        trace: caller.trace.clone(),
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
