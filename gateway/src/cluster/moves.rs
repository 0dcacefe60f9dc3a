//! An operator's move of one session off the executor running it (docs/cluster.md "Moving a
//! session"): the owner stops running it and hands it off (`Release`), then the chosen executor
//! claims and loads it (`Take`). Between the two another executor's adoption may claim the
//! orphan first; the session has then moved all the same, unless it went back to the executor it
//! left, in which case the move starts over.

use agent_runtime::protocol::ProtocolError;
use agent_runtime_grpc::convert::failure_from_proto;
use agent_runtime_grpc::{SessionKey, take_reply};
use agent_runtime_store::{StoreError, WorkerRecord};

use super::router::Router;

/// Times a move starts over when the session went back to the executor it left.
const MOVE_ATTEMPTS: usize = 3;

/// Where a moved session runs now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moved {
    pub from: String,
    pub to: String,
    pub fencing_token: u64,
}

/// Why a session was not moved.
#[derive(Debug)]
pub enum MoveError {
    /// No live executor runs the session (it is idle in the store, closed, or unknown): its next
    /// command places it.
    NotRunning,
    /// No other live executor (or the one named is not live, or is the owner).
    NoTarget(String),
    /// An executor did not answer; the session may have been handed off (it is then adopted).
    Unreachable(String),
    /// The target refused to take it (full, or the session closed meanwhile); it is handed off
    /// and waits for its next command or another executor's adoption.
    Refused(ProtocolError),
    /// It kept going back to the executor it left.
    Unsettled,
    Store(StoreError),
}

impl From<StoreError> for MoveError {
    fn from(error: StoreError) -> Self {
        MoveError::Store(error)
    }
}

impl Router {
    /// Moves the session off the live executor running it: to `to` when given, else to the live
    /// executor with the fewest sessions.
    pub async fn move_session(
        &self,
        tenant_id: &str,
        session_id: &str,
        to: Option<&str>,
    ) -> Result<Moved, MoveError> {
        let key = SessionKey {
            tenant_id: tenant_id.to_owned(),
            session_id: session_id.to_owned(),
        };
        for _ in 0..MOVE_ATTEMPTS {
            let from = self
                .running_on(tenant_id, session_id)
                .await?
                .ok_or(MoveError::NotRunning)?;
            let (target_id, mut target) = self.move_target(&from, to).await?;
            let mut owner = self
                .client_for(&from)
                .ok_or_else(|| MoveError::Unreachable(from.worker_id.clone()))?;
            let released = owner
                .release(key.clone())
                .await
                .map_err(|_| MoveError::Unreachable(from.worker_id.clone()))?;
            self.call_failed(tenant_id, session_id, &from.worker_id);
            if !released.into_inner().held {
                // Its route names an executor that no longer runs it: its lease is running out.
                return Err(MoveError::NotRunning);
            }
            let taken = target
                .take(key.clone())
                .await
                .map_err(|_| MoveError::Unreachable(target_id.clone()))?;
            let moved = |to: String, fencing_token| Moved {
                from: from.worker_id.clone(),
                to,
                fencing_token,
            };
            match taken.into_inner().outcome {
                Some(take_reply::Outcome::FencingToken(token)) => {
                    return Ok(moved(target_id, token));
                }
                Some(take_reply::Outcome::Failure(failure)) => {
                    match self.running_on(tenant_id, session_id).await? {
                        Some(now) if now.worker_id == from.worker_id => continue,
                        Some(now) => {
                            let token = self.fencing_token(tenant_id, session_id).await?;
                            return Ok(moved(now.worker_id, token));
                        }
                        None => return Err(MoveError::Refused(failure_from_proto(failure))),
                    }
                }
                None => return Err(MoveError::Unreachable(target_id)),
            }
        }
        Err(MoveError::Unsettled)
    }

    /// The live executor whose unexpired lease runs the session, if any.
    async fn running_on(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<Option<WorkerRecord>, StoreError> {
        let Some(route) = self.store.get_session_route(tenant_id, session_id).await? else {
            return Ok(None);
        };
        let leased = route
            .lease_expires_at_ms
            .is_some_and(|at| at > self.clock.now_ms());
        let Some(worker_id) = route
            .worker_id
            .filter(|_| route.state.is_active() && leased)
        else {
            return Ok(None);
        };
        Ok(self
            .store
            .get_worker(&worker_id)
            .await?
            .filter(|worker| self.live(worker)))
    }

    async fn fencing_token(&self, tenant_id: &str, session_id: &str) -> Result<u64, StoreError> {
        let route = self.store.get_session_route(tenant_id, session_id).await?;
        Ok(route.map_or(0, |route| route.fencing_token))
    }

    /// The executor a session moves to from `from`: `to` when it is live and another one.
    async fn move_target(
        &self,
        from: &WorkerRecord,
        to: Option<&str>,
    ) -> Result<(String, super::router::ExecutorClient), MoveError> {
        let Some(to) = to else {
            let target = self
                .pick_new(Some(&from.worker_id))
                .await
                .ok_or_else(|| MoveError::NoTarget("No other executor is live".to_owned()))?;
            return Ok((target.worker_id, target.client));
        };
        if to == from.worker_id {
            return Err(MoveError::NoTarget(format!(
                "The session already runs on {to}"
            )));
        }
        let worker = self
            .store
            .get_worker(to)
            .await?
            .filter(|worker| self.live(worker))
            .ok_or_else(|| MoveError::NoTarget(format!("Executor {to} is not live")))?;
        let client = self
            .client_for(&worker)
            .ok_or_else(|| MoveError::Unreachable(to.to_owned()))?;
        Ok((worker.worker_id, client))
    }
}
