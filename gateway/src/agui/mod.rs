//! AG-UI 1.0 over the one event log (docs/protocols.md §1): `POST {base}/ag-ui` runs a turn from
//! a `RunAgentInput` and streams it as AG-UI events; `GET {base}/ag-ui/threads/{threadId}/events`
//! shows a thread's runs as they happen. Both go through the same authentication, scopes,
//! admission and idempotent pipeline as protocol v1 (the run's commands are v1 commands), and
//! both resume after a dropped connection from `Last-Event-ID`, which is our event sequence.

mod input;
mod projection;
mod run;
mod snapshot;
mod thread;

#[cfg(test)]
mod tests;

use axum::Router;
use axum::routing::any;
use std::sync::Arc;

use crate::state::AppState;

/// The AG-UI protocol version this server speaks, sent on every `RUN_STARTED`.
pub const PROTOCOL_VERSION: &str = "1.0";

/// Adds the AG-UI routes under `base`.
pub fn add_routes(router: Router<Arc<AppState>>, base: &str) -> Router<Arc<AppState>> {
    router.route(&format!("{base}/ag-ui"), any(run::run)).route(
        &format!("{base}/ag-ui/threads/{{thread_id}}/events"),
        any(thread::events),
    )
}
