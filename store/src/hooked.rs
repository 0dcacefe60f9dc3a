//! One forwarding layer over the store port, for decorators that see every call: timing
//! ([`crate::timed`]) and, in tests, fault injection (`crate::faulty`).
//!
//! [`Hooked`] implements every port by handing each call to its [`StoreHooks`]. A hook decides
//! around one generic step ([`StoreHooks::around`]: the wrapped store's call as a future, with its
//! [`Operation`]); the few calls a decorator treats specially it overrides by name. The port's
//! methods are listed once, below, so a new port method is a compile error here until it is
//! listed, and an operation is named by an enum variant, never by a string. (Extra items a
//! port's forwarding impl needs beside the listed methods follow it in brackets.)

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;

use agent_runtime::protocol::EventEnvelope;
use async_trait::async_trait;
use serde_json::Value;

use crate::error::StoreResult;
use crate::model::*;
use crate::outbox::*;
use crate::ports::*;

/// The wrapped store's answer to one call, not yet awaited.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send + 'a>>;

/// A store whose every call goes through `hooks`. It dereferences to its hooks, so a test
/// arms a fault with `store.fail_next(…)`.
pub struct Hooked<H> {
    inner: Arc<dyn Store>,
    hooks: H,
}

impl<H: StoreHooks> Hooked<H> {
    pub fn with_hooks(inner: Arc<dyn Store>, hooks: H) -> Self {
        Self { inner, hooks }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    pub fn hooks_mut(&mut self) -> &mut H {
        &mut self.hooks
    }
}

impl<H> Deref for Hooked<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.hooks
    }
}

macro_rules! store_operations {
    ($(
        $port:ident {
            $( $op:ident $name:ident ( $( $arg:ident : $ty:ty ),* ) -> $ret:ty ; )*
        } $( [ $($extra:tt)* ] )?
    )*) => {
        /// Every call of the store port, by the port method's name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Operation {
            $( $( $op, )* )*
            HealthCheck,
        }

        impl Operation {
            /// Every operation, in port order.
            pub const ALL: &[Operation] = &[ $( $( Operation::$op, )* )* Operation::HealthCheck ];

            /// The port method's name (the `operation` label of the store metrics).
            pub fn name(self) -> &'static str {
                match self {
                    $( $( Operation::$op => stringify!($name), )* )*
                    Operation::HealthCheck => "health_check",
                }
            }

        }

        /// What a decorator does with each call. Every method has a default: `around` runs the
        /// call as it is, and each port method hands its call to `around`.
        #[async_trait]
        pub trait StoreHooks: Send + Sync + Sized + 'static {
            /// Runs one call of the wrapped store.
            async fn around<T: Send>(&self, operation: Operation, call: Call<'_, T>) -> StoreResult<T> {
                let _ = operation;
                call.await
            }

            /// Readiness answers with a report, not a `StoreResult`, so it bypasses `around`.
            async fn health_check(&self, store: &Hooked<Self>) -> StoreHealth {
                store.inner.health_check().await
            }

            $( $(
                async fn $name(&self, store: &Hooked<Self>, $( $arg: $ty ),*) -> StoreResult<$ret> {
                    self.around(Operation::$op, store.inner.$name($( $arg ),*)).await
                }
            )* )*
        }

        $(
            #[async_trait]
            impl<H: StoreHooks> $port for Hooked<H> {
                $(
                    async fn $name(&self, $( $arg: $ty ),*) -> StoreResult<$ret> {
                        self.hooks.$name(self, $( $arg ),*).await
                    }
                )*
                $( $($extra)* )?
            }
        )*
    };
}

