//! The `SessionExecutor` port (docs/storage.md §5.1): what the gateway asks of whoever runs
//! sessions.
//!
//! Two implementations sit behind it: the in-process executor (`serve`) and a gRPC client to
//! remote executors (cluster). The executor's gRPC server wraps the same in-process executor, so the
//! two modes cannot drift. The port's commands come from the command table
//! ([`crate::session_commands`]).

pub mod context;

use async_trait::async_trait;

use crate::protocol::JsonObject;
use crate::protocol::command::CommandName;
pub use crate::session_commands::{
    ExecutorCommand, ExecutorOutput, Placement, SessionCommands, SessionExecutor,
};
pub use context::{CommandContext, SessionSnapshot, Submitted};

/// What a sealed command left in the store, as the process that ran it finds after a crash.
#[derive(Clone, Debug, PartialEq)]
pub enum CommandEffect {
    /// Its effect was stored; this is the result `data` it answers.
    Found(JsonObject),
    /// Running it again is safe: its effect was not stored, or a repeat finds it done and
    /// answers as it would now.
    RunAgain,
}

/// Finds the effect of a command a crash left sealed (`serve`, which owns its store, asks at
/// start-up before it serves anything).
#[async_trait]
pub trait CommandEffects: Send + Sync {
    /// `execution_id` is the one the command ran with ([`CommandContext::execution_id`]);
    /// `session_id` the session it named. An error leaves the command as it is.
    async fn effect_of(
        &self,
        tenant_id: &str,
        command: CommandName,
        session_id: Option<&str>,
        execution_id: &str,
    ) -> Result<CommandEffect, String>;
}
