//! The cluster as separate processes on PostgreSQL.

mod admin;
mod catalogue;
mod processes;
mod telemetry;
mod webhooks;
