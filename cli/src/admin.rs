//! `agent-runtime admin`: the operator's tools, a client of the gateway's admin API
//! (`{base}/admin/…`, authenticated with an operator token). Answers are printed as JSON; a
//! refusal prints its code and message and exits with 1.

use std::path::Path;

use agent_runtime::ids::nanoid;
use agent_runtime::secret::Secret;
use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::chat::{ServerUrl, api_base};

/// Where `serve` keeps its development operator token by default.
const OPERATOR_TOKEN_FILE: &str = ".agent-runtime/operator-token";

#[derive(Debug, Clone, Args)]
pub struct AdminArgs {
    #[command(flatten)]
    pub server: ServerUrl,
    /// Operator token (never printed). Default: `.agent-runtime/operator-token` of a local
    /// `serve`.
    #[arg(long, env = "AGENT_RUNTIME_OPERATOR_TOKEN", hide_env_values = true)]
    pub token: Option<Secret>,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Clone, Subcommand)]
pub enum AdminCommand {
    /// Prints a new operator token and the SHA-256 to list in `gateway.operator_token_sha256`.
    NewToken,
    /// Sessions across tenants (open ones), or one tenant's, with where each runs.
    Sessions {
        #[command(subcommand)]
        action: SessionsAction,
    },
    /// Commands left without a result, and deciding each (reconciliation).
    Commands {
        #[command(subcommand)]
        action: CommandsAction,
    },
    /// The executors of a cluster.
    Executors {
        #[command(subcommand)]
        action: ExecutorsAction,
    },
    /// Webhook endpoints and deliveries.
    Webhooks {
        #[command(subcommand)]
        action: WebhooksAction,
    },
    /// Tenants.
    Tenants {
        #[command(subcommand)]
        action: TenantsAction,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum SessionsAction {
    /// Lists sessions: every tenant's open ones, or all of `--tenant`'s.
    List {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Closes a session now (through the command pipeline, as the operator).
    Close {
        #[arg(long)]
        tenant: String,
        #[arg(long, allow_hyphen_values = true)]
        session: String,
    },
    /// Moves a session off the executor running it now (cluster): its running request ends
    /// with `EXECUTOR_SHUTDOWN`, and the other executor runs its waiting inputs.
    Move {
        #[arg(long)]
        tenant: String,
        #[arg(long, allow_hyphen_values = true)]
        session: String,
        /// The executor to move it to; default: the live one with the fewest sessions.
        #[arg(long)]
        to: Option<String>,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum CommandsAction {
    /// Lists commands claimed or sealed without a result, with what the store knows of their
    /// effect.
    List,
    /// Completes a command whose effect is stored, or releases one whose effect is not (a retry
    /// with its id then runs it).
    Resolve {
        #[arg(long)]
        tenant: String,
        #[arg(long, allow_hyphen_values = true)]
        command: String,
        /// `complete` or `release`.
        #[arg(long)]
        action: String,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum ExecutorsAction {
    /// Lists the registered executors and the sessions each holds.
    List,
    /// Drains an executor: no new sessions; it hands its sessions off and exits.
    Drain {
        #[arg(long)]
        worker: String,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum WebhooksAction {
    /// Lists the endpoints with their state and outbox counts.
    List,
    /// Re-enables an endpoint: its pending deliveries go out again.
    Enable {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        endpoint: String,
    },
    /// Disables an endpoint: it gets no new deliveries.
    Disable {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Lists an endpoint's deliveries, oldest first.
    Deliveries {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        endpoint: String,
        /// `pending`, `delivered` or `failed`.
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Sends a delivered or failed delivery again, with the same `webhook-id`.
    Redeliver {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        delivery: String,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum TenantsAction {
    /// Closes a tenant's sessions and deletes everything it owns. Revoke its tokens first.
    Delete {
        #[arg(long)]
        tenant: String,
        /// Confirms the deletion (it cannot be undone).
        #[arg(long)]
        yes: bool,
    },
}

/// Runs one admin command; prints its answer.
pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    if let AdminCommand::NewToken = args.command {
        let token = format!("op-{}{}", nanoid(), nanoid());
        let hash = agent_runtime_gateway::token_sha256(&token);
        println!("token:  {token}");
        println!("sha256: {hash}   (add to gateway.operator_token_sha256)");
        return Ok(());
    }
    let token = match &args.token {
        Some(token) => token.clone(),
        None => crate::dev_token::read(
            Path::new(OPERATOR_TOKEN_FILE),
            "AGENT_RUNTIME_OPERATOR_TOKEN",
        )?,
    };
    let admin = format!("{}/admin", api_base(&args.server.url));
    let (method, path, body) = request(&args.command)?;
    let answer = call(&admin, &token, method, &path, body).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}

#[derive(Clone, Copy)]
enum Method {
    Get,
    Post,
}

/// The admin API call of `command`: its method, path (with query) and body.
fn request(command: &AdminCommand) -> anyhow::Result<(Method, String, Value)> {
    use AdminCommand as C;
    let query = |pairs: &[(&str, Option<String>)]| {
        let parts: Vec<String> = pairs
            .iter()
            .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={}", urlencoding(v))))
            .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    };
    Ok(match command {
        C::NewToken => unreachable!("answered without a call"),
        C::Sessions { action } => match action {
            SessionsAction::List { tenant, limit } => (
                Method::Get,
                format!(
                    "sessions{}",
                    query(&[
                        ("tenantId", tenant.clone()),
                        ("limit", Some(limit.to_string()))
                    ])
                ),
                Value::Null,
            ),
            SessionsAction::Close { tenant, session } => (
                Method::Post,
                "sessions/close".to_owned(),
                json!({"tenantId": tenant, "sessionId": session}),
            ),
            SessionsAction::Move {
                tenant,
                session,
                to,
            } => (
                Method::Post,
                "sessions/move".to_owned(),
                json!({"tenantId": tenant, "sessionId": session, "toWorkerId": to}),
            ),
        },
        C::Commands { action } => match action {
            CommandsAction::List => (Method::Get, "commands".to_owned(), Value::Null),
            CommandsAction::Resolve {
                tenant,
                command,
                action,
            } => (
                Method::Post,
                "commands/resolve".to_owned(),
                json!({"tenantId": tenant, "commandId": command, "action": action}),
            ),
        },
        C::Executors { action } => match action {
            ExecutorsAction::List => (Method::Get, "executors".to_owned(), Value::Null),
            ExecutorsAction::Drain { worker } => (
                Method::Post,
                "executors/drain".to_owned(),
                json!({"workerId": worker}),
            ),
        },
        C::Webhooks { action } => match action {
            WebhooksAction::List => (Method::Get, "webhooks".to_owned(), Value::Null),
            WebhooksAction::Enable { tenant, endpoint } => (
                Method::Post,
                "webhooks/enable".to_owned(),
                json!({"tenantId": tenant, "endpointId": endpoint}),
            ),
            WebhooksAction::Disable {
                tenant,
                endpoint,
                reason,
            } => (
                Method::Post,
                "webhooks/disable".to_owned(),
                json!({"tenantId": tenant, "endpointId": endpoint, "reason": reason}),
            ),
            WebhooksAction::Deliveries {
                tenant,
                endpoint,
                status,
                limit,
            } => (
                Method::Get,
                format!(
                    "webhooks/deliveries{}",
                    query(&[
                        ("tenantId", Some(tenant.clone())),
                        ("endpointId", Some(endpoint.clone())),
                        ("status", status.clone()),
                        ("limit", Some(limit.to_string())),
                    ])
                ),
                Value::Null,
            ),
            WebhooksAction::Redeliver { tenant, delivery } => (
                Method::Post,
                "webhooks/redeliver".to_owned(),
                json!({"tenantId": tenant, "deliveryId": delivery}),
            ),
        },
        C::Tenants { action } => match action {
            TenantsAction::Delete { tenant, yes } => {
                anyhow::ensure!(
                    *yes,
                    "deleting tenant {tenant} cannot be undone: add --yes to confirm"
                );
                (
                    Method::Post,
                    "tenants/delete".to_owned(),
                    json!({"tenantId": tenant}),
                )
            }
        },
    })
}

/// Percent-encodes a query value (ids are mostly safe already; this keeps any other character).
fn urlencoding(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// One call; the answer's `data`, or an error with the answer's code and message.
async fn call(
    admin: &str,
    token: &Secret,
    method: Method,
    path: &str,
    body: Value,
) -> anyhow::Result<Value> {
    let client = agent_runtime_client::http_client_builder()
        .build()
        .context("building the HTTP client")?;
    let url = format!("{admin}/{path}");
    let request = match method {
        Method::Get => client.get(&url),
        Method::Post => client.post(&url).json(&body),
    };
    let response = request
        .bearer_auth(token.expose())
        .send()
        .await
        .with_context(|| format!("calling {admin}"))?;
    let status = response.status();
    let answer: Value = response
        .json()
        .await
        .with_context(|| format!("{admin} answered {status} without a JSON body"))?;
    if answer["ok"] == true {
        return Ok(answer["data"].clone());
    }
    let code = answer["error"]["code"].as_str().unwrap_or("UNKNOWN");
    let message = answer["error"]["message"].as_str().unwrap_or("no message");
    anyhow::bail!("{code}: {message}")
}
