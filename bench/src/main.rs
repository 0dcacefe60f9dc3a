use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = agent_runtime_bench::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(agent_runtime_bench::run(cli))
}
