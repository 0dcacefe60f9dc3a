//! One live session: its queue of inputs, its running request, and the task that drives requests
//! one after another.
//!
//! Steering (docs/agent.md §1): with a request running, a `now` or `next` input that targets it is
//! applied at the request's next safe point (`now` also interrupts the model step); `later` inputs,
//! and inputs whose `expectedRequestId` does not match, wait as independent requests.

mod approval_step;
pub(crate) mod emit;
pub(crate) mod event_bound;
mod messages;
mod model_call;
mod model_view;
mod receipt;
mod request;
mod restore;
mod store_failure;
mod subagent;
mod tool_step;

use agent_runtime::sync::Locked;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use agent_runtime::clock::SharedClock;
use agent_runtime::executor_port::{CommandContext, Submitted};
use agent_runtime::ids::{INPUT_PURPOSE, effect_id, nanoid};
use agent_runtime::protocol::command::SubmitInputData;
use agent_runtime::protocol::content::{ModelMessage, PendingSessionInput, Priority, UserContent};
use agent_runtime::protocol::message_compat;
use agent_runtime::protocol::result::{SubmitOutcome, SubmitResult};
use agent_runtime::protocol::{ErrorCode, EventType, JsonObject, ProtocolError};
use agent_runtime::telemetry::{SharedTelemetry, TraceContext};
use agent_runtime::timefmt::format_iso_ms;
use agent_runtime_store::{
    CommandProgress, ExecutionFence, ExecutionLease, ExpectedSequence, NewEvent, ReceiptCompletion,
    RequestStep, RequestStepKind, Store, StoreError, TranscriptEntry, TranscriptMutation,
    WriteOutcome, command_error,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::model_view::ModelView;
use crate::approvals::ApprovalBroker;
use crate::config::{PendingInputLimits, TenantCaps};
use crate::profiles::{Profiles, SessionProfile};
use crate::sink::EventSink;
use crate::tools::agents::SessionAgents;
use crate::tools::{SessionShells, ToolRegistry};
use receipt::journal_draft;

pub(crate) use restore::{left_open, restore_interrupted_requests, scan_journal};

/// What every session of an executor shares.
pub(crate) struct SessionDeps {
    pub store: Arc<dyn Store>,
    pub sink: Arc<dyn EventSink>,
    /// What each tenant's sessions run with.
    pub profiles: Profiles,
    pub approvals: ApprovalBroker,
    pub clock: SharedClock,
    pub default_max_turns: u64,
    /// What a session may hold waiting, per tenant (`ExecutorConfig::pending_inputs`).
    pub pending_inputs: TenantCaps<PendingInputLimits>,
    /// Tokens a request may use (`ExecutorConfig::max_request_tokens`).
    pub max_request_tokens: Option<u64>,
    /// What one event may carry (`ExecutorConfig::max_event_bytes`).
    pub event_bound: event_bound::EventBound,
    /// Model-call spans and provider metrics.
    pub telemetry: SharedTelemetry,
}

impl std::fmt::Debug for SessionDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionDeps")
            .field("profiles", &self.profiles)
            .finish_non_exhaustive()
    }
}

/// An accepted input.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Input {
    pub input_id: String,
    pub content: UserContent,
    pub priority: Priority,
    pub target_request_id: Option<String>,
    pub accepted_at: u64,
    pub max_turns: Option<u64>,
    /// The subject that submitted it: the approver of the request it starts. `None` for an input
    /// restored from a record that does not name it (the session's creator approves then).
    pub submitted_by: Option<String>,
    /// The span of the command that submitted it (not persisted: a request restored after a
    /// restart starts a new trace).
    pub trace: Option<TraceContext>,
}

impl Input {
    fn pending(&self) -> PendingSessionInput {
        PendingSessionInput {
            input_id: self.input_id.clone(),
            content: self.content.clone(),
            priority: self.priority,
            target_request_id: self.target_request_id.clone(),
            accepted_at: self.accepted_at,
        }
    }

    /// The stored pending record: the protocol's `PendingSessionInput` plus its submitter (see
    /// [`stored_pending`], which reads it back).
    fn pending_json(&self) -> JsonObject {
        let mut map = match serde_json::to_value(self.pending()) {
            Ok(Value::Object(map)) => map,
            _ => JsonObject::new(),
        };
        if let Some(subject) = &self.submitted_by {
            map.insert(SUBMITTED_BY.to_owned(), Value::from(subject.as_str()));
        }
        map
    }

    fn from_pending(pending: PendingSessionInput, submitted_by: Option<String>) -> Self {
        Self {
            input_id: pending.input_id,
            content: pending.content,
            priority: pending.priority,
            target_request_id: pending.target_request_id,
            accepted_at: pending.accepted_at,
            max_turns: None,
            submitted_by,
            trace: None,
        }
    }
}

