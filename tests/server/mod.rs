//! The single-process server over real HTTP and SSE, on the store `AGENT_RUNTIME_TEST_STORE` picks.

mod a2a;
mod admin;
mod agent;
mod agui;
mod auth;
mod commands;
mod faults;
mod idempotency;
mod limits;
mod metrics;
mod recovery;
mod schema;
mod sse;
mod tenancy;
mod tools;
