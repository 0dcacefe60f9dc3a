use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = agent_runtime_cli::Cli::parse();
    agent_runtime_cli::run(cli).await
}
