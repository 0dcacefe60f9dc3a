//! The one mapping from store errors to protocol errors at the gateway boundary. Internal detail
//! goes to the log, never to the client.

use agent_runtime::protocol::{ErrorCode, ProtocolError};
use agent_runtime_store::StoreError;

/// Maps a store failure met while serving a command or a stream.
pub fn to_protocol(error: &StoreError) -> ProtocolError {
    match error {
        StoreError::StaleCursor(message) => ProtocolError::stale_cursor(message.clone()),
        StoreError::InvalidArgument(message) => {
            ProtocolError::new(ErrorCode::InvalidCommand, message.clone())
        }
        StoreError::CommandLeaseLost(_)
        | StoreError::NotOpen(_)
        | StoreError::Runtime { .. }
        | StoreError::Backend { .. } => {
            tracing::error!(error = %error, "store failure");
            ProtocolError::internal()
        }
    }
}
