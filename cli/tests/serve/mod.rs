//! The `serve` binary.

mod admin;
mod binary;
mod graceful_shutdown;
mod large_events;
mod provider_keys;
mod shared_data_dir;
mod soak;
mod traces_over_grpc;
mod webhooks;