/// The key of a stored pending record that names its submitter (not part of the protocol's
/// `PendingSessionInput`, so it is taken off before the record is read as one).
const SUBMITTED_BY: &str = "submittedBy";

/// A stored pending record as the protocol's input and its submitter; `None` if it is not one.
pub(crate) fn stored_pending(record: &JsonObject) -> Option<(PendingSessionInput, Option<String>)> {
    let mut record = record.clone();
    let submitted_by = match record.remove(SUBMITTED_BY) {
        Some(Value::String(subject)) => Some(subject),
        _ => None,
    };
    let input = serde_json::from_value(Value::Object(record)).ok()?;
    Some((input, submitted_by))
}

/// Why a running request stops early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    UserAbort,
    SessionClosed,
    Shutdown,
    /// An operator moves the session to another executor.
    Moved,
}

impl StopReason {
    fn message(self) -> &'static str {
        match self {
            StopReason::UserAbort => "Request aborted",
            StopReason::SessionClosed => "Session closed",
            StopReason::Shutdown => "Session executor is shutting down",
            StopReason::Moved => "Session is moving to another executor",
        }
    }

    fn code(self) -> &'static str {
        match self {
            StopReason::UserAbort => "REQUEST_ABORTED",
            StopReason::SessionClosed => "SESSION_CLOSED",
            // The executor running the request stopped running it, as on a drain: a client
            // already knows to send it again.
            StopReason::Shutdown | StopReason::Moved => "EXECUTOR_SHUTDOWN",
        }
    }

    fn durable_reason(self) -> &'static str {
        match self {
            StopReason::UserAbort => "user_abort",
            StopReason::SessionClosed => "session_close",
            StopReason::Shutdown | StopReason::Moved => "process_restart",
        }
    }
}

/// The handle the request loop works with.
#[derive(Clone, Debug)]
pub(crate) struct RunningRequest {
    pub request_id: String,
    pub input: Input,
    pub cancel: CancellationToken,
    /// Bumped by every `now` input; the running model step watches it.
    pub interrupt: Arc<watch::Sender<u64>>,
    /// Whether `request_accepted` still has to be journaled (queued inputs become requests later).
    pub needs_acceptance: bool,
    /// Whether the request's start step applied its input and began its first turn already
    /// ([`LiveSession::start_request`]).
    pub started: bool,
    /// Turns and tokens the request used, its subagents' included (they share its limits).
    pub budget: Arc<RequestBudget>,
    /// When this executor accepted it (or took it from the queue): its duration runs from here.
    pub accepted_at: std::time::Instant,
}

impl RunningRequest {
    /// What the request's terminal journal entry records of its run beside `data`: its result
    /// subtype, turns, token usage and duration (the `request.completed` webhook reads them).
    pub fn ending_facts(&self, success: bool, data: Value) -> Value {
        let mut facts = match data {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        facts.insert(
            "subtype".to_owned(),
            Value::from(if success { "success" } else { "error" }),
        );
        facts.extend(self.budget.used());
        let duration = self.accepted_at.elapsed().as_millis();
        facts.insert(
            "durationMs".to_owned(),
            Value::from(u64::try_from(duration).unwrap_or(u64::MAX)),
        );
        Value::Object(facts)
    }
}

/// What a request and its subagents used of the request's limits (`maxTurns`,
/// `max_request_tokens`).
#[derive(Debug, Default)]
pub(crate) struct RequestBudget {
    turns: std::sync::atomic::AtomicU64,
    input_tokens: std::sync::atomic::AtomicU64,
    output_tokens: std::sync::atomic::AtomicU64,
}

/// A limit of the request that its turns (its subagents' included) reached.
#[derive(Debug)]
pub(crate) struct Spent {
    pub message: String,
    pub code: &'static str,
}

impl RequestBudget {
    /// Takes one more model turn, before its call: refused once the request used `max_turns`
    /// turns or `max_tokens` tokens.
    pub fn take_turn(&self, max_turns: u64, max_tokens: Option<u64>) -> Result<(), Spent> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.turns.fetch_add(1, Relaxed) >= max_turns {
            return Err(Spent {
                message: format!("The request reached its limit of {max_turns} turns"),
                code: "MAX_TURNS_EXCEEDED",
            });
        }
        let used = self
            .input_tokens
            .load(Relaxed)
            .saturating_add(self.output_tokens.load(Relaxed));
        match max_tokens {
            Some(limit) if used >= limit => Err(Spent {
                message: format!(
                    "The request used {used} model tokens, reaching its limit of {limit}"
                ),
                code: "MAX_REQUEST_TOKENS_EXCEEDED",
            }),
            _ => Ok(()),
        }
    }

    /// Counts a model call's tokens (input and output, as the provider reports them).
    pub fn add_tokens(&self, usage: &crate::provider::ModelUsage) {
        use std::sync::atomic::Ordering::Relaxed;
        self.input_tokens.fetch_add(usage.input_tokens, Relaxed);
        self.output_tokens.fetch_add(usage.output_tokens, Relaxed);
    }

