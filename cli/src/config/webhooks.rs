//! `[webhooks]` and `[[webhooks.endpoints]]` (serve, gateway): where a tenant's webhooks go and
//! how they are delivered. A process with the section delivers, and makes the store's endpoints
//! exactly the configured ones; give every gateway of a cluster the same section.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use agent_runtime::ids::{is_valid_identifier, is_valid_tenant_id};
use agent_runtime::secret::Secret;
use agent_runtime_store::outbox::WEBHOOK_EVENT_TYPES;
use agent_runtime_webhooks::{DispatchOptions, Endpoint, EndpointConfig, SigningSecret, Url};
use anyhow::{Context, bail, ensure};
use serde::Deserialize;

/// What a process needs to deliver webhooks.
#[derive(Clone, Debug)]
pub struct WebhooksConfig {
    pub endpoints: Vec<WebhookEndpointConfig>,
    pub options: DispatchOptions,
}

/// One `[[webhooks.endpoints]]` entry; its secrets are read at start-up ([`Self::resolve`]).
#[derive(Clone, Debug)]
pub struct WebhookEndpointConfig {
    pub id: String,
    pub tenant_id: String,
    pub url: Url,
    pub event_types: Vec<String>,
    pub secret: SecretSource,
    pub include_content: bool,
    pub allow_private_addresses: bool,
}

/// Where an endpoint's secrets are.
#[derive(Clone, Debug)]
pub enum SecretSource {
    Env(String),
    File(PathBuf),
}

