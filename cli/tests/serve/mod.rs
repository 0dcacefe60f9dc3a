//! The `serve` binary.

mod binary;
mod graceful_shutdown;
mod traces_over_grpc;
