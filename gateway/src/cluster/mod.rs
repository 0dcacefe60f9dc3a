//! Cluster mode of the gateway: executors over gRPC, the router, and per-session event hubs.

pub mod hub;
pub mod moves;
pub mod remote;
pub mod route_cache;
pub mod router;

pub use hub::HubSignals;
pub use remote::{DEFAULT_FAILOVER_WINDOW, RemoteExecutor};
pub use router::Router;
