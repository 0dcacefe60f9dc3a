//! The storage ports. Every method is tenant-scoped except the worker registry; another tenant's
//! data answers exactly like missing data. Backends: memory, JSONL and PostgreSQL, all
//! proved by one conformance suite.

use std::collections::BTreeMap;

use agent_runtime::protocol::EventEnvelope;
use async_trait::async_trait;
use serde_json::Value;

use crate::error::StoreResult;
use crate::model::*;
use crate::outbox::*;

/// Command receipts: the idempotency ledger (docs/storage.md §1.2).
#[async_trait]
pub trait CommandReceipts: Send + Sync {
    /// Atomically claims `(tenant, command_id)` for `ttl_ms` unless it exists (decision order of
    /// docs/storage.md §1.2). `ttl_ms` must be 1 ..= 24 h and the ids non-blank.
    async fn claim_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
    ) -> StoreResult<CommandClaim>;

    /// Makes a claim non-expiring before side effects, recording what the command acts on.
    /// Fails with `CommandLeaseLost` unless the claim is held by `lease_id`, still `claimed` and
    /// without a result.
    async fn seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        target: &CommandTarget,
    ) -> StoreResult<()>;

    /// `claim_command` and, when it claims, `seal_command` in one step: for a caller that already
    /// holds everything the seal waits for (its admission slot). Answers like `claim_command`;
    /// `Claimed` means claimed and sealed. A failed seal releases the claim (best effort). A
    /// backend that can do both in one commit overrides this (one transaction instead of two).
    async fn claim_and_seal_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        fingerprint: &str,
        ttl_ms: u64,
        target: &CommandTarget,
    ) -> StoreResult<CommandClaim> {
        claim_then_seal(self, tenant_id, command_id, fingerprint, ttl_ms, target).await
    }

    /// Commands claimed or sealed, without a result or an abandonment, ordered by
    /// `(tenant, command id)` after `after`, at most `limit` (expired claims included): what a
    /// process that owns its store reconciles at start-up, when nothing can still be running them.
    async fn list_unfinished_commands(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<UnfinishedCommand>>;

    /// Whether `(tenant, command_id)` holds a receipt (claimed, sealed, completed or abandoned): a
    /// read keeps none, but its id must not be another command's (`COMMAND_CONFLICT`).
    async fn command_receipt_exists(&self, tenant_id: &str, command_id: &str) -> StoreResult<bool>;

    /// Stores the result of a claimed or sealed command held by `lease_id`.
    async fn complete_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
        result: &Value,
    ) -> StoreResult<()>;

    /// Deletes an unsealed, uncompleted claim held by `lease_id`; otherwise does nothing.
    async fn release_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()>;

    /// Deletes a sealed command without a result held by `lease_id`, so that its id runs again;
    /// otherwise does nothing. Only for a dispatch that provably took no effect (refused before
    /// it started): a retryable refusal must never become the stored outcome of its id.
    async fn reopen_sealed_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        lease_id: &str,
    ) -> StoreResult<()>;

    /// Terminally resolves a sealed command without a result. Returns whether it changed state;
    /// the first reason wins. A blank reason is `InvalidArgument`.
    async fn abandon_command(
        &self,
        tenant_id: &str,
        command_id: &str,
        reason: &str,
    ) -> StoreResult<bool>;

    /// Deletes the receipts of commands that finished (completed or abandoned) at or before
    /// `finished_before_ms`, at most `limit` of them; returns how many. A command id used again
    /// after its receipt is gone runs as a new command. Claimed and sealed receipts are kept.
    async fn reap_command_receipts(&self, finished_before_ms: u64, limit: u32) -> StoreResult<u64>;

    /// Keeps each tenant's stored results within `max_bytes_per_tenant` (a result's size is its
    /// JSON text): deletes the tenant's oldest finished receipts whose results, with those of
    /// every newer finished receipt of the tenant, pass the budget; at most `limit` of them.
    /// Returns how many. A deleted id runs as a new command; claimed and sealed receipts are kept.
    async fn reap_receipts_over_budget(
        &self,
        max_bytes_per_tenant: u64,
        limit: u32,
    ) -> StoreResult<u64>;
}

