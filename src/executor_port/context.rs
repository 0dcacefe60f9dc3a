//! Who asks an executor, and what it answers that is not a protocol result.

use serde::{Deserialize, Serialize};

use crate::protocol::content::{ModelMessage, PendingSessionInput};
use crate::protocol::principal::Principal;
use crate::protocol::result::data::SubmitResult;
use crate::protocol::session::{HistoryProgress, SessionDescriptor};
use crate::telemetry::TraceContext;

/// An accepted `input.submit`: its result, and whether the write that accepted it also
/// completed the command's receipt with that result, in which case the gateway must not complete it
/// again. Also the `data` of the cluster's `SubmitInput` reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Submitted {
    pub result: SubmitResult,
    pub receipt_completed: bool,
}

/// Who is asking, for which command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandContext {
    pub principal: Principal,
    pub command_id: String,
    /// The span the command runs under (the gateway's command span), if traced.
    pub trace: Option<TraceContext>,
    /// The lease of the command's receipt, unique to this execution of it; `None` for reads.
    /// The session or input a command creates takes an id derived from it, so that a process
    /// that owns its store can tell, after a crash, whether a sealed command took effect.
    pub execution_id: Option<String>,
    /// The id `session.create` gives the new session when its caller chose it (an AG-UI thread,
    /// an A2A context); `None`: derived from `execution_id`. A session of that id that exists
    /// already is answered as it is, so creating one on first use is idempotent without a receipt.
    pub chosen_session_id: Option<String>,
}

/// What an executor knows of a session when it is read (docs/storage.md §5.2). `loaded` is true
/// only when this executor has the session live; an unloaded session has empty placeholders.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionSnapshot {
    pub session: SessionDescriptor,
    pub messages: Vec<ModelMessage>,
    pub pending_inputs: Vec<PendingSessionInput>,
    pub loaded: bool,
    /// How far the transcript holds the session's requests, where its store keeps it; feeds
    /// the recovery cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryProgress>,
}
