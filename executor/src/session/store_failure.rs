//! A request that a store failure stopped still ends where its clients can see it.
//!
//! Otherwise a failed append would leave the request without a terminal event until the session
//! is resumed, and clients following the stream would wait for a `result` that never comes. The
//! driver retries the missing writes for a while: the terminal events (`error` + `result`, one
//! append), then the journal entry that marks the request as ended. It only retries failures the
//! store reports as safe to retry; a lost lease means another executor owns the session (its resume
//! closes the request), and an unknown outcome could write the end twice.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime_store::{DurableEventDraft, StoreError};
use serde_json::{Value, json};

use super::{LiveSession, RunningRequest, emit};

const STOPPED_MESSAGE: &str = "The request stopped because the session store refused a write";
const STOPPED_CODE: &str = "INTERNAL_ERROR";
/// Attempts after the failure, with doubling delays from 100 ms up to 5 s (about 16 s in all).
const ATTEMPTS: u32 = 8;
const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(5);

/// The journal entry that marks a request as ended.
pub(super) struct JournalEnd {
    kind: &'static str,
    data: Value,
}

impl JournalEnd {
    pub(super) fn new(kind: &'static str, data: Value) -> Self {
        Self { kind, data }
    }

    /// The entry, for a write that stores it with the request's terminal events.
    pub(super) fn draft(&self, request_id: &str) -> DurableEventDraft {
        super::journal_draft(self.kind, request_id, self.data.clone())
    }

    pub(super) async fn write(
        &self,
        session: &LiveSession,
        request_id: &str,
    ) -> Result<(), StoreError> {
        session
            .journal(self.kind, request_id, self.data.clone())
            .await
    }
}

/// Why a request stopped early: the store refused one of its writes.
pub(super) struct StoreFailure {
    pub(super) error: StoreError,
    /// Set when the terminal events are stored and only the journal entry is missing.
    pub(super) ended: Option<JournalEnd>,
}

impl StoreFailure {
    pub(super) fn before_end(error: StoreError) -> Self {
        Self { error, ended: None }
    }
}

/// Retries the writes that end `request`, until they succeed, the failure is not one to retry,
/// the attempts run out, or the session stops.
pub(super) async fn close_after_store_failure(
    session: &Arc<LiveSession>,
    request: &RunningRequest,
    failure: StoreFailure,
) {
    let session_id = &session.session_id;
    let request_id = &request.request_id;
    tracing::error!(%session_id, %request_id, error = %failure.error, "request stopped by a store failure");
    session.begin_ending();
    let mut error = failure.error;
    let mut end = failure.ended;
    let mut delay = FIRST_DELAY;
    for _ in 0..ATTEMPTS {
        if !safe_to_retry(&error) {
            break;
        }
        let stopped = session.request_ended.notified();
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stopped => {}
        }
        if session.lock().closed {
            break;
        }
        delay = (delay * 2).min(MAX_DELAY);
        let journal_end = match end.take() {
            Some(end) => end,
            None => {
                let events = vec![
                    emit::error(session_id, STOPPED_MESSAGE, STOPPED_CODE),
                    emit::result_error(session_id, STOPPED_MESSAGE),
                ];
                if let Err(next) = session.publish_stream_batch(request_id, events).await {
                    error = next;
                    continue;
                }
                JournalEnd::new(
                    "request_failed",
                    json!({ "error": { "message": STOPPED_MESSAGE, "code": STOPPED_CODE } }),
                )
            }
        };
        match journal_end.write(session, request_id).await {
            Ok(()) => {
                tracing::info!(%session_id, %request_id, "request closed after a store failure");
                return;
            }
            Err(next) => {
                error = next;
                end = Some(journal_end);
            }
        }
    }
    // Left to the journal: a later load of the session closes the request (restore.rs).
    tracing::warn!(%session_id, %request_id, error = %error, "request left open after a store failure");
}

/// Failures after which the same write cannot apply twice and may succeed later.
fn safe_to_retry(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Backend {
            retry_safe: true,
            ..
        }
    )
}
