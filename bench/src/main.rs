use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = agent_runtime_bench::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // On a worker, not on the thread of `block_on`: a task woken by another worker (e.g. by the
    // HTTP connection that received a chunk) then runs on that worker without a cross-thread
    // wake-up per chunk, as in any server or client built on tokio.
    runtime.block_on(async { tokio::spawn(agent_runtime_bench::run(cli)).await? })
}