/// [`CommandReceipts::claim_and_seal_command`] as two steps: the claim, then the seal.
pub async fn claim_then_seal<S: CommandReceipts + ?Sized>(
    store: &S,
    tenant_id: &str,
    command_id: &str,
    fingerprint: &str,
    ttl_ms: u64,
    target: &CommandTarget,
) -> StoreResult<CommandClaim> {
    let claim = store
        .claim_command(tenant_id, command_id, fingerprint, ttl_ms)
        .await?;
    if let CommandClaim::Claimed { lease_id } = &claim
        && let Err(error) = store
            .seal_command(tenant_id, command_id, lease_id, target)
            .await
    {
        // An unreleased claim simply expires after its TTL.
        let _ = store.release_command(tenant_id, command_id, lease_id).await;
        return Err(error);
    }
    Ok(claim)
}

/// Session records (docs/storage.md §1.3).
#[async_trait]
pub trait SessionRecords: Send + Sync {
    /// Upsert. `createdBy` and `createdAt` never change after the first insert.
    async fn put_session(&self, record: &SessionRecord) -> StoreResult<()>;

    async fn get_session(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRecord>>;

    /// Newest `updatedAt` first (ties by session id ascending). `limit` 1..=100, default 50. A
    /// cursor this store did not issue is `InvalidArgument` ("Session list cursor is invalid").
    async fn list_sessions(
        &self,
        tenant_id: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> StoreResult<SessionPage>;

    /// Active sessions of every tenant as `(tenant, session)`, in that order, after `after`, at
    /// most `limit`: how a process that owns its store finds, at start-up, the sessions a crash
    /// left with a request open.
    async fn list_active_sessions(
        &self,
        after: Option<(String, String)>,
        limit: u32,
    ) -> StoreResult<Vec<(String, String)>>;

    /// Closed sessions of `tenants` whose `updatedAt` (the close) is at or before `closed_before`
    /// (ISO-8601), oldest first, at most `limit`: what the retention sweep purges next.
    async fn list_closed_sessions(
        &self,
        tenants: &TenantScope,
        closed_before: &str,
        limit: u32,
    ) -> StoreResult<Vec<ClosedSession>>;

    /// Closed sessions of `tenants` past each tenant's budget of retained bytes, oldest first, at
    /// most `limit`: each tenant keeps its newest closed sessions whose retained bytes (record,
    /// events and their keys, durable journal, transcript) add up to at most `max_bytes`; the
    /// older ones are what the budget sweep purges next.
    async fn closed_sessions_over_budget(
        &self,
        tenants: &TenantScope,
        max_bytes: u64,
        limit: u32,
    ) -> StoreResult<Vec<ClosedSession>>;

    /// Deletes a closed session and everything it owns (record, events and their keys, durable
    /// journal, transcript, execution lease, route) in one atomic step; from then on it answers
    /// exactly like a session that never existed. Returns whether it purged: an active or missing
    /// session is left alone.
    async fn purge_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<bool>;
}

/// The reading half of the per-session agent event log behind SSE (docs/storage.md §1.4): what
/// the SSE streams, recovery and the gateway's tail need, and all a read-only user holds.
#[async_trait]
pub trait EventReader: Send + Sync {
    async fn get_event_by_idempotency_key(
        &self,
        tenant_id: &str,
        session_id: &str,
        idempotency_key: &str,
    ) -> StoreResult<Option<EventEnvelope>>;

    /// Events with sequence > `after`, ascending, at most `limit` (1..=1000). `StaleCursor` when
    /// `after` is below the retained range or beyond the head.
    async fn read_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<EventPage>;

    async fn latest_event_sequence(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<u64>>;

    /// `None` when nothing has ever been retained.
    async fn event_stream_range(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<EventRange>>;

    /// Resolves once an event with sequence > `after` exists. Cancel by dropping the future.
    /// Backends without a wake-up source may resolve spuriously; callers re-read either way.
    async fn wait_for_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
    ) -> StoreResult<()>;
}

/// The replayable per-session agent event log behind SSE (docs/storage.md §1.4): reading, plus the
/// appends and retention that only executors and the retention worker make.
#[async_trait]
pub trait EventLog: EventReader + Send + Sync {
    /// Appends one event. With an idempotency key, a repeat returns the originally stored event
    /// and writes nothing; keys outlive retention. Concurrent appends with one key yield one event.
    async fn append_event(
        &self,
        tenant_id: &str,
        event: NewEvent,
        idempotency_key: Option<&str>,
    ) -> StoreResult<EventEnvelope>;

    /// Appends a batch of events of one session atomically (contiguous sequences), checking the
    /// execution fence in the same atomic step (docs/storage.md §4.2): with a fence it must match
    /// the session's active lease; without one, the session must never have had a lease.
    async fn append_events(
        &self,
        tenant_id: &str,
        session_id: &str,
        events: Vec<NewEvent>,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<EventEnvelope>>;

    /// Retention by age: in each session's log, trims from the front the events that occurred
    /// at or before `occurred_before` (ISO-8601), always keeping the session's newest event (it
    /// anchors its cursors); at most `limit` sessions per call, returning how many it trimmed. A
    /// cursor before what is left gets `StaleCursor`, as after a trim by count.
    async fn trim_events_by_age(&self, occurred_before: &str, limit: u32) -> StoreResult<u64>;
}

/// The transcript projection (docs/storage.md §8): one document per session, every write an atomic
/// read-modify-write.
#[async_trait]
pub trait TranscriptStore: Send + Sync {
    /// Creates an empty transcript; creating an existing one is a no-op returning it.
    async fn create_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Transcript>;

    /// The readable view: tool calls without a result and their messages are hidden.
    async fn load_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<Transcript>>;

    /// Applies one mutation atomically (fenced like event appends). `TranscriptNotFound` when the
    /// transcript does not exist. Returns the entries it appended, as stored (ids and times the
    /// store gave them), so the session that writes a transcript can keep its own copy instead of
    /// loading the whole transcript on every turn.
    async fn mutate_transcript(
        &self,
        tenant_id: &str,
        session_id: &str,
        mutation: TranscriptMutation,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<Vec<TranscriptEntry>>;

    /// Copies the prefix of `source` up to and including `message_id` (everything when `None`)
    /// into a new transcript for `target`. An unknown message id is `InvalidArgument`.
    async fn fork_transcript(
        &self,
        tenant_id: &str,
        source_session_id: &str,
        target_session_id: &str,
        message_id: Option<&str>,
    ) -> StoreResult<Transcript>;

    async fn delete_transcript(&self, tenant_id: &str, session_id: &str) -> StoreResult<()>;

    /// Session ids with a transcript, ascending.
    async fn list_transcripts(&self, tenant_id: &str) -> StoreResult<Vec<String>>;
}

/// The durable execution journal (docs/storage.md §7.1): no retention, a per-session quota.
#[async_trait]
pub trait DurableJournal: EventLog + TranscriptStore + Send + Sync {
    async fn append_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        drafts: Vec<DurableEventDraft>,
        expected: ExpectedSequence,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<DurableAppendOutcome>;

    /// Whether [`DurableJournal::write_request_step`] stores a step in one commit.
    fn writes_steps_atomically(&self) -> bool {
        false
    }

    /// Writes one step of a request (see [`RequestStep`]). Where
    /// [`DurableJournal::writes_steps_atomically`], in one commit, with the receipt (R1 in
    /// docs/reliability.md): all or nothing. Elsewhere one write after the other (events, journal,
    /// transcript) and the receipt left to the caller: a failure leaves what came before it
    /// stored, so a caller that must know what was stored writes the parts one by one.
    async fn write_request_step(
        &self,
        tenant_id: &str,
        session_id: &str,
        step: RequestStep,
        fence: Option<&ExecutionFence>,
    ) -> StoreResult<RequestStepWritten> {
        write_step_one_by_one(self, tenant_id, session_id, step, fence).await
    }

    async fn read_durable(
        &self,
        tenant_id: &str,
        session_id: &str,
        after: u64,
        limit: u32,
    ) -> StoreResult<DurablePage>;

    async fn durable_head(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<u64>>;
}

/// [`DurableJournal::write_request_step`] as one write after the other: events, journal,
/// transcript; the receipt left to the caller.
pub async fn write_step_one_by_one<S: DurableJournal + ?Sized>(
    store: &S,
    tenant_id: &str,
    session_id: &str,
    step: RequestStep,
    fence: Option<&ExecutionFence>,
) -> StoreResult<RequestStepWritten> {
    let events = match step.events.is_empty() {
        true => Vec::new(),
        false => {
            store
                .append_events(tenant_id, session_id, step.events, fence)
                .await?
        }
    };
    let journal = store
        .append_durable(
            tenant_id,
            session_id,
            step.journal,
            ExpectedSequence::Any,
            fence,
        )
        .await?;
    let entries = match step.transcript {
        Some(mutation) => {
            store
                .mutate_transcript(tenant_id, session_id, mutation, fence)
                .await?
        }
        None => Vec::new(),
    };
    Ok(RequestStepWritten {
        events,
        journal,
        entries,
        receipt_completed: false,
    })
}

/// Execution leases with fencing tokens (docs/storage.md §4.1).
#[async_trait]
pub trait ExecutionLeases: Send + Sync {
    /// True once any lease state exists for the session (sticky after expiry or release).
    async fn requires_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<bool>;

    async fn acquire_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
        request: AcquireLease,
    ) -> StoreResult<ExecutionLease>;

    async fn renew_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<ExecutionLease>;

    async fn assert_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()>;

    async fn release_execution_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
    ) -> StoreResult<()>;

    async fn get_execution_lease(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<ExecutionLease>>;
}

/// The global worker registry (docs/storage.md §4.5).
#[async_trait]
pub trait WorkerRegistry: Send + Sync {
    async fn register_worker(&self, request: RegisterWorker) -> StoreResult<WorkerRecord>;
    async fn heartbeat_worker(&self, worker_id: &str, ttl_ms: u64) -> StoreResult<WorkerRecord>;
    async fn drain_worker(&self, worker_id: &str) -> StoreResult<WorkerRecord>;
    async fn get_worker(&self, worker_id: &str) -> StoreResult<Option<WorkerRecord>>;
    async fn list_workers(&self) -> StoreResult<Vec<WorkerRecord>>;
}

/// Session routes: which worker runs which session, under which fence (docs/storage.md §4.4, §4.6).
#[async_trait]
pub trait SessionRoutes: Send + Sync {
    async fn enqueue_session(
        &self,
        tenant_id: &str,
        session_id: &str,
        options: EnqueueOptions,
    ) -> StoreResult<SessionRoute>;

    /// Runs the recovery sweep, then claims the best queued or suspended session for the worker
    /// (or `None` at capacity or with nothing to claim).
    async fn claim_session(&self, request: ClaimSession) -> StoreResult<Option<RouteClaim>>;

    async fn transition_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute>;

    /// Settle to idle, completed or failed (failed needs `failure`); idempotent with the same fence.
    async fn settle_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        transition: RouteTransition,
    ) -> StoreResult<SessionRoute>;

    /// Hand the session off (to `suspended`); idempotent with the same fence.
    async fn handoff_session(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        metadata: Option<serde_json::Map<String, Value>>,
    ) -> StoreResult<SessionRoute>;

    async fn renew_session_lease(
        &self,
        tenant_id: &str,
        lease: &ExecutionLease,
        ttl_ms: u64,
    ) -> StoreResult<RouteClaim>;

    /// Renews many leases at once (a worker renewing all it holds): on PostgreSQL one statement
    /// and one commit instead of a transaction per session. One answer per `(tenant, lease)`, in
    /// order: the renewed lease, or that lease's own `LeaseLost` / `SessionRouteNotFound`. `Err`
    /// for the whole batch leaves every lease as it was.
    async fn renew_session_leases(
        &self,
        leases: &[(String, ExecutionLease)],
        ttl_ms: u64,
    ) -> StoreResult<Vec<StoreResult<ExecutionLease>>>;

    async fn get_session_route(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionRoute>>;

    async fn list_worker_sessions(&self, worker_id: &str) -> StoreResult<Vec<SessionRoute>>;

    /// How many routes each worker owns; workers owning none are absent. Counted by the store,
    /// so that placing a session costs the same whatever the number of sessions.
    async fn count_worker_sessions(&self) -> StoreResult<BTreeMap<String, u64>>;

    /// Sessions of `tenant_id` other than `except_session_id` that an owner is working on
    /// ([`RouteState::is_active`]) under an execution lease that has not run out at `now_ms`.
    async fn count_held_sessions(
        &self,
        tenant_id: &str,
        except_session_id: &str,
        now_ms: u64,
    ) -> StoreResult<u64>;

    /// Workers past their heartbeat go offline, their leases are released, their active routes
    /// suspended, and sealed commands older than `abandon_sealed_after_ms` are abandoned.
    async fn recover_expired_work(
        &self,
        abandon_sealed_after_ms: u64,
    ) -> StoreResult<RecoveryCounts>;
}

/// Readiness and shutdown.
#[async_trait]
pub trait StoreLifecycle: Send + Sync {
    async fn health_check(&self) -> StoreHealth;
    /// Flushes and releases resources (the JSONL lock file). Later mutations fail with `NotOpen`.
    async fn close(&self) -> StoreResult<()>;
}

/// The memories of the memory tools (docs/agent.md §6.8), per tenant and scope.
#[async_trait]
pub trait AgentMemories: Send + Sync {
    /// Inserts or replaces `(tenant, record.scope, record.name)`, stamping `updated_at_ms`. A new
    /// name when the scope already holds `max_entries` memories is refused with
    /// `RUNTIME_STORE_QUOTA_EXCEEDED` and nothing changes.
    async fn save_memory(
        &self,
        tenant_id: &str,
        record: MemoryRecord,
        max_entries: u32,
    ) -> StoreResult<MemoryRecord>;

    async fn get_memory(
        &self,
        tenant_id: &str,
        scope: &str,
        name: &str,
    ) -> StoreResult<Option<MemoryRecord>>;

    /// The scope's memories, by name.
    async fn list_memories(&self, tenant_id: &str, scope: &str) -> StoreResult<Vec<MemoryRecord>>;

    /// Deletes one memory for good; whether it existed.
    async fn delete_memory(&self, tenant_id: &str, scope: &str, name: &str) -> StoreResult<bool>;
}

/// The webhook outbox (docs/storage.md §11). Deliveries are never enqueued through this port:
/// every backend writes them in the same commit as the change that causes them (see
/// [`crate::outbox`]), so a delivery exists exactly when its cause does.
#[async_trait]
pub trait WebhookOutbox: Send + Sync {
    /// Makes the stored endpoints exactly `subscriptions`: adds the new ones, updates the event
    /// types of the others, deletes the rest with their deliveries. An endpoint keeps its
    /// disabled state and its failure clock.
    async fn sync_webhook_endpoints(
        &self,
        subscriptions: &[WebhookSubscription],
    ) -> StoreResult<()>;

    /// Every endpoint of every tenant, by `(tenant, endpoint id)`.
    async fn list_webhook_endpoints(&self) -> StoreResult<Vec<WebhookEndpoint>>;

    /// Enables or disables an endpoint (`reason` is recorded when disabling). Whether it changed;
    /// `None` for an unknown endpoint.
    async fn set_webhook_endpoint_enabled(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        enabled: bool,
        reason: &str,
    ) -> StoreResult<Option<bool>>;

    /// Claims up to `limit` due deliveries for `claim_ttl_ms`: each the oldest pending delivery of
    /// its endpoint and session (so a session's deliveries go out in order), of an enabled
    /// endpoint, not under another unexpired claim. Oldest first.
    async fn claim_webhook_deliveries(
        &self,
        limit: u32,
        claim_ttl_ms: u64,
    ) -> StoreResult<Vec<ClaimedDelivery>>;

    /// Records attempts' outcomes, each under the claim that made it, in one write, and the
    /// endpoints' failure clocks: a failure that leaves an endpoint failing for
    /// `disable_after_ms` or longer disables it. Whether each was recorded (`false`: its claim
    /// expired and was taken or finished).
    async fn record_webhook_attempts(
        &self,
        attempts: &[(ClaimedDelivery, AttemptOutcome)],
        disable_after_ms: u64,
    ) -> StoreResult<Vec<bool>>;

    /// [`WebhookOutbox::record_webhook_attempts`] of one attempt.
    async fn record_webhook_attempt(
        &self,
        claim: &ClaimedDelivery,
        outcome: &AttemptOutcome,
        disable_after_ms: u64,
    ) -> StoreResult<bool> {
        let attempts = [(claim.clone(), outcome.clone())];
        let recorded = self
            .record_webhook_attempts(&attempts, disable_after_ms)
            .await?;
        Ok(recorded.first().copied().unwrap_or(false))
    }

    /// A tenant's deliveries to one endpoint after `after_position`, oldest first, at most
    /// `limit`; only those in `status` when given.
    async fn list_webhook_deliveries(
        &self,
        tenant_id: &str,
        endpoint_id: &str,
        status: Option<DeliveryStatus>,
        after_position: u64,
        limit: u32,
    ) -> StoreResult<Vec<WebhookDelivery>>;

    /// Puts a delivered or failed delivery back to pending, due now, with the same id. Whether it
    /// did (`false`: it is pending already); `None` for an unknown delivery.
    async fn redeliver_webhook(
        &self,
        tenant_id: &str,
        delivery_id: &str,
    ) -> StoreResult<Option<bool>>;

    /// Every endpoint's outbox counts.
    async fn webhook_outbox_stats(&self) -> StoreResult<Vec<WebhookEndpointStats>>;

    /// Deletes deliveries that finished (delivered or failed) at or before `finished_before_ms`,
    /// and each tenant's oldest pending deliveries beyond `max_pending_per_tenant`; at most `limit`
    /// of each.
    async fn reap_webhook_deliveries(
        &self,
        finished_before_ms: u64,
        max_pending_per_tenant: u64,
        limit: u32,
    ) -> StoreResult<ReapedDeliveries>;
}

/// Everything a tenant owns, at once: the operator's tenant deletion.
#[async_trait]
pub trait TenantData: Send + Sync {
    /// Deletes every record of `tenant_id` in every port: sessions with their events, keys,
    /// transcripts, journals, leases and routes; command receipts; memories; webhook endpoints
    /// and deliveries. Returns how many records it deleted (rows, on PostgreSQL). The tenant's
    /// sessions should be closed first: an executor still running one may write it again.
    async fn delete_tenant(&self, tenant_id: &str) -> StoreResult<u64>;
}

/// Every port in one object, as the binaries wire it (`Arc<dyn Store>`).
pub trait Store:
    CommandReceipts
    + SessionRecords
    + EventReader
    + EventLog
    + TranscriptStore
    + DurableJournal
    + ExecutionLeases
    + WorkerRegistry
    + SessionRoutes
    + AgentMemories
    + WebhookOutbox
    + TenantData
    + StoreLifecycle
{
}

impl<T> Store for T where
    T: CommandReceipts
        + SessionRecords
        + EventReader
        + EventLog
        + TranscriptStore
        + DurableJournal
        + ExecutionLeases
        + WorkerRegistry
        + SessionRoutes
        + AgentMemories
        + WebhookOutbox
        + TenantData
        + StoreLifecycle
{
}
