//! The executor over gRPC: the server that wraps the in-process executor, and its authentication.

pub mod auth;
pub mod server;
pub mod worker;

pub use auth::{check_cluster_secret, check_secret};
pub use server::{ExecutorService, WorkerIdentity, serve_grpc};