store_operations! {
    CommandReceipts {
        ClaimCommand claim_command(tenant_id: &str, command_id: &str, fingerprint: &str, ttl_ms: u64) -> CommandClaim;
        SealCommand seal_command(tenant_id: &str, command_id: &str, lease_id: &str, target: &CommandTarget) -> ();
        ClaimAndSealCommand claim_and_seal_command(tenant_id: &str, command_id: &str, fingerprint: &str, ttl_ms: u64, target: &CommandTarget) -> CommandClaim;
        ListUnfinishedCommands list_unfinished_commands(after: Option<(String, String)>, limit: u32) -> Vec<UnfinishedCommand>;
        CompleteCommand complete_command(tenant_id: &str, command_id: &str, lease_id: &str, result: &Value) -> ();
        ReleaseCommand release_command(tenant_id: &str, command_id: &str, lease_id: &str) -> ();
        CommandReceiptExists command_receipt_exists(tenant_id: &str, command_id: &str) -> bool;
        ReopenSealedCommand reopen_sealed_command(tenant_id: &str, command_id: &str, lease_id: &str) -> ();
        AbandonCommand abandon_command(tenant_id: &str, command_id: &str, reason: &str) -> bool;
        ReapCommandReceipts reap_command_receipts(finished_before_ms: u64, limit: u32) -> u64;
        ReapReceiptsOverBudget reap_receipts_over_budget(max_bytes_per_tenant: u64, limit: u32) -> u64;
    }
    SessionRecords {
        PutSession put_session(record: &SessionRecord) -> ();
        GetSession get_session(tenant_id: &str, session_id: &str) -> Option<SessionRecord>;
        ListSessions list_sessions(tenant_id: &str, cursor: Option<&str>, limit: Option<u32>) -> SessionPage;
        ListActiveSessions list_active_sessions(after: Option<(String, String)>, limit: u32) -> Vec<(String, String)>;
        ListClosedSessions list_closed_sessions(tenants: &TenantScope, closed_before: &str, limit: u32) -> Vec<ClosedSession>;
        ClosedSessionsOverBudget closed_sessions_over_budget(tenants: &TenantScope, max_bytes: u64, limit: u32) -> Vec<ClosedSession>;
        PurgeSession purge_session(tenant_id: &str, session_id: &str) -> bool;
    }
    EventReader {
        GetEventByIdempotencyKey get_event_by_idempotency_key(tenant_id: &str, session_id: &str, idempotency_key: &str) -> Option<EventEnvelope>;
        ReadEvents read_events(tenant_id: &str, session_id: &str, after: u64, limit: u32) -> EventPage;
        LatestEventSequence latest_event_sequence(tenant_id: &str, session_id: &str) -> Option<u64>;
        EventStreamRange event_stream_range(tenant_id: &str, session_id: &str) -> Option<EventRange>;
        WaitForEvents wait_for_events(tenant_id: &str, session_id: &str, after: u64) -> ();
    }
    EventLog {
        AppendEvent append_event(tenant_id: &str, event: NewEvent, idempotency_key: Option<&str>) -> EventEnvelope;
        AppendEvents append_events(tenant_id: &str, session_id: &str, events: Vec<NewEvent>, fence: Option<&ExecutionFence>) -> Vec<EventEnvelope>;
        TrimEventsByAge trim_events_by_age(occurred_before: &str, limit: u32) -> u64;
    }
    TranscriptStore {
        CreateTranscript create_transcript(tenant_id: &str, session_id: &str, fence: Option<&ExecutionFence>) -> Transcript;
        LoadTranscript load_transcript(tenant_id: &str, session_id: &str) -> Option<Transcript>;
        MutateTranscript mutate_transcript(tenant_id: &str, session_id: &str, mutation: TranscriptMutation, fence: Option<&ExecutionFence>) -> Vec<TranscriptEntry>;
        ForkTranscript fork_transcript(tenant_id: &str, source_session_id: &str, target_session_id: &str, message_id: Option<&str>) -> Transcript;
        DeleteTranscript delete_transcript(tenant_id: &str, session_id: &str) -> ();
        ListTranscripts list_transcripts(tenant_id: &str) -> Vec<String>;
    }
    DurableJournal {
        AppendDurable append_durable(tenant_id: &str, session_id: &str, drafts: Vec<DurableEventDraft>, expected: ExpectedSequence, fence: Option<&ExecutionFence>) -> DurableAppendOutcome;
        WriteRequestStep write_request_step(tenant_id: &str, session_id: &str, step: RequestStep, fence: Option<&ExecutionFence>) -> RequestStepWritten;
        ReadDurable read_durable(tenant_id: &str, session_id: &str, after: u64, limit: u32) -> DurablePage;
        DurableHead durable_head(tenant_id: &str, session_id: &str) -> Option<u64>;
    } [
        fn writes_steps_atomically(&self) -> bool {
            self.inner.writes_steps_atomically()
        }
    ]
    ExecutionLeases {
        RequiresExecutionLease requires_execution_lease(tenant_id: &str, session_id: &str) -> bool;
        AcquireExecutionLease acquire_execution_lease(tenant_id: &str, session_id: &str, request: AcquireLease) -> ExecutionLease;
        RenewExecutionLease renew_execution_lease(tenant_id: &str, lease: &ExecutionLease, ttl_ms: u64) -> ExecutionLease;
        AssertExecutionLease assert_execution_lease(tenant_id: &str, lease: &ExecutionLease) -> ();
        ReleaseExecutionLease release_execution_lease(tenant_id: &str, lease: &ExecutionLease) -> ();
        GetExecutionLease get_execution_lease(tenant_id: &str, session_id: &str) -> Option<ExecutionLease>;
    }
    WorkerRegistry {
        RegisterWorker register_worker(request: RegisterWorker) -> WorkerRecord;
        HeartbeatWorker heartbeat_worker(worker_id: &str, ttl_ms: u64) -> WorkerRecord;
        DrainWorker drain_worker(worker_id: &str) -> WorkerRecord;
        GetWorker get_worker(worker_id: &str) -> Option<WorkerRecord>;
        ListWorkers list_workers() -> Vec<WorkerRecord>;
    }
    SessionRoutes {
        EnqueueSession enqueue_session(tenant_id: &str, session_id: &str, options: EnqueueOptions) -> SessionRoute;
        ClaimSession claim_session(request: ClaimSession) -> Option<RouteClaim>;
        TransitionSession transition_session(tenant_id: &str, lease: &ExecutionLease, transition: RouteTransition) -> SessionRoute;
        SettleSession settle_session(tenant_id: &str, lease: &ExecutionLease, transition: RouteTransition) -> SessionRoute;
        HandoffSession handoff_session(tenant_id: &str, lease: &ExecutionLease, metadata: Option<serde_json::Map<String, Value>>) -> SessionRoute;
        RenewSessionLease renew_session_lease(tenant_id: &str, lease: &ExecutionLease, ttl_ms: u64) -> RouteClaim;
        RenewSessionLeases renew_session_leases(leases: &[(String, ExecutionLease)], ttl_ms: u64) -> Vec<StoreResult<ExecutionLease>>;
        GetSessionRoute get_session_route(tenant_id: &str, session_id: &str) -> Option<SessionRoute>;
        ListWorkerSessions list_worker_sessions(worker_id: &str) -> Vec<SessionRoute>;
        CountWorkerSessions count_worker_sessions() -> std::collections::BTreeMap<String, u64>;
        CountHeldSessions count_held_sessions(tenant_id: &str, except_session_id: &str, now_ms: u64) -> u64;
        RecoverExpiredWork recover_expired_work(abandon_sealed_after_ms: u64) -> RecoveryCounts;
    }
    AgentMemories {
        SaveMemory save_memory(tenant_id: &str, record: MemoryRecord, max_entries: u32) -> MemoryRecord;
        GetMemory get_memory(tenant_id: &str, scope: &str, name: &str) -> Option<MemoryRecord>;
        ListMemories list_memories(tenant_id: &str, scope: &str) -> Vec<MemoryRecord>;
        DeleteMemory delete_memory(tenant_id: &str, scope: &str, name: &str) -> bool;
    }
    WebhookOutbox {
        SyncWebhookEndpoints sync_webhook_endpoints(subscriptions: &[WebhookSubscription]) -> ();
        ListWebhookEndpoints list_webhook_endpoints() -> Vec<WebhookEndpoint>;
        SetWebhookEndpointEnabled set_webhook_endpoint_enabled(tenant_id: &str, endpoint_id: &str, enabled: bool, reason: &str) -> Option<bool>;
        ClaimWebhookDeliveries claim_webhook_deliveries(limit: u32, claim_ttl_ms: u64) -> Vec<ClaimedDelivery>;
        RecordWebhookAttempts record_webhook_attempts(attempts: &[(ClaimedDelivery, AttemptOutcome)], disable_after_ms: u64) -> Vec<bool>;
        ListWebhookDeliveries list_webhook_deliveries(tenant_id: &str, endpoint_id: &str, status: Option<DeliveryStatus>, after_position: u64, limit: u32) -> Vec<WebhookDelivery>;
        RedeliverWebhook redeliver_webhook(tenant_id: &str, delivery_id: &str) -> Option<bool>;
        WebhookOutboxStats webhook_outbox_stats() -> Vec<WebhookEndpointStats>;
        ReapWebhookDeliveries reap_webhook_deliveries(finished_before_ms: u64, max_pending_per_tenant: u64, limit: u32) -> ReapedDeliveries;
    }
    TenantData {
        DeleteTenant delete_tenant(tenant_id: &str) -> u64;
    }
    StoreLifecycle {
        Close close() -> ();
    } [
        async fn health_check(&self) -> StoreHealth {
            self.hooks.health_check(self).await
        }
    ]
}
