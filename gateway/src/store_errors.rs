//! The gateway's use of the one mapping from store errors to protocol errors
//! ([`agent_runtime_store::command_error`]).

use agent_runtime::protocol::ProtocolError;
use agent_runtime_store::{CommandProgress, StoreError, command_error};

/// Maps a store failure met while serving a command (before it took any effect) or a stream.
pub fn to_protocol(error: &StoreError) -> ProtocolError {
    command_error(error, CommandProgress::NothingDone)
}
