//! Webhooks on the [Standard Webhooks](https://www.standardwebhooks.com/) specification: every
//! delivery carries `webhook-id`, `webhook-timestamp` and `webhook-signature` (`v1,` and the
//! base64 HMAC-SHA256 of `id.timestamp.body` under each of the endpoint's `whsec_` secrets, so a
//! receiver keeps verifying while a secret is rotated).
//!
//! The store writes each delivery in the commit of its cause (its outbox); [`Dispatcher`] reads
//! the outbox and delivers, rendering each body with [`payload::render`].

pub mod delivery;
pub mod dispatch;
pub mod payload;
pub mod signature;

pub use delivery::{Attempt, Endpoint, RETRY_SCHEDULE, Sender, retry_delay};
pub use dispatch::{DispatchOptions, Dispatcher, EndpointConfig};
pub use reqwest::Url;
pub use signature::{SignatureError, SignedHeaders, SigningSecret, sign, verify};
