//! Cluster mode of the gateway: executors over gRPC, the router, and per-session event hubs.

pub mod hub;
pub mod moves;
pub mod remote;
pub mod route_cache;
pub mod router;

pub use hub::HubSignals;
pub use remote::{DEFAULT_FAILOVER_WINDOW, RemoteExecutor};
pub use router::Router;

/// The tools of a tenant's profile, as a live executor of the cluster offers them (every
/// executor has the same profiles); none when no executor answers.
pub fn tenant_tools(router: &std::sync::Arc<Router>) -> crate::TenantTools {
    let router = std::sync::Arc::clone(router);
    std::sync::Arc::new(move |tenant: String| {
        let router = std::sync::Arc::clone(&router);
        Box::pin(async move { router.tenant_tools(&tenant).await })
    })
}
