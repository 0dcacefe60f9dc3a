//! The decision rules every backend shares (decision S6: one behaviour for every backend), as pure
//! functions over records: the claim decision order, the fencing rule, lease matching, lease
//! acquisition, route changes, enqueueing and claiming. The memory engine applies their outcome
//! to its state under its lock; the PostgreSQL backend applies it to rows it has locked in one
//! transaction. Only the storage of the outcome differs.

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::{EventEnvelope, JsonObject, ProtocolVersion};
use agent_runtime::timefmt::format_iso_ms;
use serde_json::Value;

use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::journal::CommandLease;
use crate::model::{
    AcquireLease, ClaimSession, CommandClaim, DEFAULT_SESSION_PAGE, DURABLE_SCHEMA_VERSION,
    DurableEvent, DurableEventDraft, EnqueueOptions, ExecutionFence, ExecutionLease,
    ExpectedSequence, HistoryProgress, HistoryState, MAX_EVENT_PAGE, MAX_LEASE_TTL_MS,
    MAX_SESSION_PAGE, MemoryRecord, NewEvent, RouteState, RouteTransition, SessionRecord,
    SessionRoute, TranscriptMutation,
};

/// `retryAfterMs` for a sealed (non-expiring) command.
pub const SEALED_RETRY_AFTER_MS: u64 = 1000;

/// The largest fencing token (the reference's safe-integer limit).
pub const MAX_FENCING_TOKEN: u64 = (1 << 53) - 1;

// ---------------------------------------------------------------------------------------------
// Errors with the reference's wording

/// Whether a route in `state` may be claimed: suspended ones always, queued ones unless the
/// claim is for orphans only.
pub fn claimable_state(state: RouteState, orphans_only: bool) -> bool {
    match state {
        RouteState::Suspended => true,
        RouteState::Queued => !orphans_only,
        _ => false,
    }
}

pub fn command_lease_lost(command_id: &str, lease_id: &str) -> StoreError {
    StoreError::CommandLeaseLost(format!(
        "Command lease {command_id}/{lease_id} is no longer active"
    ))
}

pub fn lease_lost(lease_id: &str, session_id: &str) -> StoreError {
    StoreError::runtime(
        RuntimeErrorCode::LeaseLost,
        format!("Execution lease {lease_id} is not active for Session {session_id}"),
    )
}

pub fn lease_invalid(message: &str) -> StoreError {
    StoreError::runtime(RuntimeErrorCode::LeaseInvalid, message)
}

pub fn state_conflict(message: String) -> StoreError {
    StoreError::runtime(RuntimeErrorCode::SessionStateConflict, message)
}

pub fn route_not_found(session_id: &str) -> StoreError {
    StoreError::runtime(
        RuntimeErrorCode::SessionRouteNotFound,
        format!("Runtime Session {session_id} has no route"),
    )
}

pub fn worker_invalid(message: impl Into<String>) -> StoreError {
    StoreError::runtime(RuntimeErrorCode::WorkerInvalid, message)
}

pub fn transcript_not_found(session_id: &str) -> StoreError {
    StoreError::runtime(
        RuntimeErrorCode::TranscriptNotFound,
        format!("Transcript of Session {session_id} was not found"),
    )
}

pub fn blank(value: &str) -> bool {
    value.trim().is_empty()
}

// ---------------------------------------------------------------------------------------------
// Validation

/// TTLs of leases, claims and worker heartbeats: 1 ms ..= 24 h, else `code`.
pub fn check_ttl(ttl_ms: u64, code: RuntimeErrorCode, subject: &str) -> StoreResult<()> {
    if (1..=MAX_LEASE_TTL_MS).contains(&ttl_ms) {
        return Ok(());
    }
    Err(StoreError::runtime(
        code,
        format!("{subject} TTL must be between 1 and {MAX_LEASE_TTL_MS} ms"),
    ))
}

pub fn validate_lease_ttl(ttl_ms: u64) -> StoreResult<()> {
    check_ttl(ttl_ms, RuntimeErrorCode::LeaseInvalid, "Execution lease")
}

pub fn validate_worker_ttl(ttl_ms: u64) -> StoreResult<()> {
    check_ttl(ttl_ms, RuntimeErrorCode::WorkerInvalid, "Worker")
}

pub fn validate_claim_command(
    tenant_id: &str,
    command_id: &str,
    fingerprint: &str,
    ttl_ms: u64,
) -> StoreResult<()> {
    if blank(tenant_id)
        || blank(command_id)
        || blank(fingerprint)
        || !(1..=MAX_LEASE_TTL_MS).contains(&ttl_ms)
    {
        return Err(StoreError::invalid("Command claim parameters are invalid"));
    }
    Ok(())
}