    /// The turns and tokens used so far, as journal fields.
    pub fn used(&self) -> serde_json::Map<String, Value> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut used = serde_json::Map::new();
        used.insert("turns".to_owned(), Value::from(self.turns.load(Relaxed)));
        used.insert(
            "usage".to_owned(),
            serde_json::json!({
                "inputTokens": self.input_tokens.load(Relaxed),
                "outputTokens": self.output_tokens.load(Relaxed),
            }),
        );
        used
    }
}

#[derive(Debug)]
struct ActiveRequest {
    request_id: String,
    /// The input that started the request: acknowledged before the request applies it to the
    /// transcript, so a read shows it as waiting until then.
    input: PendingSessionInput,
    cancel: CancellationToken,
    interrupt: Arc<watch::Sender<u64>>,
    /// `now` / `next` inputs waiting for the request's next safe point.
    steering: Vec<Input>,
    stop: Option<StopReason>,
    /// The request has its outcome and is writing its terminal events: nothing can steer it,
    /// and an input submitted now waits for it to end (see `submit`).
    ending: bool,
}

#[derive(Debug)]
struct State {
    /// Boxed: an idle session (most of them) holds only the pointer.
    active: Option<Box<ActiveRequest>>,
    queued: VecDeque<Input>,
    driver: Option<JoinHandle<()>>,
    closed: bool,
    /// Tools approved with `scope: "session"`.
    approved_for_session: HashSet<String>,
}

#[derive(Debug)]
pub(crate) struct LiveSession {
    pub tenant_id: String,
    pub session_id: String,
    /// The session's creator: approves the requests of inputs that do not name a submitter.
    creator: String,
    /// This executor's lease on the session; every write carries its fence. Boxed: `serve` has
    /// no leases, and its sessions then hold only the pointer.
    pub lease: Option<Box<ExecutionLease>>,
    fence: Option<ExecutionFence>,
    deps: Arc<SessionDeps>,
    /// Its tenant's profile: provider, tools and permission policy.
    pub profile: Arc<SessionProfile>,
    /// This session's tools: the profile's, in its own workspace when `tools.workspace_root` is
    /// set.
    tools: Arc<ToolRegistry>,
    /// The background shells its `Bash` calls started; killed when the session stops.
    pub shells: Arc<SessionShells>,
    /// Its subagents; ended when a request is aborted or the session stops.
    pub agents: Arc<SessionAgents>,
    state: Mutex<State>,
    /// Notified whenever a request ends or the session stops, for submissions waiting on an
    /// ending request. (A `Notify` lives inline; a watch channel would allocate per session.)
    request_ended: tokio::sync::Notify,
    /// Orders a steering or queued input's transcript write before the request takes it: held by
    /// `submit` from the moment the input is in memory until its `EnqueueInput` is stored (or
    /// failed and the input withdrawn), and by the driver while it takes inputs. Without it a
    /// request could apply an input before its enqueue landed, leaving an input that ran listed
    /// as pending, which the next load ran again.
    input_order: tokio::sync::Mutex<()>,
    /// The transcript's messages as stored, decoded, kept while this executor writes them (it
    /// holds the session's lease), so a model turn neither reads the whole transcript back from
    /// the store nor decodes it again. `None` until first loaded, and again after a write whose
    /// outcome is unknown. Entries are appended only by the request driver, one write at a time,
    /// so this copy follows the store's order.
    model_view: Mutex<Option<ModelView>>,
    /// `session.stream` events of the running request that go out with its next append
    /// ([`LiveSession::defer_stream`]), and the request they belong to.
    deferred: Mutex<Option<(String, Vec<JsonObject>)>>,
}

