//! The approval broker (docs/protocol.md §9): a tool that needs a human decision parks here until a
//! `permission.resolve` from the right principal arrives, the request is aborted, the session is
//! closed, the executor shuts down, or the approval times out.
//!
//! Isolation: a pending approval is bound to (tenant, session, permission request id) and to its
//! approver: the subject that submitted the input of the request asking (the session's creator
//! for an input restored after a restart). A principal of the tenant with `session:admin` may
//! answer it too. Any other resolve answers exactly like an unknown id. A resolved, timed-out or cancelled id is remembered as
//! consumed for one timeout period so that it can neither be resolved nor requested again.

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

#[cfg(test)]
mod tests;

/// Default approval timeout: 5 minutes.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// The human's answer, delivered to the tool exactly as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalDecision {
    pub approved: bool,
    pub reason: Option<String>,
    pub scope: Option<ApprovalScope>,
}

/// How long an approval holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalScope {
    Once,
    /// Remember the approval for the rest of the session.
    Session,
}

/// Why a tool did not get a decision.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalFailure {
    /// Nobody answered within the timeout (the reference's `PERMISSION_NOT_FOUND`, status 408).
    #[error("Permission request {0} timed out")]
    TimedOut(String),
    /// The request was aborted, the session closed, or the executor is shutting down.
    #[error("{0}")]
    Cancelled(String),
    /// The id is pending or was consumed recently (the reference's `SESSION_CONFLICT`).
    #[error("Permission request {0} is already pending")]
    AlreadyPending(String),
    /// Publishing `permission.requested` failed; nobody could have seen the request.
    #[error("{0}")]
    PublishFailed(String),
}

/// Who asks, and about what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalRequest {
    pub tenant_id: String,
    pub session_id: String,
    /// Subject allowed to answer: the submitter of the request's input.
    pub subject: String,
    pub permission_request_id: String,
    /// The protocol request the tool runs in; `request.abort` cancels its approvals.
    pub request_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ApprovalKey {
    tenant_id: String,
    session_id: String,
    permission_request_id: String,
}

impl ApprovalKey {
    fn of(tenant_id: &str, session_id: &str, permission_request_id: &str) -> Self {
        Self {
            tenant_id: tenant_id.to_owned(),
            session_id: session_id.to_owned(),
            permission_request_id: permission_request_id.to_owned(),
        }
    }
}

type Responder = oneshot::Sender<Result<ApprovalDecision, ApprovalFailure>>;

#[derive(Debug)]
struct Pending {
    subject: String,
    request_id: Option<String>,
    responder: Responder,
}

#[derive(Debug, Default)]
struct BrokerState {
    pending: HashMap<ApprovalKey, Pending>,
    /// Consumed ids and when they may be used again.
    consumed: HashMap<ApprovalKey, Instant>,
}

/// Who answers an approval.
#[derive(Clone, Copy, Debug)]
pub struct Resolver<'a> {
    pub subject: &'a str,
    /// Holds `session:admin`: may answer any approval of its tenant.
    pub admin: bool,
}

impl Resolver<'_> {
    fn may_answer(&self, pending: &Pending) -> bool {
        self.admin || pending.subject == self.subject
    }
}

/// Shared by every session of an executor.
#[derive(Clone, Debug)]
pub struct ApprovalBroker {
    state: Arc<Mutex<BrokerState>>,
    timeout: Duration,
}