pub fn validate_acquire(session_id: &str, request: &AcquireLease) -> StoreResult<()> {
    if blank(session_id) || blank(&request.lease_id) || blank(&request.owner_id) {
        return Err(lease_invalid(
            "Execution lease session, lease and owner ids must not be blank",
        ));
    }
    validate_lease_ttl(request.ttl_ms)
}

pub fn validate_claim_session(request: &ClaimSession) -> StoreResult<()> {
    let blank_filter = |value: &Option<String>| value.as_ref().is_some_and(|v| blank(v));
    if blank(&request.owner_id)
        || blank(&request.lease_id)
        || blank_filter(&request.tenant_id)
        || blank_filter(&request.session_id)
    {
        return Err(worker_invalid(
            "Session claims need non-blank owner, lease, tenant and session ids",
        ));
    }
    validate_worker_ttl(request.ttl_ms)
}

/// A settle may only go to idle, completed or failed, and failed needs failure details.
pub fn validate_settle(transition: &RouteTransition) -> StoreResult<()> {
    if !matches!(
        transition.state,
        RouteState::Idle | RouteState::Completed | RouteState::Failed
    ) {
        return Err(worker_invalid(
            "A Session settles only to idle, completed or failed",
        ));
    }
    if transition.state == RouteState::Failed && transition.failure.is_none() {
        return Err(worker_invalid(
            "Failed Session settlement requires failure details",
        ));
    }
    Ok(())
}

