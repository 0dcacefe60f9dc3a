//! The server configuration of a benchmark run: one bearer token per tenant, and the admission
//! limits and SSE connection caps raised so that they do not cap what is measured (the defaults
//! protect a server from one noisy tenant; a benchmark wants to see what the machine can do: B5
//! holds 10,000 streams on one gateway, B6 1,000 on one session of one tenant).

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// Default token prefix: tenant `i` (1-based) authenticates with `{prefix}{i}`.
pub const DEFAULT_TOKEN_PREFIX: &str = "bench-token-";

#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArgs {
    /// Number of tenants (one token each).
    #[arg(long, default_value_t = 4)]
    pub tenants: usize,
    /// Tenant `i` gets the token `{prefix}{i}`.
    #[arg(long, default_value = DEFAULT_TOKEN_PREFIX)]
    pub token_prefix: String,
    /// SSE heartbeat interval of the gateways (milliseconds).
    #[arg(long, default_value_t = 2000)]
    pub heartbeat_ms: u64,
    /// `[server] max_events_per_session` (read by `serve`; cluster processes keep the same
    /// default of 10 000).
    #[arg(long, default_value_t = 10_000)]
    pub max_events_per_session: u64,
    /// Sends every tenant's `request.completed` webhooks to this receiver (`{url}/hook`, secret
    /// from `AGENT_RUNTIME_BENCH_WEBHOOK_SECRET`).
    #[arg(long)]
    pub webhook_url: Option<String>,
}

/// The variable the webhook endpoints of a benchmark configuration read their secret from.
pub const WEBHOOK_SECRET_ENV: &str = "AGENT_RUNTIME_BENCH_WEBHOOK_SECRET";

/// The tenant id of tenant `index` (0-based).
pub fn tenant_id(index: usize) -> String {
    format!("bench-{}", index + 1)
}

/// The token of tenant `index` (0-based).
pub fn token(prefix: &str, index: usize) -> String {
    format!("{prefix}{}", index + 1)
}

/// The TOML text.
pub fn render(args: &ConfigArgs) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# agent-runtime-bench config: {} tenants\n\n[server]\nmax_events_per_session = {}\n",
        args.tenants, args.max_events_per_session
    );
    let _ = writeln!(
        text,
        "[gateway]\nheartbeat_interval_ms = {}\nmax_concurrent_commands = 1024\nmax_queued_commands = 100000\ncommands_per_minute = 100000000\nmax_sse_connections_per_tenant = 1000000\nmax_sse_connections = 1000000\n",
        args.heartbeat_ms
    );
    text.push_str("[executor]\nmax_active_sessions_per_tenant = 1000000\n\n");
    for index in 0..args.tenants {
        let digest = hex::encode(Sha256::digest(token(&args.token_prefix, index).as_bytes()));
        let _ = writeln!(
            text,
            "[[auth.tokens]]\nsha256 = \"{digest}\"\ntenant = \"{}\"\nsubject = \"bench\"\nscopes = [\"session:admin\"]\n",
            tenant_id(index)
        );
    }
    if let Some(url) = &args.webhook_url {
        text.push_str(
            "[webhooks]

",
        );
        for index in 0..args.tenants {
            let tenant = tenant_id(index);
            let _ = writeln!(
                text,
                "[[webhooks.endpoints]]
id = \"{tenant}-hook\"
tenant = \"{tenant}\"
url = \"{url}/hook\"
events = [\"request.completed\"]
secret_env = \"{WEBHOOK_SECRET_ENV}\"
allow_private_addresses = true
"
            );
        }
    }
    text
}

pub fn print(args: &ConfigArgs) -> anyhow::Result<()> {
    print!("{}", render(args));
    Ok(())
}
