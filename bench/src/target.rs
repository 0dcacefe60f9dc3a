//! The server under load: one [`AgentClient`] per tenant (each with its own connection pool),
//! and helpers every scenario uses.

use std::sync::Arc;

use agent_runtime::protocol::command::ClientInfo;
use agent_runtime::protocol::result::ReadSessionResult;
use agent_runtime_client::{
    AgentClient, ClientError, ClientOptions, CommandOptions, ErrorKind, RemoteSession,
    http_client_builder,
};
use anyhow::Context;
use futures_util::{StreamExt, TryStreamExt};
use serde_json::Value;

use crate::config_file::token;

/// The connect timeout of the benchmark's HTTP clients.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Clients for every (tenant, gateway) pair: client `k` is tenant `k % tenants` on base
/// `k / tenants`, so consecutive sessions alternate tenants first, then gateways.
pub struct Target {
    token_prefix: String,
    tenants: usize,
    clients: Vec<AgentClient>,
}

impl Target {
    /// Clients for `tenants` tenants on each of `bases`. Commands are sent once
    /// (`max_command_attempts = 1`): a benchmark counts failures instead of hiding them behind
    /// retries.
    pub fn new(
        bases: &[String],
        token_prefix: &str,
        tenants: usize,
    ) -> anyhow::Result<Arc<Target>> {
        anyhow::ensure!(tenants > 0, "--tenants must be at least 1");
        anyhow::ensure!(!bases.is_empty(), "--base is required");
        let mut clients = Vec::new();
        for (base, index) in bases
            .iter()
            .flat_map(|base| (0..tenants).map(move |index| (base, index)))
        {
            let http = http_client_builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .build()
                .context("building the HTTP client")?;
            let info = ClientInfo {
                name: "agent-runtime-bench".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                title: None,
            };
            let mut options =
                ClientOptions::new(base, info).bearer_token(token(token_prefix, index));
            options.max_command_attempts = 1;
            options.http = Some(http);
            clients.push(AgentClient::new(options).context("client options")?);
        }
        Ok(Arc::new(Target {
            token_prefix: token_prefix.to_owned(),
            tenants,
            clients,
        }))
    }

    /// Client `index` (modulo their number): see [`Target`].
    pub fn client(&self, index: usize) -> &AgentClient {
        &self.clients[index % self.clients.len()]
    }

    /// The bearer token of client `index`'s tenant.
    pub fn token(&self, index: usize) -> String {
        token(&self.token_prefix, index % self.tenants)
    }

    /// `initialize` on every tenant's client.
    pub async fn initialize(&self) -> anyhow::Result<()> {
        for client in &self.clients {
            client
                .initialize(CommandOptions::default())
                .await
                .context("initialize")?;
        }
        Ok(())
    }

    /// Creates `count` sessions, `concurrency` at a time: session `i` through client `i` (spread
    /// over the tenants and the gateways).
    pub async fn create_sessions(
        &self,
        count: usize,
        concurrency: usize,
        label: &str,
    ) -> anyhow::Result<Vec<RemoteSession>> {
        let metadata = serde_json::json!({ "bench": label });
        let Value::Object(metadata) = metadata else {
            unreachable!("a JSON object literal");
        };
        let sessions: Vec<RemoteSession> = futures_util::stream::iter((0..count).map(|index| {
            let client = self.client(index).clone();
            let metadata = metadata.clone();
            async move {
                client
                    .create_session(Some(metadata), CommandOptions::default())
                    .await
            }
        }))
        .buffered(concurrency.max(1))
        .try_collect()
        .await
        .context("session.create")?;
        Ok(sessions)
    }
}

/// The last event sequence the server reports for a session (`session.read`).
pub async fn last_sequence(session: &RemoteSession) -> anyhow::Result<u64> {
    let data = session
        .read(CommandOptions::default())
        .await
        .context("session.read")?;
    let read: ReadSessionResult =
        serde_json::from_value(Value::Object(data)).context("session.read result")?;
    Ok(read.recovery.last_event_sequence.unwrap_or(0))
}

/// A short, stable name for an error: its protocol code, or where it came from when it has none.
pub fn error_code(error: &ClientError) -> String {
    match error.kind {
        ErrorKind::Server => error.code.as_str().to_owned(),
        ErrorKind::Transport => "TRANSPORT".to_owned(),
        ErrorKind::InvalidResponse => format!("INVALID_RESPONSE_{}", error.code.as_str()),
        ErrorKind::Local => format!("LOCAL_{}", error.code.as_str()),
        ErrorKind::Cancelled => "CANCELLED".to_owned(),
    }
}

/// Wall-clock microseconds since the Unix epoch (compared with the demo provider's stamps).
pub fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
        })
}

/// The stamp of a `delta-I@T ` content delta, if it has one.
pub fn delta_stamp(delta: &str) -> Option<u64> {
    delta.trim_end().split_once('@')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_stamp_of_a_delta() {
        assert_eq!(
            delta_stamp("delta-7@1712345678123456 "),
            Some(1_712_345_678_123_456)
        );
        assert_eq!(delta_stamp("delta-7 "), None);
    }
}
