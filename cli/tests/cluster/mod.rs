//! The cluster as separate processes on PostgreSQL.

mod catalogue;
mod processes;
mod telemetry;
mod webhooks;
