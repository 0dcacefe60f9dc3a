//! Records the storage ports read and write.
//!
//! Times that only the store compares (lease expiries, heartbeats) are epoch milliseconds; times
//! that clients see (`createdAt`, `occurredAt`) are the protocol's ISO-8601 strings.

use agent_runtime::protocol::{
    EventEnvelope, EventType, JsonObject, SessionDescriptor, SessionStatus, SharedObject,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Command receipts (docs/storage.md §1.2)

/// The outcome of `claim_command`, decided in the order of docs/storage.md §1.2.
#[derive(Clone, Debug, PartialEq)]
pub enum CommandClaim {
    /// The caller owns the command now and must seal, then complete (or release) it.
    Claimed { lease_id: String },
    /// The command finished earlier; this is its stored result, to be returned verbatim.
    Completed { result: Value },
    /// The command id was used with another fingerprint.
    Conflict,
    /// The command was sealed and then abandoned without a result; terminal.
    Abandoned { reason: String },
    /// Another holder is running it. `retry_after_ms` is 1000 once sealed, else the lease time left.
    InProgress { retry_after_ms: u64 },
}

/// What a sealed command acts on, recorded with its seal: a process that owns its store finds,
/// at start-up, the commands a crash left sealed and asks the executor whether each one's effect
/// was stored (then the command answers its real result) or not (then it runs again on retry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandTarget {
    /// The command's wire type (`input.submit`, ...).
    pub command_type: String,
    /// The session it acts on: the one named in the command, or the one it creates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl CommandTarget {
    pub fn new(command_type: &str, session_id: Option<&str>) -> Self {
        Self {
            command_type: command_type.to_owned(),
            session_id: session_id.map(str::to_owned),
        }
    }
}

/// A command claimed or sealed, without a result or an abandonment (`list_unfinished_commands`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnfinishedCommand {
    pub tenant_id: String,
    pub command_id: String,
    pub lease_id: String,
    /// Sealed (it may have taken effect), or only claimed (nothing of it ran).
    pub sealed: bool,
    /// When it was sealed (store clock, ms); `None` when only claimed.
    pub sealed_at_ms: Option<u64>,
    /// What a sealed command acts on; `None` when only claimed, or sealed by a build that did
    /// not record targets.
    pub target: Option<CommandTarget>,
}

// ---------------------------------------------------------------------------------------------
// Session records (docs/storage.md §1.3)

/// A stored session: the descriptor plus the fields clients never see.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRecord {
    pub tenant_id: String,
    /// Subject of the principal that created the session.
    pub created_by: String,
    pub session_id: String,
    pub status: SessionStatus,
    pub created_at: String,
    pub updated_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    /// The agent profile the executor resolved when the session was created (from its tenant,
    /// never from a client field), so every executor that loads it later uses the same one.
    /// Like `createdBy`, it never changes after the first insert. Never shown to clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl SessionRecord {
    /// What a client may see: `tenantId` and `createdBy` stripped.
    pub fn descriptor(&self) -> SessionDescriptor {
        SessionDescriptor {
            session_id: self.session_id.clone(),
            status: self.status,
            created_at: self.created_at.clone(),
            updated_at: self.updated_at.clone(),
            metadata: self.metadata.clone(),
        }
    }
}

/// Which tenants a retention pass covers: one tenant (its own policy), or all but some (the
/// default policy, without the tenants that have their own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TenantScope {
    Only(String),
    AllExcept(Vec<String>),
}

impl TenantScope {
    pub fn covers(&self, tenant_id: &str) -> bool {
        match self {
            TenantScope::Only(only) => only == tenant_id,
            TenantScope::AllExcept(excluded) => !excluded.iter().any(|t| t == tenant_id),
        }
    }
}

/// A closed session due for purging (`list_closed_sessions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClosedSession {
    pub tenant_id: String,
    pub session_id: String,
    /// Its `updatedAt`: when it was closed.
    pub closed_at: String,
}

/// One page of `list_sessions`: newest `updatedAt` first.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionPage {
    pub sessions: Vec<SessionRecord>,
    /// Opaque cursor for the next page, present only when more sessions remain.
    pub next_cursor: Option<String>,
}

/// Default and maximum page sizes of `list_sessions`.
pub const DEFAULT_SESSION_PAGE: u32 = 50;
pub const MAX_SESSION_PAGE: u32 = 100;

// ---------------------------------------------------------------------------------------------
// Agent event log (docs/storage.md §1.4)

/// An event to append: the store assigns `eventId` and `sequence`.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    pub session_id: String,
    pub request_id: Option<String>,
    pub occurred_at: String,
    pub event_type: EventType,
    pub data: JsonObject,
}

/// One page of `read_events`.
#[derive(Clone, Debug, PartialEq)]
pub struct EventPage {
    pub events: Vec<EventEnvelope>,
    /// More events exist after the last one returned.
    pub has_more: bool,
}

/// The retained part of a session's event log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRange {
    pub first_sequence: u64,
    pub head_sequence: u64,
}

