//! The webhook delivery loop of a process with a `[webhooks]` section (serve, gateway).

use std::sync::Arc;

use agent_runtime::clock::SharedClock;
use agent_runtime::telemetry::SharedTelemetry;
use agent_runtime_store::Store;
use agent_runtime_webhooks::{Dispatcher, Sender};
use anyhow::Context;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::WebhooksConfig;

/// A running delivery loop.
pub(crate) struct RunningWebhooks {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl RunningWebhooks {
    /// Syncs the store's endpoints with `config` and starts delivering; `None` without a
    /// `[webhooks]` section (the process leaves the outbox alone).
    pub(crate) async fn start(
        config: Option<&WebhooksConfig>,
        store: Arc<dyn Store>,
        clock: SharedClock,
        telemetry: SharedTelemetry,
    ) -> anyhow::Result<Option<Self>> {
        let Some(config) = config else {
            return Ok(None);
        };
        let endpoints = config
            .endpoints
            .iter()
            .map(|endpoint| endpoint.resolve(|name| std::env::var(name).ok()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let dispatcher = Dispatcher::new(
            store,
            clock,
            telemetry,
            endpoints,
            config.options.clone(),
            Sender::new(config.options.attempt_timeout),
        );
        let stop = CancellationToken::new();
        let task = dispatcher
            .start(stop.clone())
            .await
            .context("setting up the webhook endpoints in the store")?;
        Ok(Some(Self { stop, task }))
    }

    /// Stops claiming and waits for the attempts under way (each ends within its timeout).
    pub(crate) async fn stop(running: Option<Self>) {
        if let Some(running) = running {
            running.stop.cancel();
            let _ = running.task.await;
        }
    }
}
