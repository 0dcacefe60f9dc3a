use clap::Parser;

/// Every event is parsed, rendered, framed and fanned out through short-lived allocations;
/// mimalloc serves them with less contention and fragmentation than glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = agent_runtime_cli::Cli::parse();
    agent_runtime_cli::run(cli).await
}
