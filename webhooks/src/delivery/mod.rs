//! One attempt at delivering a webhook, and when the next one comes.
//!
//! An attempt is one `POST` of the JSON body to the endpoint's URL, signed (`webhook-id`,
//! `webhook-timestamp`, `webhook-signature`), to an address the outgoing-request rules allow
//! (`agent_runtime_http_client::address`: no loopback, private or metadata targets unless the
//! endpoint is exempt; metadata never), without following redirects, within a timeout. Any 2xx
//! answer delivers; anything else is a failed attempt, retried on [`RETRY_SCHEDULE`].

use std::sync::Arc;
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

/// Sends attempts.
#[derive(Clone, Debug)]
pub struct Sender {
    resolver: Arc<dyn HostResolver>,
    timeout: Duration,
}

impl Sender {
    /// Attempts that take longer than `timeout` (connection, request and answer) fail.
    pub fn new(timeout: Duration) -> Sender {
        Sender::with_resolver(timeout, Arc::new(SystemResolver))
    }

    /// As [`Sender::new`], resolving host names with `resolver` (tests script DNS).
    pub fn with_resolver(timeout: Duration, resolver: Arc<dyn HostResolver>) -> Sender {
        Sender { resolver, timeout }
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
        let client = match address::pinned_client(&endpoint.url, address)
            .timeout(self.timeout)
            .build()
        {
            Ok(client) => client,
            Err(_) => return failed(None, "no HTTP client could be built".to_owned()),
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
        // The answer's body is not read: each attempt has its own client (pinned to the address
        // vetted for it), so its connection closes with it.
        let status = response.status().as_u16();
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
