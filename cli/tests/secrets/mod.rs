//! Secrets never reach logs, metrics, traces or errors.

mod catalogue;
mod telemetry;