impl LiveSession {
    pub fn new(
        tenant_id: &str,
        session_id: &str,
        creator: &str,
        lease: Option<ExecutionLease>,
        deps: Arc<SessionDeps>,
        profile: Arc<SessionProfile>,
    ) -> Arc<Self> {
        Arc::new(Self {
            tenant_id: tenant_id.to_owned(),
            session_id: session_id.to_owned(),
            creator: creator.to_owned(),
            fence: lease.as_ref().map(ExecutionLease::fence),
            lease: lease.map(Box::new),
            tools: profile.tools.for_session(tenant_id, session_id),
            agents: SessionAgents::new(profile.tools.max_subagents),
            profile,
            shells: SessionShells::new(tenant_id),
            deps,
            state: Mutex::new(State {
                active: None,
                queued: VecDeque::new(),
                driver: None,
                closed: false,
                approved_for_session: HashSet::new(),
            }),
            request_ended: tokio::sync::Notify::new(),
            input_order: tokio::sync::Mutex::new(()),
            model_view: Mutex::new(None),
            deferred: Mutex::new(None),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.locked()
    }

    /// Who may answer the approvals of `request`: the submitter of its input (admins aside).
    pub fn approver(&self, request: &RunningRequest) -> String {
        request
            .input
            .submitted_by
            .clone()
            .unwrap_or_else(|| self.creator.clone())
    }

    /// The input of the running request, which the request applies to the transcript once it
    /// runs (after the input was acknowledged).
    pub fn starting_input(&self) -> Option<PendingSessionInput> {
        self.lock()
            .active
            .as_ref()
            .map(|active| active.input.clone())
    }

    /// Inputs accepted and not yet applied: steering inputs first, then queued requests.
    pub fn pending_inputs(&self) -> Vec<PendingSessionInput> {
        let state = self.lock();
        let steering = state
            .active
            .iter()
            .flat_map(|active| active.steering.iter());
        steering
            .chain(state.queued.iter())
            .map(Input::pending)
            .collect()
    }

    /// Accepts an input: starts a request, steers the running one, or queues it.
    pub async fn submit(
        self: &Arc<Self>,
        data: SubmitInputData,
        context: &CommandContext,
    ) -> Result<Submitted, ProtocolError> {
        // Its requests read and write the creator's own memories (`memory.scope = "user"`),
        // which another user of the tenant must not be able to drive the model into.
        if self.tools.belongs_to_creator() && context.principal.subject != self.creator {
            return Err(ProtocolError::new(
                ErrorCode::Forbidden,
                "Only the user who created this session can submit input to it: its memories \
                 are that user's own",
            ));
        }
        let input = Input {
            input_id: effect_id(context.execution_id.as_deref(), INPUT_PURPOSE),
            content: data.input,
            priority: data.priority.unwrap_or(Priority::Next),
            target_request_id: None,
            accepted_at: self.deps.clock.now_ms(),
            max_turns: data.max_turns,
            submitted_by: Some(context.principal.subject.clone()),
            trace: context.trace.clone(),
        };
        let (decision, order) = loop {
            // Taken before the state lock (the driver's order); waiting for an ending request
            // below releases it, so that the driver can take its next input.
            let order = self.input_order.lock().await;
            let ended = {
                let mut state = self.lock();
                if state.closed {
                    return Err(ProtocolError::session_not_active(&self.session_id));
                }
                if !state.active.as_ref().is_some_and(|active| active.ending) {
                    let limits = self.deps.pending_inputs.for_tenant(&self.tenant_id);
                    let expected = data.expected_request_id.as_deref();
                    let decision = decide(&mut state, input, expected, limits)?;
                    break (decision, order);
                }
                // Registered under the state lock, so an end notified after it is not missed.
                self.request_ended.notified()
            };
            drop(order);
            // A client that saw the running request's `result` may submit before the request
            // has let go of the session; the input belongs after that request, so it starts
            // (or follows the queue) instead of being queued behind a request that is over.
            ended.await;
        };
        match decision {
            Decision::Start(request) => {
                drop(order);
                self.start_accepted(request, context).await
            }
            Decision::Steer { input, request_id } => {
                self.persist_pending(&input).await?;
                drop(order);
                let outcome = SubmitOutcome::Steered {
                    request_id,
                    priority: input.priority,
                };
                Ok(self.waiting(input.input_id, outcome))
            }
            Decision::Queue(input) => {
                self.persist_pending(&input).await?;
                drop(order);
                Ok(self.waiting(input.input_id, SubmitOutcome::Queued))
            }
        }
    }

    /// Starts the request an accepted input opens, once its acceptance is journaled.
    async fn start_accepted(
        self: &Arc<Self>,
        request: RunningRequest,
        context: &CommandContext,
    ) -> Result<Submitted, ProtocolError> {
        let result = SubmitResult {
            session_id: self.session_id.clone(),
            input_id: request.input.input_id.clone(),
            outcome: SubmitOutcome::Started {
                request_id: request.request_id.clone(),
            },
        };
        // Journal the acceptance before acknowledging it, so that a crash after the answer is
        // found on restart and closed with a terminal event; the command's receipt commits with
        // it where the store can.
        let receipt = receipt::completion(context, &result);
        let started = self.starts_in_one_step(&request);
        let receipt_completed = match self.start_request(&request, receipt).await {
            Ok(completed) => completed,
            // Stored after all (the whole step: it is one commit where it is more than the
            // journal entry): the gateway completes the receipt (or, if this write did, finds it
            // done and answers uncertain until a retry replays it).
            Err(error)
                if self
                    .stored_after(&error, self.accepted_is_stored(&request))
                    .await =>
            {
                false
            }
            Err(error) => {
                self.lock().active = None;
                return Err(command_error(&error, CommandProgress::NothingDone));
            }
        };
        self.spawn_driver(RunningRequest {
            needs_acceptance: false,
            started,
            ..request
        });
        Ok(Submitted {
            result,
            receipt_completed,
        })
    }

    /// The answer to an input that waits for a running request (steered into it or queued).
    fn waiting(&self, input_id: String, outcome: SubmitOutcome) -> Submitted {
        Submitted {
            result: SubmitResult {
                session_id: self.session_id.clone(),
                input_id,
                outcome,
            },
            receipt_completed: false,
        }
    }

    /// Stores a steering or queued input as pending. Called with `input_order` held; when the
    /// write fails the input is withdrawn from memory before anyone can take it, so an input
    /// answered with an error never runs.
    async fn persist_pending(&self, input: &Input) -> Result<(), ProtocolError> {
        let stored = self
            .mutate_transcript(TranscriptMutation::EnqueueInput(input.pending_json()))
            .await;
        if let Err(error) = stored
            && !self
                .stored_after(&error, self.pending_is_stored(input))
                .await
        {
            self.withdraw(&input.input_id);
            return Err(command_error(&error, CommandProgress::NothingDone));
        }
        Ok(())
    }

    /// Whether a write that failed with `error` is stored after all: only a write whose outcome
    /// is unknown is looked for (R2 in docs/reliability.md), by reading what the store holds. Not
    /// found (or not readable) leaves it unknown, and the command answers uncertain: on PostgreSQL
    /// a COMMIT whose reply was lost can still be running when the read looks.
    async fn stored_after(
        &self,
        error: &StoreError,
        lookup: impl Future<Output = Result<bool, StoreError>>,
    ) -> bool {
        if error.write_outcome() != WriteOutcome::Unknown {
            return false;
        }
        match lookup.await {
            Ok(found) => {
                tracing::warn!(session_id = %self.session_id, found, "a session write's outcome was unknown; read back");
                found
            }
            Err(read) => {
                tracing::warn!(session_id = %self.session_id, error = %read, "reading back a write whose outcome was unknown failed");
                false
            }
        }
    }

    /// Whether the transcript holds `input` among its waiting inputs.
    async fn pending_is_stored(&self, input: &Input) -> Result<bool, StoreError> {
        let transcript = self
            .deps
            .store
            .load_transcript(&self.tenant_id, &self.session_id)
            .await?;
        Ok(transcript.is_some_and(|transcript| {
            transcript.pending_inputs.iter().any(|pending| {
                pending.get("inputId").and_then(Value::as_str) == Some(input.input_id.as_str())
            })
        }))
    }

    /// Whether the journal's last entries hold the `request_accepted` of `request` (the session
    /// writes its journal alone, and nothing was written after it).
    async fn accepted_is_stored(&self, request: &RunningRequest) -> Result<bool, StoreError> {
        let store = &self.deps.store;
        let Some(head) = store
            .durable_head(&self.tenant_id, &self.session_id)
            .await?
        else {
            return Ok(false);
        };
        const LOOK_BACK: u64 = 8;
        let after = head.saturating_sub(LOOK_BACK);
        let page = store
            .read_durable(&self.tenant_id, &self.session_id, after, LOOK_BACK as u32)
            .await?;
        Ok(page.events.iter().any(|event| {
            event.event_type == "request_accepted"
                && event.correlation.request_id.as_deref() == Some(request.request_id.as_str())
        }))
    }

    /// Removes an input that was never stored from the steering list and the queue.
    fn withdraw(&self, input_id: &str) {
        let mut state = self.lock();
        if let Some(active) = state.active.as_mut() {
            active.steering.retain(|input| input.input_id != input_id);
        }
        state.queued.retain(|input| input.input_id != input_id);
    }

    /// Applies one change to this session's transcript, and to the copy this session keeps.
    async fn mutate_transcript(&self, mutation: TranscriptMutation) -> Result<(), StoreError> {
        let written = self
            .deps
            .store
            .mutate_transcript(
                &self.tenant_id,
                &self.session_id,
                mutation,
                self.fence.as_ref(),
            )
            .await;
        self.keep_written(written.as_ref().map(Vec::as_slice));
        written.map(|_| ())
    }

    /// Follows a transcript write in the copy this session keeps: its entries appended, or the
    /// copy dropped when the write failed (whether it was stored is not known here: the next
    /// turn reads the store).
    fn keep_written(&self, written: Result<&[TranscriptEntry], &StoreError>) {
        let mut kept = self.model_view.locked();
        match written {
            Ok(appended) => {
                if let Some(view) = kept.as_mut() {
                    view.extend(appended);
                }
            }
            Err(_) => *kept = None,
        }
    }

    /// Ends the running request (docs/agent.md §1: the whole request, not the session).
    pub fn abort(&self) {
        let request_id = {
            let mut state = self.lock();
            let Some(active) = state.active.as_mut() else {
                return;
            };
            active.stop.get_or_insert(StopReason::UserAbort);
            active.cancel.cancel();
            active.request_id.clone()
        };
        // An abort ends the subagents too, background ones included.
        self.agents.stop_all();
        self.deps.approvals.cancel_request(
            &self.tenant_id,
            &self.session_id,
            &request_id,
            StopReason::UserAbort.message(),
        );
    }

    /// Stops everything and waits (bounded) for the running request to write its terminal events.
    pub async fn stop(&self, reason: StopReason, grace: std::time::Duration) {
        let driver = {
            let mut state = self.lock();
            state.closed = true;
            state.queued.clear();
            if let Some(active) = state.active.as_mut() {
                active.stop.get_or_insert(reason);
                active.cancel.cancel();
            }
            state.driver.take()
        };
        self.request_ended.notify_waiters();
        self.deps
            .approvals
            .cancel_session(&self.tenant_id, &self.session_id, reason.message());
        if let Some(driver) = driver
            && tokio::time::timeout(grace, driver).await.is_err()
        {
            tracing::warn!(session_id = %self.session_id, "a stopped request did not finish in time");
        }
        // Close, lease loss, handoff and shutdown alike: nothing of the session runs on.
        self.agents.stop_all();
        self.shells.kill_all().await;
    }

    fn spawn_driver(self: &Arc<Self>, first: RunningRequest) {
        let session = Arc::clone(self);
        // The driver outlives the command that started it; its log lines keep the trace id.
        let trace_id = first
            .input
            .trace
            .as_ref()
            .map(TraceContext::trace_id_hex)
            .unwrap_or_default();
        let log_span = tracing::info_span!("request", trace_id = %trace_id);
        let handle = tokio::spawn(tracing::Instrument::instrument(
            request::drive(session, first),
            log_span,
        ));
        let mut state = self.lock();
        // The previous driver (if any) has finished: a new one starts only from idle.
        state.driver = Some(handle);
    }

    /// Called by the driver when a request ends: the next queued input becomes the next request.
    async fn finish_request(&self) -> Option<RunningRequest> {
        let _order = self.input_order.lock().await;
        let mut state = self.lock();
        let leftover: Vec<Input> = state
            .active
            .take()
            .map(|active| active.steering)
            .unwrap_or_default();
        // Steering inputs that arrived too late for their request run as requests of their own.
        for input in leftover.into_iter().rev() {
            state.queued.push_front(Input {
                priority: Priority::Later,
                target_request_id: None,
                ..input
            });
        }
        let next = if state.closed {
            None
        } else {
            state.queued.pop_front().map(new_request)
        };
        if let Some(request) = &next {
            state.active = Some(active_for(request));
        }
        self.request_ended.notify_waiters();
        next.map(|request| RunningRequest {
            needs_acceptance: true,
            accepted_at: std::time::Instant::now(),
            ..request
        })
    }

    /// Marks the running request as ending: its outcome is known and its terminal events follow.
    fn begin_ending(&self) {
        if let Some(active) = self.lock().active.as_mut() {
            active.ending = true;
        }
    }

    /// Steering inputs for the running request's next safe point (only stored ones: see
    /// `input_order`).
    async fn take_steering(&self) -> Vec<Input> {
        let _order = self.input_order.lock().await;
        let mut state = self.lock();
        state
            .active
            .as_mut()
            .map(|active| std::mem::take(&mut active.steering))
            .unwrap_or_default()
    }

    fn stop_reason(&self) -> StopReason {
        let state = self.lock();
        state
            .active
            .as_ref()
            .and_then(|active| active.stop)
            .unwrap_or(StopReason::UserAbort)
    }

    fn approved_for_session(&self, tool: &str) -> bool {
        self.lock().approved_for_session.contains(tool)
    }

    fn remember_session_approval(&self, tool: &str) {
        self.lock().approved_for_session.insert(tool.to_owned());
    }

    /// Appends a `session.stream` event of the running request.
    async fn publish_stream(&self, request_id: &str, data: JsonObject) -> Result<(), StoreError> {
        if self.has_deferred() || self.deps.event_bound.splits(&data) {
            return self.publish_stream_batch(request_id, vec![data]).await;
        }
        self.publish(EventType::SessionStream, Some(request_id), data)
            .await
    }

    /// Publishes `data` with the request's next append instead of on its own: for an event
    /// that nothing waits on before the request's next one (a turn's usage and its end), so
    /// that a turn without tools ends in one commit with the request instead of three. Every
    /// later `session.stream` publication of the request takes it along first, in order.
    fn defer_stream(&self, request_id: &str, data: JsonObject) {
        let mut deferred = self.deferred.locked();
        match deferred.as_mut() {
            Some((request, events)) if request == request_id => events.push(data),
            _ => *deferred = Some((request_id.to_owned(), vec![data])),
        }
    }

    fn has_deferred(&self) -> bool {
        self.deferred.locked().is_some()
    }

    /// `session.stream` events of the running request, all at one time, after the ones it
    /// deferred.
    fn stream_events(&self, request_id: &str, batch: Vec<JsonObject>) -> Vec<NewEvent> {
        let occurred_at = format_iso_ms(self.deps.clock.now_ms());
        let deferred = self
            .deferred
            .locked()
            .take()
            .filter(|(request, _)| request == request_id)
            .map(|(_, events)| events)
            .unwrap_or_default();
        deferred
            .into_iter()
            .chain(batch)
            .flat_map(|data| self.deps.event_bound.fit(data))
            .map(|data| NewEvent {
                session_id: self.session_id.clone(),
                request_id: Some(request_id.to_owned()),
                occurred_at: occurred_at.clone(),
                event_type: EventType::SessionStream,
                data,
            })
            .collect()
    }

    /// Writes one step of the running request (`RequestStep`): `stream` as its
    /// `session.stream` events (after the ones it deferred), with the step's journal entry,
    /// transcript change and receipt. Whether the receipt was completed with it.
    async fn write_step(
        &self,
        request_id: &str,
        stream: Vec<JsonObject>,
        step: RequestStep,
    ) -> Result<bool, StoreError> {
        let changes_transcript = step.transcript.is_some();
        let step = RequestStep {
            events: self.stream_events(request_id, stream),
            ..step
        };
        let written = self
            .deps
            .sink
            .write_step(&self.tenant_id, &self.session_id, step, self.fence.as_ref())
            .await;
        if changes_transcript {
            self.keep_written(written.as_ref().map(|written| written.entries.as_slice()));
        }
        written.map(|written| written.receipt_completed)
    }

    /// Appends several `session.stream` events of the running request as one batch.
    async fn publish_stream_batch(
        &self,
        request_id: &str,
        batch: Vec<JsonObject>,
    ) -> Result<(), StoreError> {
        let events = self.stream_events(request_id, batch);
        if events.is_empty() {
            return Ok(());
        }
        self.deps
            .sink
            .publish_batch(
                &self.tenant_id,
                &self.session_id,
                events,
                self.fence.as_ref(),
            )
            .await
            .map(|_| ())
    }

    async fn publish(
        &self,
        event_type: EventType,
        request_id: Option<&str>,
        data: JsonObject,
    ) -> Result<(), StoreError> {
        // A deferred event goes first, so that nothing published after it is seen before it.
        let deferred = self
            .deferred
            .locked()
            .as_ref()
            .map(|(request, _)| request.clone());
        if let Some(request) = deferred {
            self.publish_stream_batch(&request, Vec::new()).await?;
        }
        let event = NewEvent {
            session_id: self.session_id.clone(),
            request_id: request_id.map(str::to_owned),
            occurred_at: format_iso_ms(self.deps.clock.now_ms()),
            event_type,
            data: self.deps.event_bound.fit_one(data),
        };
        self.deps
            .sink
            .publish(&self.tenant_id, event, self.fence.as_ref())
            .await
            .map(|_| ())
    }

    async fn journal(
        &self,
        event_type: &str,
        request_id: &str,
        data: Value,
    ) -> Result<(), StoreError> {
        self.deps
            .store
            .append_durable(
                &self.tenant_id,
                &self.session_id,
                vec![journal_draft(event_type, request_id, data)],
                ExpectedSequence::Any,
                self.fence.as_ref(),
            )
            .await
            .map(|_| ())
    }

    /// Whether [`LiveSession::start_request`] applies the request's input and begins its first
    /// turn in the step that journals its acceptance: where the store writes a step in one
    /// commit, and the first turn may run (`request::first_turn_allowed`).
    fn starts_in_one_step(&self, request: &RunningRequest) -> bool {
        self.deps.sink.writes_steps_atomically() && request::first_turn_allowed(self, request)
    }

    /// Journals the acceptance of `request` (`request_accepted`), completing `receipt` in the
    /// same commit when the store can: whether it did. Where
    /// [`LiveSession::starts_in_one_step`], the same commit applies the input to the transcript
    /// and announces the first `turn_start`: one commit instead of three before the model call.
    async fn start_request(
        &self,
        request: &RunningRequest,
        receipt: Option<ReceiptCompletion>,
    ) -> Result<bool, StoreError> {
        let input = &request.input;
        let data = json!({
            "inputId": input.input_id,
            "input": input.content,
            "priority": input.priority.as_str(),
            "maxTurns": input.max_turns,
        });
        let request_id = &request.request_id;
        let journal = vec![journal_draft("request_accepted", request_id, data)];
        let (stream, transcript) = match self.starts_in_one_step(request) {
            true => (
                vec![emit::turn_start(&self.session_id, 1)],
                Some(request::input_applied(input, request_id)),
            ),
            false => (Vec::new(), None),
        };
        let step = RequestStep {
            kind: RequestStepKind::Start,
            events: Vec::new(),
            journal,
            transcript,
            receipt,
        };
        self.write_step(request_id, stream, step).await
    }

    /// The model's view of the conversation, from the transcript (the store is read only when
    /// this session does not know its entries).
    async fn model_messages(&self) -> Result<Vec<Arc<ModelMessage>>, StoreError> {
        if let Some(view) = self.model_view.locked().as_ref() {
            return Ok(view.readable());
        }
        let transcript = self
            .deps
            .store
            .load_transcript(&self.tenant_id, &self.session_id)
            .await?;
        let view = ModelView::from_entries(transcript.map(|t| t.entries).unwrap_or_default());
        let messages = view.readable();
        *self.model_view.locked() = Some(view);
        Ok(messages)
    }
}

/// A protocol message as the JSON object the transcript stores.
/// The turn limit of `request`: its own `maxTurns`, else the session's default.
pub(super) fn max_turns(session: &LiveSession, request: &RunningRequest) -> u64 {
    request
        .input
        .max_turns
        .unwrap_or(session.deps.default_max_turns)
}

pub(crate) fn message_object(message: &ModelMessage) -> JsonObject {
    match serde_json::to_value(message) {
        Ok(Value::Object(map)) => map,
        _ => unreachable!("a ModelMessage always serialises to a JSON object"),
    }
}

/// A transcript entry as a protocol message carrying the entry's id (clients fork by it). An
/// entry stored in the older shape (a `metadata` bag) is converted to the newest one; an entry
/// that is not a valid message is skipped with a warning rather than failing the session.
pub(crate) fn entry_message(entry: TranscriptEntry) -> Option<ModelMessage> {
    // Decoded from the shared object (or its text), not a copy; the entry's id wins over any in
    // the message.
    let decoded = if entry.message.contains_key("metadata") {
        let mut message = JsonObject::clone(&entry.message);
        message_compat::upgrade_legacy_message(&mut message);
        serde_json::from_value::<ModelMessage>(Value::Object(message))
    } else {
        entry.message.decode::<ModelMessage>()
    };
    match decoded {
        Ok(mut message) => {
            message.id = Some(entry.id);
            Some(message)
        }
        Err(error) => {
            tracing::warn!(entry_id = %entry.id, error = %error, "skipping a transcript entry that is not a model message");
            None
        }
    }
}

enum Decision {
    Start(RunningRequest),
    Steer { input: Input, request_id: String },
    Queue(Input),
}

fn decide(
    state: &mut State,
    mut input: Input,
    expected_request_id: Option<&str>,
    limits: PendingInputLimits,
) -> Result<Decision, ProtocolError> {
    if state.active.is_some() {
        check_room(state, &input, limits)?;
    }
    let Some(active) = state.active.as_mut() else {
        let request = new_request(input);
        state.active = Some(active_for(&request));
        return Ok(Decision::Start(request));
    };
    let targets_active = expected_request_id.is_none_or(|expected| expected == active.request_id);
    let steerable = input.priority != Priority::Later && targets_active && active.stop.is_none();
    if !steerable {
        input.priority = Priority::Later;
        state.queued.push_back(input.clone());
        return Ok(Decision::Queue(input));
    }
    input.target_request_id = Some(active.request_id.clone());
    if input.priority == Priority::Now {
        active.interrupt.send_modify(|count| *count += 1);
    }
    active.steering.push(input.clone());
    Ok(Decision::Steer {
        input,
        request_id: active.request_id.clone(),
    })
}

/// Refuses an input that would wait when the session already holds as many waiting inputs, or
/// as many bytes of them, as `limits` allow. Retryable: the queue drains as requests end.
fn check_room(
    state: &State,
    input: &Input,
    limits: PendingInputLimits,
) -> Result<(), ProtocolError> {
    let steering = state
        .active
        .iter()
        .flat_map(|active| active.steering.iter());
    let waiting: Vec<&Input> = steering.chain(state.queued.iter()).collect();
    let bytes: usize = waiting.iter().map(|input| input.content.size()).sum();
    if waiting.len() < limits.inputs && bytes + input.content.size() <= limits.bytes {
        return Ok(());
    }
    Err(ProtocolError::new(
        ErrorCode::RateLimited,
        format!(
            "The Session already holds {} waiting inputs ({bytes} bytes); at most {} inputs of \
             {} bytes in all may wait. Retry when its running request ends",
            waiting.len(),
            limits.inputs,
            limits.bytes
        ),
    )
    .with_retry_after_ms(agent_runtime::protocol::error::OVERLOADED_RETRY_AFTER_MS))
}

fn new_request(input: Input) -> RunningRequest {
    RunningRequest {
        request_id: nanoid(),
        input,
        cancel: CancellationToken::new(),
        interrupt: Arc::new(watch::Sender::new(0)),
        needs_acceptance: true,
        started: false,
        budget: Arc::default(),
        accepted_at: std::time::Instant::now(),
    }
}

fn active_for(request: &RunningRequest) -> Box<ActiveRequest> {
    Box::new(ActiveRequest {
        request_id: request.request_id.clone(),
        input: request.input.pending(),
        cancel: request.cancel.clone(),
        interrupt: Arc::clone(&request.interrupt),
        steering: Vec::new(),
        stop: None,
        ending: false,
    })
}
