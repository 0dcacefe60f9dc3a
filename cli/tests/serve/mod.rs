//! The `serve` binary.

mod binary;
mod graceful_shutdown;
