//! The `serve` binary.

mod binary;
mod graceful_shutdown;
mod soak;
mod traces_over_grpc;
