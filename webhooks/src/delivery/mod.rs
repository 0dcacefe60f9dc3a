//! One attempt at delivering a webhook, and when the next one comes.
//!
//! An attempt is one `POST` of the JSON body to the endpoint's URL, signed (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`), to an address the outgoing-request rules allow
//! (`agent_runtime_http_client::address`: no loopback, private or metadata targets unless the
//! endpoint is exempt; metadata never), without following redirects, within a timeout. Any 2xx
//! answer delivers; anything else is a failed attempt, retried on [`RETRY_SCHEDULE`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime_http_client::address::{self, HostResolver, SystemResolver};
use rand::Rng as _;
use reqwest::Url;

use crate::signature::{SigningSecret, sign};

/// The waits before each retry of a failed delivery (the first attempt is immediate); past the
/// last, the delivery has failed for good. About 22.7 hours in all.
pub const RETRY_SCHEDULE: [Duration; 9] = [
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(2 * 60),
    Duration::from_secs(10 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(60 * 60),
    Duration::from_secs(3 * 60 * 60),
    Duration::from_secs(6 * 60 * 60),
    Duration::from_secs(12 * 60 * 60),
];

/// How much a wait of [`RETRY_SCHEDULE`] is moved at random, either way (so the retries of
/// many deliveries that failed together do not arrive together).
pub const JITTER: f64 = 0.1;

/// Where deliveries go.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The operator's name for it; what errors and logs show (never the URL, whose query may
    /// carry a token).
    pub id: String,
    pub url: Url,
    /// Every current secret (several during a rotation); each signs every attempt.
    pub secrets: Vec<SigningSecret>,
    /// Lets the URL resolve to loopback or private addresses (a receiver inside the operator's
    /// network). Metadata endpoints stay refused.
    pub allow_private_addresses: bool,
}

/// How one attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The receiver answered 2xx.
    Delivered { status: u16 },
    /// Anything else; `status` when the receiver answered at all. `reason` names the endpoint by
    /// its id only.
    Failed { status: Option<u16>, reason: String },
}

/// The most of an answer's body an attempt reads (so that its connection can serve the next
/// attempt); a longer answer closes its connection.
const ANSWER_READ_BYTES: usize = 4096;

/// Sends attempts.
#[derive(Clone, Debug)]
pub struct Sender {
    resolver: Arc<dyn HostResolver>,
    timeout: Duration,
    /// One client per endpoint, pinned to the address last vetted for it: building a client costs
    /// far more than an attempt (it loads the platform's root certificates), and a kept client
    /// reuses its connection. Replaced when the endpoint's host resolves elsewhere.
    clients: Arc<Mutex<HashMap<String, (SocketAddr, reqwest::Client)>>>,
}

impl Sender {
    /// Attempts that take longer than `timeout` (connection, request and answer) fail.
    pub fn new(timeout: Duration) -> Sender {
        Sender::with_resolver(timeout, Arc::new(SystemResolver))
    }

    /// As [`Sender::new`], resolving host names with `resolver` (tests script DNS).
    pub fn with_resolver(timeout: Duration, resolver: Arc<dyn HostResolver>) -> Sender {
        Sender {
            resolver,
            timeout,
            clients: Arc::default(),
        }
    }

    /// The endpoint's client for `address`, built when the endpoint has none for it.
    fn client(&self, endpoint: &Endpoint, address: SocketAddr) -> Option<reqwest::Client> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((pinned, client)) = clients.get(&endpoint.id)
            && *pinned == address
        {
            return Some(client.clone());
        }
        let client = address::pinned_client(&endpoint.url, address)
            .timeout(self.timeout)
            .build()
            .ok()?;
        clients.insert(endpoint.id.clone(), (address, client.clone()));
        Some(client)
    }

    /// One attempt to deliver `body` as delivery `id`, signed now (`now_secs`, Unix seconds).
    pub async fn attempt(
        &self,
        endpoint: &Endpoint,
        id: &str,
        body: &[u8],
        now_secs: i64,
    ) -> Attempt {
        let name = &endpoint.id;
        let failed = |status: Option<u16>, why: String| Attempt::Failed {
            status,
            reason: format!("webhook endpoint {name}: {why}"),
        };
        let target = address::vet(
            self.resolver.as_ref(),
            &endpoint.url,
            endpoint.allow_private_addresses,
            "delivering to it",
        );
        let address = match target.await {
            Ok(address) => address,
            Err(refusal) => return failed(None, refusal.into_message()),
        };
        let Some(client) = self.client(endpoint, address) else {
            return failed(None, "no HTTP client could be built".to_owned());
        };
        let headers = sign(&endpoint.secrets, id, now_secs, body);
        let mut request = client
            .post(endpoint.url.clone())
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (header, value) in headers.pairs() {
            request = request.header(header, value);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) if error.is_timeout() => {
                return failed(
                    None,
                    format!("no answer within {} ms", self.timeout.as_millis()),
                );
            }
            Err(_) => return failed(None, "the connection failed".to_owned()),
        };
        let status = response.status().as_u16();
        // A short answer is read to its end so that the connection serves the next attempt; a
        // longer one is dropped with its connection.
        let mut response = response;
        let mut read = 0;
        while read <= ANSWER_READ_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        if (200..300).contains(&status) {
            Attempt::Delivered { status }
        } else {
            failed(Some(status), format!("answered {status}"))
        }
    }
}

/// The wait before retry `retry` (0 for the first retry) of `schedule` (normally
/// [`RETRY_SCHEDULE`]), with jitter; `None` once the schedule is exhausted.
pub fn retry_delay(schedule: &[Duration], retry: usize) -> Option<Duration> {
    let wait = schedule.get(retry)?;
    let factor = 1.0 + rand::rng().random_range(-JITTER..=JITTER);
    Some(wait.mul_f64(factor))
}

#[cfg(test)]
mod tests;