pub fn handoff_transition(metadata: Option<JsonObject>) -> RouteTransition {
    RouteTransition {
        expected_state: None,
        state: RouteState::Suspended,
        metadata,
        failure: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Command receipts (docs/storage.md §1.2)

impl CommandLease {
    /// Claimed (not sealed, no result, not abandoned): the only state seal and release accept.
    pub fn is_claimed(&self) -> bool {
        !self.sealed && self.result.is_none() && self.abandon_reason.is_none()
    }
}

/// Steps 1-4 of the claim decision order for an existing receipt; `None` means step 5: the
/// receipt is an expired, unsealed claim and a new claim replaces it.
pub fn decide_existing_claim(
    existing: &CommandLease,
    fingerprint: &str,
    now: u64,
) -> Option<CommandClaim> {
    if existing.command_fingerprint != fingerprint {
        return Some(CommandClaim::Conflict);
    }
    if let Some(result) = &existing.result {
        return Some(CommandClaim::Completed {
            result: result.thaw(),
        });
    }
    if let Some(reason) = &existing.abandon_reason {
        return Some(CommandClaim::Abandoned {
            reason: reason.clone(),
        });
    }
    match existing.expires_at {
        None => Some(CommandClaim::InProgress {
            retry_after_ms: SEALED_RETRY_AFTER_MS,
        }),
        Some(expires_at) if existing.sealed || expires_at > now => Some(CommandClaim::InProgress {
            retry_after_ms: expires_at.saturating_sub(now).max(1),
        }),
        Some(_) => None,
    }
}

/// A fresh claim of `ttl_ms` from `now`.
pub fn new_command_lease(fingerprint: &str, ttl_ms: u64, now: u64) -> CommandLease {
    CommandLease {
        lease_id: nanoid(),
        command_fingerprint: fingerprint.to_owned(),
        expires_at: Some(now.saturating_add(ttl_ms)),
        sealed: false,
        result: None,
        abandon_reason: None,
        sealed_at: None,
        finished_at: None,
        target: None,
        result_bytes: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Execution leases and fencing (docs/storage.md §4.1, §4.2)

impl ExecutionLease {
    /// Not released and not yet expired.
    pub fn is_active(&self, now: u64) -> bool {
        self.released_at_ms.is_none() && self.expires_at_ms > now
    }
}

/// The fencing rule of docs/storage.md §4.2 for a write to `session_id`, given its lease row.
pub fn check_fence(
    row: Option<&ExecutionLease>,
    fence: Option<&ExecutionFence>,
    session_id: &str,
    now: u64,
) -> StoreResult<()> {
    match (row, fence) {
        (None, None) => Ok(()),
        (None, Some(fence)) => Err(lease_lost(&fence.lease_id, session_id)),
        (Some(row), None) => {
            let holder = if row.is_active(now) {
                format!(
                    " (held by {} with fencing token {})",
                    row.owner_id, row.fencing_token
                )
            } else {
                String::new()
            };
            Err(StoreError::runtime(
                RuntimeErrorCode::LeaseRequired,
                format!("Session {session_id} requires an execution lease{holder}"),
            ))
        }
        (Some(row), Some(fence)) => {
            let matches = row.lease_id == fence.lease_id
                && row.fencing_token == fence.fencing_token
                && row.is_active(now);
            if matches {
                Ok(())
            } else {
                Err(lease_lost(&fence.lease_id, session_id))
            }
        }
    }
}

/// Whether `lease` is the session's current lease row: same id, token and owner, not released,
/// and (when `require_active`) not expired.
pub fn lease_matches(
    row: Option<&ExecutionLease>,
    lease: &ExecutionLease,
    require_active: bool,
    now: u64,
) -> bool {
    row.is_some_and(|row| {
        row.lease_id == lease.lease_id
            && row.fencing_token == lease.fencing_token
            && row.owner_id == lease.owner_id
            && row.released_at_ms.is_none()
            && (!require_active || row.expires_at_ms > now)
    })
}

/// A release repeated with the same lease id and token after it took effect.
pub fn already_released(row: Option<&ExecutionLease>, lease: &ExecutionLease) -> bool {
    row.is_some_and(|row| {
        row.released_at_ms.is_some()
            && row.lease_id == lease.lease_id
            && row.fencing_token == lease.fencing_token
    })
}

/// The fencing token after the current ones of the session's lease row and route.
pub fn next_fencing_token(lease_token: u64, route_token: u64) -> StoreResult<u64> {
    let next = lease_token.max(route_token) + 1;
    if next > MAX_FENCING_TOKEN {
        return Err(lease_invalid(
            "Execution lease fencing tokens are exhausted",
        ));
    }
    Ok(next)
}

/// The lease row after an acquire (§4.1): a conflict with another active holder, the same
/// holder's lease renewed with its token, or a new lease with the next token.
pub fn plan_acquire(
    row: Option<&ExecutionLease>,
    route_token: u64,
    session_id: &str,
    request: AcquireLease,
    now: u64,
) -> StoreResult<ExecutionLease> {
    if let Some(row) = row.filter(|r| r.is_active(now)) {
        if row.lease_id != request.lease_id || row.owner_id != request.owner_id {
            return Err(StoreError::runtime(
                RuntimeErrorCode::LeaseConflict,
                format!(
                    "Session {session_id} has an active execution lease held by {} with fencing token {}",
                    row.owner_id, row.fencing_token
                ),
            ));
        }
        // The same holder asking again (e.g. after an uncertain timeout): same token.
        let mut renewed = row.clone();
        renewed.renewed_at_ms = now;
        renewed.expires_at_ms = now.saturating_add(request.ttl_ms);
        return Ok(renewed);
    }
    let lease_token = row.map_or(0, |r| r.fencing_token);
    Ok(ExecutionLease {
        session_id: session_id.to_owned(),
        lease_id: request.lease_id,
        owner_id: request.owner_id,
        fencing_token: next_fencing_token(lease_token, route_token)?,
        acquired_at_ms: now,
        renewed_at_ms: now,
        expires_at_ms: now.saturating_add(request.ttl_ms),
        released_at_ms: None,
    })
}

// ---------------------------------------------------------------------------------------------
// Session routes (docs/storage.md §4.4, §4.6)

pub fn clear_ownership(route: &mut SessionRoute) {
    route.worker_id = None;
    route.lease_id = None;
    route.lease_expires_at_ms = None;
}

/// The failure recorded on a route the recovery sweep suspends, unless it already has one.
pub fn sweep_failure() -> JsonObject {
    JsonObject::from_iter([("reason".to_owned(), Value::from("worker_lease_expired"))])
}

/// The route after an enqueue, and whether the stale lease row it pointed at must be released.
pub fn plan_enqueue(
    tenant_id: &str,
    session_id: &str,
    existing: Option<&SessionRoute>,
    lease_row: Option<&ExecutionLease>,
    options: EnqueueOptions,
    now: u64,
) -> StoreResult<(SessionRoute, bool)> {
    if lease_row.is_some_and(|l| l.is_active(now)) {
        return Err(state_conflict(format!(
            "Runtime Session {session_id} has an active execution lease"
        )));
    }
    let mut release_stale = false;
    if let Some(route) = existing {
        let queueable = matches!(
            route.state,
            RouteState::Queued | RouteState::Suspended | RouteState::Idle
        );
        if !queueable {
            return Err(state_conflict(format!(
                "Runtime Session {session_id} cannot be queued from {}",
                route.state.as_str()
            )));
        }
        release_stale = route.lease_id.as_deref().is_some_and(|lease_id| {
            lease_row.is_some_and(|row| row.lease_id == lease_id && row.released_at_ms.is_none())
        });
    }
    // attempt and fencing_token survive a re-enqueue, so the next claim's token is higher.
    let (attempt, fencing_token) = existing.map_or((0, 0), |r| (r.attempt, r.fencing_token));
    let route = SessionRoute {
        tenant_id: tenant_id.to_owned(),
        session_id: session_id.to_owned(),
        state: RouteState::Queued,
        priority: options.priority,
        attempt,
        fencing_token,
        worker_id: None,
        lease_id: None,
        lease_expires_at_ms: None,
        queued_at_ms: now,
        updated_at_ms: now,
        metadata: options.metadata,
        failure: None,
    };
    Ok((route, release_stale))
}

/// The route and lease of a worker claiming `chosen` with `fencing_token`.
pub fn claimed_route(
    chosen: &SessionRoute,
    request: &ClaimSession,
    fencing_token: u64,
    now: u64,
) -> (SessionRoute, ExecutionLease) {
    let expires_at_ms = now.saturating_add(request.ttl_ms);
    let mut route = chosen.clone();
    route.state = RouteState::Provisioning;
    route.attempt += 1;
    route.fencing_token = fencing_token;
    route.worker_id = Some(request.owner_id.clone());
    route.lease_id = Some(request.lease_id.clone());
    route.lease_expires_at_ms = Some(expires_at_ms);
    route.failure = None;
    route.updated_at_ms = now;
    let lease = ExecutionLease {
        session_id: chosen.session_id.clone(),
        lease_id: request.lease_id.clone(),
        owner_id: request.owner_id.clone(),
        fencing_token,
        acquired_at_ms: now,
        renewed_at_ms: now,
        expires_at_ms,
        released_at_ms: None,
    };
    (route, lease)
}

/// The outcome of a transition, settle or handoff.
pub struct RouteChange {
    pub route: SessionRoute,
    /// The lease row must be released (the target clears ownership and this is not a replay).
    pub release_lease: bool,
}

/// The shared algorithm of transition, settle and handoff (§4.4). `allow_replay` lets a settle or
/// handoff repeated with the same, already released fence succeed again.
pub fn plan_route_change(
    current: Option<&SessionRoute>,
    lease_row: Option<&ExecutionLease>,
    lease: &ExecutionLease,
    change: RouteTransition,
    allow_replay: bool,
    now: u64,
) -> StoreResult<RouteChange> {
    let session_id = &lease.session_id;
    let Some(current) = current else {
        return Err(route_not_found(session_id));
    };
    let replay = allow_replay
        && lease_row.is_some_and(|row| {
            row.lease_id == lease.lease_id
                && row.owner_id == lease.owner_id
                && row.fencing_token == lease.fencing_token
                && row.released_at_ms.is_some()
        });
    if !replay && !lease_matches(lease_row, lease, true, now) {
        return Err(lease_lost(&lease.lease_id, session_id));
    }
    if let Some(expected) = change.expected_state
        && expected != current.state
    {
        return Err(state_conflict(format!(
            "Runtime Session {session_id} is {}, not {}",
            current.state.as_str(),
            expected.as_str()
        )));
    }
    if !current.state.can_transition_to(change.state) {
        return Err(state_conflict(format!(
            "Runtime Session cannot transition from {} to {}",
            current.state.as_str(),
            change.state.as_str()
        )));
    }
    let holds_route = current.fencing_token == lease.fencing_token
        && (current.lease_id.as_deref() == Some(&lease.lease_id)
            || (replay && current.lease_id.is_none()));
    if !holds_route {
        return Err(lease_lost(&lease.lease_id, session_id));
    }
    let mut route = current.clone();
    route.state = change.state;
    if change.state.clears_ownership() {
        clear_ownership(&mut route);
    }
    if let Some(metadata) = change.metadata {
        route.metadata = metadata;
    }
    if change.failure.is_some() {
        route.failure = change.failure;
    }
    route.updated_at_ms = now;
    Ok(RouteChange {
        route,
        release_lease: change.state.clears_ownership() && !replay,
    })
}

// ---------------------------------------------------------------------------------------------
// Sessions, agent events and the durable journal (docs/storage.md §1.3, §1.4, §7.1)

/// Validates a session page request; returns `(offset, limit)`.
pub fn session_page(cursor: Option<&str>, limit: Option<u32>) -> StoreResult<(u64, u32)> {
    let limit = limit.unwrap_or(DEFAULT_SESSION_PAGE);
    if !(1..=MAX_SESSION_PAGE).contains(&limit) {
        return Err(StoreError::invalid("Session list pagination is invalid"));
    }
    let offset = match cursor {
        None => 0,
        // A cursor is the decimal offset this store issued: ASCII digits only.
        Some(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => text
            .parse::<u64>()
            .ok()
            .filter(|offset| i64::try_from(*offset).is_ok())
            .ok_or_else(|| StoreError::invalid("Session list cursor is invalid"))?,
        Some(_) => return Err(StoreError::invalid("Session list cursor is invalid")),
    };
    Ok((offset, limit))
}

pub fn check_session_record_ids(record: &SessionRecord) -> StoreResult<()> {
    if blank(&record.tenant_id) || blank(&record.session_id) {
        return Err(StoreError::invalid("Session record ids must not be blank"));
    }
    Ok(())
}

pub fn check_event_ids(tenant_id: &str, session_id: &str) -> StoreResult<()> {
    if blank(tenant_id) || blank(session_id) {
        return Err(StoreError::invalid(
            "Event tenant and session ids must not be blank",
        ));
    }
    Ok(())
}

pub fn check_batch_session(events: &[NewEvent], session_id: &str) -> StoreResult<()> {
    if events.iter().any(|event| event.session_id != session_id) {
        return Err(StoreError::invalid(
            "Event Session does not match the target event log",
        ));
    }
    Ok(())
}

pub fn check_event_limit(limit: u32) -> StoreResult<()> {
    if !(1..=MAX_EVENT_PAGE).contains(&limit) {
        return Err(StoreError::invalid(
            "Event page limit must be between 1 and 1000",
        ));
    }
    Ok(())
}

pub fn cursor_ahead_of_head() -> StoreError {
    StoreError::StaleCursor("Event cursor is ahead of the session head".into())
}

pub fn cursor_stale() -> StoreError {
    StoreError::StaleCursor("Event cursor is stale".into())
}

/// Sequences `events` from `first_sequence`, stamping a missing `occurredAt` with `now`.
pub fn sequence_events(events: Vec<NewEvent>, first_sequence: u64, now: u64) -> Vec<EventEnvelope> {
    events
        .into_iter()
        .zip(first_sequence..)
        .map(|(event, sequence)| EventEnvelope {
            protocol_version: ProtocolVersion,
            event_id: nanoid(),
            sequence,
            session_id: event.session_id,
            request_id: event.request_id,
            occurred_at: if event.occurred_at.is_empty() {
                format_iso_ms(now)
            } else {
                event.occurred_at
            },
            event_type: event.event_type,
            data: event.data.into(),
            rendered: Default::default(),
        })
        .collect()
}

pub fn abandon_reason_required(reason: &str) -> StoreResult<()> {
    if blank(reason) {
        return Err(StoreError::invalid(
            "An abandoned command requires a reason",
        ));
    }
    Ok(())
}

pub fn check_route_ids(tenant_id: &str, session_id: &str) -> StoreResult<()> {
    if blank(tenant_id) || blank(session_id) {
        return Err(worker_invalid(
            "Route tenant and session ids must not be blank",
        ));
    }
    Ok(())
}

pub fn check_durable_append(
    tenant_id: &str,
    session_id: &str,
    drafts: &[DurableEventDraft],
) -> StoreResult<()> {
    if blank(tenant_id) || blank(session_id) {
        return Err(StoreError::runtime(
            RuntimeErrorCode::DurableInvalidAppend,
            "Durable append tenant and session ids must not be blank",
        ));
    }
    if drafts.is_empty() {
        return Err(StoreError::runtime(
            RuntimeErrorCode::DurableInvalidAppend,
            "A durable append requires at least one event",
        ));
    }
    if let Some(index) = drafts.iter().position(|d| blank(&d.event_type)) {
        return Err(StoreError::runtime(
            RuntimeErrorCode::DurableInvalidAppend,
            format!("Invalid durable event draft at index {index}"),
        ));
    }
    Ok(())
}

pub fn check_durable_limit(limit: u32) -> StoreResult<()> {
    if !(1..=MAX_EVENT_PAGE).contains(&limit) {
        return Err(StoreError::runtime(
            RuntimeErrorCode::DurableInvalidCursor,
            "Durable page limit must be between 1 and 1000",
        ));
    }
    Ok(())
}

pub fn durable_cursor_ahead(after: u64, session_id: &str) -> StoreError {
    StoreError::runtime(
        RuntimeErrorCode::DurableInvalidCursor,
        format!("Durable cursor {after} is ahead of the head of Session {session_id}"),
    )
}

fn describe_head(head: Option<u64>) -> String {
    head.map_or_else(|| "an empty stream".to_owned(), |h| format!("head {h}"))
}

/// The compare-and-set and the quota of a durable append at `head` (docs/storage.md §3.3, §7.1).
pub fn check_durable_head(
    session_id: &str,
    head: Option<u64>,
    expected: ExpectedSequence,
    batch: usize,
    quota: u64,
) -> StoreResult<()> {
    let expected_head = match expected {
        ExpectedSequence::Any => head,
        ExpectedSequence::Empty => None,
        ExpectedSequence::At(sequence) => Some(sequence),
    };
    if expected_head != head {
        return Err(StoreError::runtime(
            RuntimeErrorCode::DurableSequenceConflict,
            format!(
                "Durable append for Session {session_id} expected {} but found {}",
                describe_head(expected_head),
                describe_head(head)
            ),
        ));
    }
    if head.unwrap_or(0).saturating_add(batch as u64) > quota {
        return Err(StoreError::runtime(
            RuntimeErrorCode::QuotaExceeded,
            format!("Session {session_id} exceeded its quota of {quota} durable events"),
        ));
    }
    Ok(())
}

/// The stored events of a batch appended after `head`, sharing one `recordedAt`.
pub fn build_durable_events(
    session_id: &str,
    drafts: Vec<DurableEventDraft>,
    head: Option<u64>,
    now: u64,
) -> Vec<DurableEvent> {
    // One shared commit time for the whole batch, like the reference's `recordedAt`.
    let recorded_at = format_iso_ms(now);
    drafts
        .into_iter()
        .zip(head.unwrap_or(0) + 1..)
        .map(|(draft, sequence)| DurableEvent {
            schema_version: DURABLE_SCHEMA_VERSION,
            event_id: nanoid(),
            sequence,
            session_id: session_id.to_owned(),
            event_type: draft.event_type,
            data: draft.data,
            recorded_at: recorded_at.clone(),
            occurred_at: draft.occurred_at.unwrap_or_else(|| recorded_at.clone()),
            correlation: draft.correlation,
        })
        .collect()
}

/// After a batch with `request_completed`, the transcript covers that request: the history
/// update to apply in the same atomic step, if any.
pub fn coverage_update(events: &[DurableEvent], now: u64) -> Option<TranscriptMutation> {
    let request_id = events
        .iter()
        .rev()
        .filter(|event| event.event_type == "request_completed")
        .find_map(|event| event.correlation.request_id.clone())?;
    Some(TranscriptMutation::SaveHistoryProgress(HistoryProgress {
        state: HistoryState::Complete,
        request_id: Some(request_id.clone()),
        turn_id: None,
        message_id: None,
        covered_request_id: Some(request_id),
        updated_at_ms: now,
        detail: None,
        repaired_messages: None,
    }))
}

// ---------------------------------------------------------------------------------------------
// Memories

/// A memory a backend may store: a slug name, a known type, a non-blank scope and description.
pub fn validate_memory(record: &MemoryRecord) -> StoreResult<()> {
    let slug = !record.name.is_empty()
        && record.name.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if !slug {
        return Err(StoreError::InvalidArgument(format!(
            "Invalid memory name {:?}: use lowercase letters, digits and single hyphens",
            record.name
        )));
    }
    if !["user", "feedback", "project", "reference"].contains(&record.memory_type.as_str()) {
        return Err(StoreError::InvalidArgument(format!(
            "Invalid memory type {:?}: one of user, feedback, project, reference",
            record.memory_type
        )));
    }
    if record.scope.trim().is_empty() || record.description.trim().is_empty() {
        return Err(StoreError::InvalidArgument(
            "A memory needs a scope and a description".to_owned(),
        ));
    }
    Ok(())
}

/// A save of a new memory into a full scope.
pub fn memory_quota_exceeded(max_entries: u32) -> StoreError {
    StoreError::runtime(
        RuntimeErrorCode::QuotaExceeded,
        format!("The memory store is full ({max_entries} memories); delete one first"),
    )
}
