//! Recovery at start-up for a process that owns its store (`serve`): nothing else can be running
//! its sessions, so a session a crash left with an open request, or with inputs waiting, is loaded
//! at once. Loading closes the request with `EXECUTOR_LOST` and a `result` (so its followers see
//! it end without anyone sending a command) and runs the waiting inputs.

use agent_runtime::protocol::SessionStatus;

use super::InProcessExecutor;
use crate::session::left_open;

/// Sessions listed per store read.
const PAGE: u32 = 100;

impl InProcessExecutor {
    /// Loads every active session left open; returns how many were loaded. A session that cannot
    /// be loaded now (the active-session cap, a store failure) is logged and left for the next
    /// command to load.
    pub async fn recover_left_open(&self) -> usize {
        let mut loaded = 0;
        let mut after = None;
        loop {
            let page = match self.store().list_active_sessions(after.clone(), PAGE).await {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(error = %error, "listing sessions to recover failed; they recover on their next command");
                    return loaded;
                }
            };
            for (tenant_id, session_id) in &page {
                match self.recover_one(tenant_id, session_id).await {
                    Ok(true) => loaded += 1,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(session_id = %session_id, error = %error, "recovering a session at start-up failed; it recovers on its next command");
                    }
                }
            }
            if page.len() < PAGE as usize {
                return loaded;
            }
            after = page.last().cloned();
        }
    }

    async fn recover_one(&self, tenant_id: &str, session_id: &str) -> Result<bool, String> {
        if self.check_running().is_err() || self.registry.get(tenant_id, session_id).is_some() {
            return Ok(false);
        }
        let open = left_open(self.store().as_ref(), tenant_id, session_id)
            .await
            .map_err(|error| error.to_string())?;
        if !open {
            return Ok(false);
        }
        self.registry
            .serialized(tenant_id, session_id, async {
                let record = match self.store().get_session(tenant_id, session_id).await {
                    Ok(Some(record)) if record.status == SessionStatus::Active => record,
                    Ok(_) => return Ok(false),
                    Err(error) => return Err(error.to_string()),
                };
                // A command may have loaded it meanwhile.
                if self.registry.get(tenant_id, session_id).is_some() {
                    return Ok(false);
                }
                let reservation = self
                    .registry
                    .reserve(tenant_id)
                    .map_err(|error| error.message)?;
                self.load(reservation, &record)
                    .await
                    .map(|_| true)
                    .map_err(|error| error.message)
            })
            .await
    }
}
