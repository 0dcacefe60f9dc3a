//! A webhook receiver for B1 with webhooks: answers every `POST /hook` with 204 and counts it;
//! `GET /count` answers the count. It verifies nothing: what is measured is the server's cost of
//! writing and delivering, not a receiver's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};

#[derive(Debug, Clone, clap::Args)]
pub struct ReceiverArgs {
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
}

pub async fn serve(args: ReceiverArgs) -> anyhow::Result<()> {
    let count = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route(
            "/hook",
            post(|State(count): State<Arc<AtomicU64>>| async move {
                count.fetch_add(1, Ordering::Relaxed);
                StatusCode::NO_CONTENT
            }),
        )
        .route(
            "/count",
            get(|State(count): State<Arc<AtomicU64>>| async move {
                count.load(Ordering::Relaxed).to_string()
            }),
        )
        .with_state(count);
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!(
        "agent-runtime-bench webhook receiver is serving on http://{}",
        listener.local_addr()?
    );
    axum::serve(listener, app).await?;
    Ok(())
}

/// How many deliveries the receiver at `url` counted.
pub async fn count(url: &str) -> anyhow::Result<u64> {
    let client = agent_runtime_client::http_client_builder().build()?;
    let text = client
        .get(format!("{url}/count"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text.trim().parse()?)
}