impl ApprovalBroker {
    pub fn new(timeout: Duration) -> Self {
        Self {
            state: Arc::default(),
            timeout,
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BrokerState> {
        self.state.locked()
    }

    /// Registers the approval, publishes it with `publish`, and waits for the outcome. Dropping
    /// the returned future (the tool was cancelled) withdraws the approval.
    pub async fn request<P>(
        &self,
        request: ApprovalRequest,
        publish: P,
    ) -> Result<ApprovalDecision, ApprovalFailure>
    where
        P: Future<Output = Result<(), String>>,
    {
        let key = ApprovalKey::of(
            &request.tenant_id,
            &request.session_id,
            &request.permission_request_id,
        );
        let receiver = self.register(&key, &request)?;
        let guard = Withdraw {
            broker: self,
            key: &key,
        };

        if let Err(message) = publish.await {
            self.lock().pending.remove(&key);
            std::mem::forget(guard);
            return Err(ApprovalFailure::PublishFailed(message));
        }

        let outcome = tokio::select! {
            answer = receiver => answer.unwrap_or_else(|_| {
                Err(ApprovalFailure::Cancelled("Approval broker dropped the request".to_owned()))
            }),
            () = tokio::time::sleep(self.timeout) => {
                let mut state = self.lock();
                if state.pending.remove(&key).is_some() {
                    state.consumed.insert(key.clone(), Instant::now() + self.timeout);
                }
                Err(ApprovalFailure::TimedOut(request.permission_request_id.clone()))
            }
        };
        std::mem::forget(guard);
        outcome
    }

    fn register(
        &self,
        key: &ApprovalKey,
        request: &ApprovalRequest,
    ) -> Result<oneshot::Receiver<Result<ApprovalDecision, ApprovalFailure>>, ApprovalFailure> {
        let mut state = self.lock();
        let now = Instant::now();
        state.consumed.retain(|_, until| *until > now);
        if state.pending.contains_key(key) || state.consumed.contains_key(key) {
            return Err(ApprovalFailure::AlreadyPending(
                request.permission_request_id.clone(),
            ));
        }
        let (responder, receiver) = oneshot::channel();
        state.pending.insert(
            key.clone(),
            Pending {
                subject: request.subject.clone(),
                request_id: request.request_id.clone(),
                responder,
            },
        );
        Ok(receiver)
    }

    /// Delivers a decision. Returns false ("not pending") when no approval matches the whole
    /// isolation key or the resolver may not answer it.
    pub fn resolve(
        &self,
        tenant_id: &str,
        session_id: &str,
        resolver: Resolver<'_>,
        permission_request_id: &str,
        decision: ApprovalDecision,
    ) -> bool {
        let key = ApprovalKey::of(tenant_id, session_id, permission_request_id);
        let mut state = self.lock();
        let matches = state
            .pending
            .get(&key)
            .is_some_and(|pending| resolver.may_answer(pending));
        if !matches {
            return false;
        }
        let Some(pending) = state.pending.remove(&key) else {
            return false;
        };
        state.consumed.insert(key, Instant::now() + self.timeout);
        // The waiter may have just gone (cancelled tool); the decision then has nobody to reach.
        let _ = pending.responder.send(Ok(decision));
        true
    }

    /// Cancels every approval of a session (close).
    pub fn cancel_session(&self, tenant_id: &str, session_id: &str, reason: &str) {
        self.cancel_where(reason, |key, _| {
            key.tenant_id == tenant_id && key.session_id == session_id
        });
    }

    /// Cancels the approvals of one request (abort).
    pub fn cancel_request(
        &self,
        tenant_id: &str,
        session_id: &str,
        request_id: &str,
        reason: &str,
    ) {
        self.cancel_where(reason, |key, pending| {
            key.tenant_id == tenant_id
                && key.session_id == session_id
                && pending.request_id.as_deref() == Some(request_id)
        });
    }

    /// Cancels everything (shutdown).
    pub fn cancel_all(&self, reason: &str) {
        self.cancel_where(reason, |_, _| true);
    }

    /// Number of approvals waiting for a decision in one session.
    pub fn pending_count(&self, tenant_id: &str, session_id: &str) -> usize {
        self.lock()
            .pending
            .keys()
            .filter(|key| key.tenant_id == tenant_id && key.session_id == session_id)
            .count()
    }

    fn cancel_where(&self, reason: &str, selected: impl Fn(&ApprovalKey, &Pending) -> bool) {
        let mut state = self.lock();
        let keys: Vec<ApprovalKey> = state
            .pending
            .iter()
            .filter(|(key, pending)| selected(key, pending))
            .map(|(key, _)| key.clone())
            .collect();
        let until = Instant::now() + self.timeout;
        for key in keys {
            if let Some(pending) = state.pending.remove(&key) {
                let _ = pending
                    .responder
                    .send(Err(ApprovalFailure::Cancelled(reason.to_owned())));
                state.consumed.insert(key, until);
            }
        }
    }
}

/// Withdraws a pending approval whose waiting future was dropped.
struct Withdraw<'a> {
    broker: &'a ApprovalBroker,
    key: &'a ApprovalKey,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut state = self.broker.lock();
        if state.pending.remove(self.key).is_some() {
            let until = Instant::now() + self.broker.timeout;
            state.consumed.insert(self.key.clone(), until);
        }
    }
}