/// Default and maximum page sizes of `read_events`.
pub const DEFAULT_EVENT_PAGE: u32 = 100;
pub const MAX_EVENT_PAGE: u32 = 1000;

// ---------------------------------------------------------------------------------------------
// Execution leases and fencing (docs/storage.md §4.1-§4.3)

/// What a writer presents with every fenced write.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionFence {
    pub lease_id: String,
    pub fencing_token: u64,
}

/// The one execution lease row of a session, overwritten by every acquire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionLease {
    pub session_id: String,
    pub lease_id: String,
    pub owner_id: String,
    pub fencing_token: u64,
    pub acquired_at_ms: u64,
    pub renewed_at_ms: u64,
    pub expires_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at_ms: Option<u64>,
}

impl ExecutionLease {
    pub fn fence(&self) -> ExecutionFence {
        ExecutionFence {
            lease_id: self.lease_id.clone(),
            fencing_token: self.fencing_token,
        }
    }
}

/// Arguments of `acquire_execution_lease`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireLease {
    pub lease_id: String,
    pub owner_id: String,
    /// 1 ..= 86 400 000 ms.
    pub ttl_ms: u64,
}

/// Longest lease or claim TTL the store accepts: 24 h.
pub const MAX_LEASE_TTL_MS: u64 = 86_400_000;

// ---------------------------------------------------------------------------------------------
// Durable journal (docs/storage.md §7.1)

/// Correlation ids carried by durable events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Correlation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_attempt_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_attempt_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_event_id: Option<String>,
}

/// A durable event to append.
#[derive(Clone, Debug, PartialEq)]
pub struct DurableEventDraft {
    /// Event kind, e.g. `request_accepted` (docs/storage.md §7.2). Non-blank.
    pub event_type: String,
    pub data: JsonObject,
    /// Defaults to the commit time.
    pub occurred_at: Option<String>,
    pub correlation: Correlation,
}

/// A command's receipt to complete in the same commit as a write that takes the command's
/// effect: the receipt's lease and the result to store.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceiptCompletion {
    pub command_id: String,
    pub lease_id: String,
    pub result: serde_json::Value,
}

/// Which step of a request a [`RequestStep`] is: how a fault-injecting store names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestStepKind {
    /// The request's acceptance (`request_accepted`), its input applied, its first turn begun.
    Start,
    /// The request's terminal events, its terminal journal entry, its last message.
    End,
}

/// The writes of one step of a request, of one session, that commit together where the store
/// can (`DurableJournal::writes_steps_atomically`): a client never sees an event of the step whose
/// journal entry or transcript change is not stored, and a crash leaves all or none. Written in the
/// lock order of docs/storage.md §3.5: the agent stream's events, the journal entries, the
/// transcript change, then the receipt.
#[derive(Clone, Debug)]
pub struct RequestStep {
    pub kind: RequestStepKind,
    pub events: Vec<NewEvent>,
    /// Never empty: every step of a request is journalled.
    pub journal: Vec<DurableEventDraft>,
    pub transcript: Option<TranscriptMutation>,
    /// The command's receipt, completed in the same commit where the store can.
    pub receipt: Option<ReceiptCompletion>,
}

/// What a [`RequestStep`] stored.
#[derive(Clone, Debug)]
pub struct RequestStepWritten {
    pub events: Vec<EventEnvelope>,
    pub journal: DurableAppendOutcome,
    /// The transcript entries the step appended, as stored.
    pub entries: Vec<TranscriptEntry>,
    /// Whether the receipt was completed with the step (else the caller completes it).
    pub receipt_completed: bool,
}

/// A stored durable event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DurableEvent {
    pub schema_version: u32,
    pub event_id: String,
    pub sequence: u64,
    pub session_id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub data: JsonObject,
    pub recorded_at: String,
    pub occurred_at: String,
    #[serde(flatten)]
    pub correlation: Correlation,
}

/// The schema version this store writes for durable events.
pub const DURABLE_SCHEMA_VERSION: u32 = 4;

/// Compare-and-set condition of a durable append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedSequence {
    /// Append at whatever the head is.
    Any,
    /// The stream must be empty.
    Empty,
    /// The head must be exactly this sequence.
    At(u64),
}

#[derive(Clone, Debug, PartialEq)]
pub struct DurableAppendOutcome {
    pub events: Vec<DurableEvent>,
    pub previous_sequence: Option<u64>,
    pub last_sequence: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DurablePage {
    pub events: Vec<DurableEvent>,
    pub head_sequence: Option<u64>,
    pub has_more: bool,
}

/// Default quota of durable events per session.
pub const DEFAULT_MAX_DURABLE_EVENTS: u64 = 100_000;

// ---------------------------------------------------------------------------------------------
// Transcript projection (docs/storage.md §8)

/// One entry of a session transcript: a `ModelMessage` JSON object with a store-assigned id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptEntry {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_message_id: Option<String>,
    pub created_at_ms: u64,
    /// Shared by clones; the in-memory stores keep it as text (`SharedObject::frozen`).
    pub message: SharedObject,
}

