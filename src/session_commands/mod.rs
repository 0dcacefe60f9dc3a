//! Every command, generated from the command table (`crate::command_table!`;
//! docs/architecture.md, "Commands: declared once"): the typed command ([`CommandKind`]), its
//! success data ([`SuccessData`]) and typed calls ([`calls`], [`SessionCommand`]), the gateway's
//! [`CommandHandler`], and the executor port: [`SessionExecutor`] takes an [`ExecutorCommand`]
//! and answers the [`ExecutorOutput`] of the same variant, and [`SessionCommands`] is the same
//! port with one typed method per command. A remote executor is called through one `Execute`
//! RPC that carries the command's type, so no command is written in the gRPC layer.

#[macro_use]
mod declare;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::executor_port::context::{CommandContext, SessionSnapshot, Submitted};
// Every command's data and success types, by the names the command table gives them.
use crate::protocol::command::data::*;
use crate::protocol::command::names::CommandName;
use crate::protocol::error::ProtocolError;
use crate::protocol::json::JsonObject;
use crate::protocol::result::ResultData;
use crate::protocol::result::data::*;
use crate::protocol::session::SessionDescriptor;
use crate::protocol::strict_json::{decode_exact, parse_strict};

crate::command_table!(declare_commands);

/// Runs sessions: the port between the gateway and whoever runs them (docs/storage.md §5.1),
/// implemented by the in-process executor (`serve`), by its tracing decorator, and by the
/// gateway's client of remote executors (cluster). Every command is tenant-scoped by
/// `context.principal.tenant_id`; another tenant's session answers `SESSION_NOT_FOUND` exactly
/// like a missing one. Callers use the typed methods of [`SessionCommands`], which every
/// `dyn SessionExecutor` has.
#[async_trait]
pub trait SessionExecutor: Send + Sync {
    /// Runs `command`; a success is the output of the same variant.
    async fn execute(
        &self,
        context: &CommandContext,
        command: ExecutorCommand,
    ) -> Result<ExecutorOutput, ProtocolError>;

    /// Cancels approvals and stops every session; later commands fail.
    async fn shutdown(&self);
}

/// A command as a type: its data and success `data` (see [`calls`]).
pub trait SessionCommand {
    const NAME: CommandName;
    type Data;
    type Success: ResultData;

    fn into_kind(data: Self::Data) -> CommandKind;
}

/// Where an executor command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement<'a> {
    /// On any executor with room: the command creates a session.
    New,
    /// On the owner of this session.
    Session(&'a str),
}

/// A handler's answer: the command's success data, and whether the write that took effect
/// already completed the command's receipt with it (the gateway then does not complete it
/// again).
#[derive(Clone, Debug, PartialEq)]
pub struct Reply<R> {
    pub data: R,
    pub receipt_completed: bool,
}

impl<R> From<R> for Reply<R> {
    fn from(data: R) -> Reply<R> {
        Reply {
            data,
            receipt_completed: false,
        }
    }
}

/// Why a command or an output that arrived as JSON could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WireError(pub String);

fn decode<T: DeserializeOwned + Serialize>(bytes: &[u8]) -> Result<T, WireError> {
    let value = parse_strict(bytes).map_err(|e| WireError(format!("invalid JSON: {e}")))?;
    decode_exact(value).map_err(|e| WireError(format!("invalid shape: {e}")))
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("protocol values always serialise")
}

/// An executor that answered another command's output: a defect, never the client's mistake.
fn mismatched_output(output: CommandName) -> ProtocolError {
    tracing::error!(
        output = output.as_str(),
        "an executor answered another command's output"
    );
    ProtocolError::internal()
}

#[cfg(test)]
mod tests;
