fn main() -> anyhow::Result<()> {
    anyhow::bail!("agent-runtime serve is not available yet (issue 3)")
}
