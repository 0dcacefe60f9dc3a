//! The PostgreSQL store against a real server.

mod catalogue;
mod clock;
mod concurrency;
mod conflicts;
mod leases;
mod lifecycle;
mod pending_inputs;
mod timeouts;
mod webhooks;
