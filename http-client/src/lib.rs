//! Every outgoing HTTP client of the workspace starts here: model providers, WebFetch and MCP in
//! the executor, the OTLP exporter, and the client SDK.
//!
//! reqwest is built with `rustls-no-provider` in this workspace (one TLS stack, `ring`, shared
//! with sqlx and tonic), so `reqwest::Client::new()` panics unless a crypto provider was
//! installed first. [`builder`] installs it, once per process.

pub mod address;

/// A `reqwest` client builder whose TLS is ready to use.
pub fn builder() -> reqwest::ClientBuilder {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Fails only if another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}