/// Progress of the transcript relative to the requests of the event log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryState {
    InProgress,
    Complete,
    /// A known gap; sticky until repaired.
    Failed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryProgress {
    pub state: HistoryState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Newest request whose messages the transcript fully holds; monotonic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered_request_id: Option<String>,
    pub updated_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Present on a repair: the only update that clears a `failed` gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repaired_messages: Option<u64>,
}

/// The whole transcript document of a session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transcript {
    pub session_id: String,
    pub created_at_ms: u64,
    pub last_activity_ms: u64,
    pub entries: Vec<TranscriptEntry>,
    /// `PendingSessionInput` JSON objects, each with an `inputId`.
    pub pending_inputs: Vec<JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Boxed: most transcripts have none, and every loaded session holds its transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_progress: Option<Box<HistoryProgress>>,
}

/// One atomic change to a transcript document.
#[derive(Clone, Debug, PartialEq)]
pub enum TranscriptMutation {
    /// Append model messages (user, assistant with `tool_calls`, tool results, ...).
    AppendMessages(Vec<JsonObject>),
    /// Upsert a pending input by its `inputId`.
    EnqueueInput(JsonObject),
    /// Remove a pending input without applying it.
    CancelInput { input_id: String },
    /// Remove the pending input and append its user message, correlated with the request.
    ApplyInput {
        input_id: String,
        request_id: String,
        message: JsonObject,
    },
    /// Append a compaction summary (a system message) and remember the summary text.
    Compact {
        summary: String,
        message: JsonObject,
    },
    /// Merge a history-progress record (failed is sticky unless repaired; coveredRequestId
    /// is kept when omitted).
    SaveHistoryProgress(HistoryProgress),
}

// ---------------------------------------------------------------------------------------------
// Workers and routes (docs/storage.md §4.4-§4.6)

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerStatus {
    Active,
    Draining,
    Offline,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerRecord {
    pub worker_id: String,
    pub status: WorkerStatus,
    pub capacity: u32,
    /// Free-form; executors put their gRPC address here.
    pub metadata: JsonObject,
    pub registered_at_ms: u64,
    pub last_heartbeat_at_ms: u64,
    pub lease_expires_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining_at_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RegisterWorker {
    pub worker_id: String,
    pub capacity: u32,
    pub ttl_ms: u64,
    pub metadata: JsonObject,
}

/// Session route states and their transitions (docs/storage.md §4.4): the protocol's own type, so
/// that `session.read` reports exactly the stored state.
pub use agent_runtime::protocol::RouteState;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRoute {
    pub tenant_id: String,
    pub session_id: String,
    pub state: RouteState,
    pub priority: i64,
    pub attempt: u64,
    pub fencing_token: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at_ms: Option<u64>,
    pub queued_at_ms: u64,
    pub updated_at_ms: u64,
    pub metadata: JsonObject,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<JsonObject>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnqueueOptions {
    pub priority: i64,
    pub metadata: JsonObject,
}

/// Arguments of `claim_session`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimSession {
    pub owner_id: String,
    pub lease_id: String,
    pub ttl_ms: u64,
    /// Only claim sessions of this tenant.
    pub tenant_id: Option<String>,
    /// Only claim this session (the gateway pushes work to a chosen executor, decision S1).
    pub session_id: Option<String>,
    /// Only orphans: sessions whose owner died or handed them off (`suspended`). A `queued`
    /// session belongs to whoever queued it and is about to claim it; adopting it would race.
    pub orphans_only: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RouteClaim {
    pub route: SessionRoute,
    pub lease: ExecutionLease,
}

/// A route change made by the lease holder.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteTransition {
    pub expected_state: Option<RouteState>,
    pub state: RouteState,
    /// Replaces the route metadata when given.
    pub metadata: Option<JsonObject>,
    pub failure: Option<JsonObject>,
}

/// Row counts of one `recover_expired_work` sweep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryCounts {
    pub offline_workers: u64,
    pub released_leases: u64,
    pub suspended_sessions: u64,
    pub abandoned_commands: u64,
}

/// The reason recorded on commands abandoned by the sweep.
pub const SWEEP_ABANDON_REASON: &str =
    "sealed command did not complete within the abandonment window";

// ---------------------------------------------------------------------------------------------
// Health

/// Readiness of a store, for `readyz`.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreHealth {
    pub ready: bool,
    /// Spread into the `readyz` body (e.g. `backend`, `directory`, `state`, `reason`).
    pub details: JsonObject,
}

/// One saved memory of the `MemoryRead`/`MemoryWrite` tools (docs/agent.md §6.8), keyed by (tenant,
/// `scope`, `name`). The scope is chosen by the executor's configuration (the whole tenant, or one
/// user of it); a tenant never reads another's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryRecord {
    pub scope: String,
    /// A slug: `^[a-z0-9]+(-[a-z0-9]+)*$`.
    pub name: String,
    pub description: String,
    /// `user`, `feedback`, `project` or `reference`.
    #[serde(rename = "type")]
    pub memory_type: String,
    pub body: String,
    pub updated_at_ms: u64,
}