impl WebhookEndpointConfig {
    /// The endpoint with its secrets read (`env` for `secret_env`); several secrets, separated by
    /// white space, all sign every delivery during a rotation.
    pub fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<EndpointConfig> {
        let id = &self.id;
        let text = match &self.secret {
            SecretSource::Env(var) => env(var).with_context(|| {
                format!("webhooks endpoint {id}: the variable {var} named by secret_env is not set")
            })?,
            SecretSource::File(path) => std::fs::read_to_string(path).with_context(|| {
                format!(
                    "webhooks endpoint {id}: reading secret_file {}",
                    path.display()
                )
            })?,
        };
        let secrets = text
            .split_whitespace()
            .map(|secret| SigningSecret::parse(&Secret::new(secret.to_owned())))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| anyhow::anyhow!("webhooks endpoint {id}: {error}"))?;
        ensure!(
            !secrets.is_empty(),
            "webhooks endpoint {id}: the secret is empty"
        );
        Ok(EndpointConfig {
            tenant_id: self.tenant_id.clone(),
            endpoint: Endpoint {
                id: id.clone(),
                url: self.url.clone(),
                secrets,
                allow_private_addresses: self.allow_private_addresses,
            },
            event_types: self.event_types.clone(),
            include_content: self.include_content,
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WebhooksSection {
    poll_interval_ms: Option<u64>,
    max_in_flight: Option<usize>,
    max_in_flight_per_endpoint: Option<usize>,
    attempt_timeout_ms: Option<u64>,
    retry_schedule_ms: Option<Vec<u64>>,
    disable_after_ms: Option<u64>,
    finished_retention_ms: Option<u64>,
    max_pending_per_tenant: Option<u64>,
    #[serde(default)]
    endpoints: Vec<EndpointSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointSection {
    id: String,
    tenant: String,
    url: String,
    events: Vec<String>,
    secret_env: Option<String>,
    secret_file: Option<PathBuf>,
    include_content: Option<bool>,
    allow_private_addresses: Option<bool>,
}

impl WebhooksSection {
    /// The settings, checked; secrets are read at start-up.
    pub(super) fn config(self) -> anyhow::Result<WebhooksConfig> {
        let defaults = DispatchOptions::default();
        let ms = |key: &str, value: Option<u64>, default: Duration| -> anyhow::Result<Duration> {
            match value {
                Some(0) => bail!("webhooks.{key} must be positive"),
                Some(ms) => Ok(Duration::from_millis(ms)),
                None => Ok(default),
            }
        };
        let count = |key: &str, value: Option<usize>, default: usize| -> anyhow::Result<usize> {
            match value {
                Some(0) => bail!("webhooks.{key} must be at least 1"),
                Some(n) => Ok(n),
                None => Ok(default),
            }
        };
        let retry_schedule = match self.retry_schedule_ms {
            Some(waits) => {
                ensure!(
                    waits.iter().all(|&w| w > 0),
                    "webhooks.retry_schedule_ms: every wait must be positive"
                );
                waits.into_iter().map(Duration::from_millis).collect()
            }
            None => defaults.retry_schedule.clone(),
        };
        let max_pending = self
            .max_pending_per_tenant
            .unwrap_or(defaults.max_pending_per_tenant);
        ensure!(
            max_pending >= 1,
            "webhooks.max_pending_per_tenant must be at least 1"
        );
        let options = DispatchOptions {
            poll_interval: ms(
                "poll_interval_ms",
                self.poll_interval_ms,
                defaults.poll_interval,
            )?,
            max_in_flight: count("max_in_flight", self.max_in_flight, defaults.max_in_flight)?,
            max_in_flight_per_endpoint: count(
                "max_in_flight_per_endpoint",
                self.max_in_flight_per_endpoint,
                defaults.max_in_flight_per_endpoint,
            )?,
            attempt_timeout: ms(
                "attempt_timeout_ms",
                self.attempt_timeout_ms,
                defaults.attempt_timeout,
            )?,
            retry_schedule,
            disable_after: ms(
                "disable_after_ms",
                self.disable_after_ms,
                defaults.disable_after,
            )?,
            finished_retention: ms(
                "finished_retention_ms",
                self.finished_retention_ms,
                defaults.finished_retention,
            )?,
            max_pending_per_tenant: max_pending,
            housekeeping_interval: defaults.housekeeping_interval,
        };
        let mut ids = HashSet::new();
        let mut endpoints = Vec::new();
        for section in self.endpoints {
            ensure!(
                ids.insert(section.id.clone()),
                "webhooks.endpoints: two endpoints are named {:?} (ids are unique across tenants: metrics and the admin tools name endpoints by them)",
                section.id
            );
            endpoints.push(section.endpoint()?);
        }
        Ok(WebhooksConfig { endpoints, options })
    }
}

impl EndpointSection {
    fn endpoint(self) -> anyhow::Result<WebhookEndpointConfig> {
        let id = self.id;
        ensure!(
            is_valid_identifier(&id),
            "webhooks.endpoints: {id:?} is not a valid endpoint id (letters, digits, '-', '_', '.', ':')"
        );
        ensure!(
            is_valid_tenant_id(&self.tenant),
            "webhooks endpoint {id}: {:?} is not a valid tenant id",
            self.tenant
        );
        let url = Url::parse(&self.url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
            .with_context(|| format!("webhooks endpoint {id}: url must be an http or https URL"))?;
        ensure!(
            url.username().is_empty() && url.password().is_none(),
            "webhooks endpoint {id}: url must not carry credentials (the signature authenticates deliveries)"
        );
        ensure!(
            !self.events.is_empty(),
            "webhooks endpoint {id}: events must name at least one of: {}",
            WEBHOOK_EVENT_TYPES.join(", ")
        );
        for event in &self.events {
            ensure!(
                WEBHOOK_EVENT_TYPES.contains(&event.as_str()),
                "webhooks endpoint {id}: event {event:?} is not one of: {}",
                WEBHOOK_EVENT_TYPES.join(", ")
            );
        }
        let secret = match (self.secret_env, self.secret_file) {
            (Some(var), None) => SecretSource::Env(var),
            (None, Some(path)) => SecretSource::File(path),
            _ => bail!("webhooks endpoint {id}: give exactly one of secret_env and secret_file"),
        };
        Ok(WebhookEndpointConfig {
            id,
            tenant_id: self.tenant,
            url,
            event_types: self.events,
            secret,
            include_content: self.include_content.unwrap_or(false),
            allow_private_addresses: self.allow_private_addresses.unwrap_or(false),
        })
    }
}
