//! Gateways and executors over real gRPC on loopback.

mod authority;
mod grpc_abuse;
mod inprocess;
mod leases;
