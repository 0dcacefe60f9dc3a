//! Per-session event hubs of a cluster gateway: one upstream `Subscribe` per session per gateway,
//! however many SSE connections follow the session here.
//!
//! Each frame the executor pushes carries the event it read from the store after its commit: the
//! hub hands it to this gateway's shared tail of the session (which serves it from memory when it
//! joins what the tail holds) and wakes the tail; the tail reads the store only for what it was
//! not handed (a gap, a frame that does not parse, a resubscription), by sequence, so gaps are
//! filled and nothing is delivered twice. When the upstream breaks (the executor died, or the session moved)
//! the hub re-resolves the owner and subscribes again from the last sequence it saw, without any
//! browser reconnecting. A hub nobody waits on for a while stops.

use agent_runtime::sync::Locked;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::protocol::{EventEnvelope, Scope};
use agent_runtime_grpc::{CallContext, EventFrame, Principal, SubscribeRequest};
use agent_runtime_store::follow::{HandOff, LiveSignal, LocalSignals};
use async_trait::async_trait;
use futures_util::FutureExt;
use tokio::time::Instant;

use super::router::Router;

/// How long a hub lives without waiters.
const IDLE_HUB: Duration = Duration::from_secs(30);
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(250);
/// How often a quiet upstream is checked against the session's current owner: an owner that was
/// paused keeps its connection open, so only the route tells that the session moved.
const OWNER_RECHECK: Duration = Duration::from_secs(2);
/// Frames handed over in one go at most.
const MAX_BURST: usize = 256;

type Key = (String, String);

/// Cheap to clone: every clone shares the hubs.
#[derive(Clone)]
pub struct HubSignals {
    inner: Arc<Hubs>,
}

struct Hubs {
    router: Arc<Router>,
    local: Arc<LocalSignals>,
    /// This gateway's shared tails, which take the frames' events.
    tails: Arc<HandOff>,
    /// Last time someone waited on each running hub.
    hubs: Mutex<HashMap<Key, Instant>>,
}

impl HubSignals {
    /// `tails` is connected to the gateway's shared tails (`GatewayDeps::hand_off`).
    pub fn new(router: Arc<Router>, tails: Arc<HandOff>) -> Self {
        Self {
            inner: Arc::new(Hubs {
                router,
                local: LocalSignals::new(),
                tails,
                hubs: Mutex::new(HashMap::new()),
            }),
        }
    }
}

impl Hubs {
    fn hubs(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Instant>> {
        self.hubs.locked()
    }

    /// Starts the session's hub unless it runs; records that someone is waiting.
    fn ensure_hub(self: &Arc<Self>, tenant_id: &str, session_id: &str, after: u64) {
        let key = (tenant_id.to_owned(), session_id.to_owned());
        let mut hubs = self.hubs();
        let started = hubs.insert(key.clone(), Instant::now()).is_some();
        if started {
            return;
        }
        let hubs = Arc::clone(self);
        tokio::spawn(async move { hubs.run(key, after).await });
    }

    // Stays whole: the hub's subscribe, forward and resubscribe loop.
    async fn run(self: Arc<Self>, key: Key, mut after: u64) {
        let (tenant_id, session_id) = key.clone();
        loop {
            let idle_for = self.hubs().get(&key).map(|seen| seen.elapsed());
            if idle_for.is_none_or(|idle| idle > IDLE_HUB) {
                break;
            }
            let Some(target) = self.router.owner_of(&tenant_id, &session_id).await else {
                tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
                continue;
            };
            let request = SubscribeRequest {
                context: Some(CallContext {
                    principal: Some(Principal {
                        tenant_id: tenant_id.clone(),
                        subject: "gateway".to_owned(),
                        scopes: vec![Scope::SessionRead.as_str().to_owned()],
                    }),
                    command_id: format!("hub-{session_id}"),
                    execution_id: String::new(),
                    chosen_session_id: String::new(),
                }),
                session_id: session_id.clone(),
                after,
            };
            let owner_id = target.worker_id;
            let mut client = target.client;
            match client.subscribe(request).await {
                Ok(response) => {
                    let mut frames = response.into_inner();
                    loop {
                        let idle = self
                            .hubs()
                            .get(&key)
                            .is_none_or(|seen| seen.elapsed() > IDLE_HUB);
                        if idle {
                            break;
                        }
                        match tokio::time::timeout(OWNER_RECHECK, frames.message()).await {
                            Ok(Ok(Some(frame))) => {
                                // The frames already here go with it: one hand-over and one
                                // wake-up for a burst, not one per event.
                                let mut burst = vec![frame];
                                let mut ended = false;
                                while burst.len() < MAX_BURST {
                                    match frames.message().now_or_never() {
                                        Some(Ok(Some(next))) => burst.push(next),
                                        Some(Ok(None) | Err(_)) => {
                                            ended = true;
                                            break;
                                        }
                                        None => break,
                                    }
                                }
                                let last = burst.iter().map(|frame| frame.sequence).max();
                                after = after.max(last.unwrap_or(after));
                                self.hand_over(&tenant_id, &session_id, burst);
                                if ended {
                                    break;
                                }
                            }
                            // The stream ended (session closed, or the executor stopped): wake
                            // the followers so they re-read the store, then resubscribe.
                            Ok(Ok(None)) | Ok(Err(_)) => break,
                            Err(_) => {
                                let owner = self.router.owner_of(&tenant_id, &session_id).await;
                                if owner.is_none_or(|owner| owner.worker_id != owner_id) {
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(status) => {
                    tracing::debug!(session_id = %session_id, code = ?status.code(), "subscribing to the session owner failed");
                }
            }
            tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
        }
        self.hubs().remove(&key);
        self.local.forget(&tenant_id, &session_id);
    }
}

impl Hubs {
    /// Hands a burst of frames' events to the session's tail, then wakes it. Events are handed
    /// over up to the first frame whose event does not parse, is not the one it says or does not
    /// follow the one before; the
    /// wake-up announces them all, so the tail reads the store for what it was not handed.
    fn hand_over(&self, tenant_id: &str, session_id: &str, burst: Vec<EventFrame>) {
        let Some(last) = burst.iter().map(|frame| frame.sequence).max() else {
            return;
        };
        let mut events = Vec::with_capacity(burst.len());
        for frame in burst {
            let sequence = frame.sequence;
            let text: Option<Arc<str>> =
                String::from_utf8(frame.envelope_json).ok().map(Into::into);
            let follows = |event: &EventEnvelope| {
                events
                    .last()
                    .is_none_or(|previous: &EventEnvelope| previous.sequence + 1 == event.sequence)
            };
            match text.and_then(|text| EventEnvelope::from_stored_json(text).ok()) {
                Some(event)
                    if event.sequence == sequence
                        && event.session_id == session_id
                        && follows(&event) =>
                {
                    events.push(event);
                }
                _ => {
                    tracing::debug!(%session_id, sequence, "an executor frame does not carry its event; the tail reads the store");
                    break;
                }
            }
        }
        if !events.is_empty() {
            self.tails.appended(tenant_id, &events);
        }
        self.local.notify(tenant_id, session_id, last);
    }
}

#[async_trait]
impl LiveSignal for HubSignals {
    async fn wait(&self, tenant_id: &str, session_id: &str, after: u64) {
        self.inner.ensure_hub(tenant_id, session_id, after);
        self.inner.local.wait(tenant_id, session_id, after).await;
    }

    fn announced(&self, tenant_id: &str, session_id: &str) -> Option<u64> {
        Some(self.inner.local.announced(tenant_id, session_id))
    }
}
