//! The operator's admin API (`{base}/admin/…`, docs/security.md §2): what the production
//! checklist asks an operator to do without editing the database — reconcile commands left
//! without a result, close sessions, move a session off its executor, drain executors, look across tenants, manage webhook
//! endpoints and deliveries, delete a tenant.
//!
//! It answers only operator tokens (`gateway.operator_token_sha256`), which are not tenant
//! tokens: no tenant token, whatever its scopes, reaches these routes, and an operator token is
//! not a principal of the command API. Without a configured operator token the routes do not
//! exist (404). Every action (each `POST`) is written to the audit log as `admin.*`, with the
//! operator named by the first hex digits of its token's hash.

mod commands;
mod executors;
mod sessions;
mod webhooks;

use std::collections::HashMap;
use std::sync::Arc;

use agent_runtime::ids::nanoid;
use agent_runtime::telemetry::{AuditRecord, Outcome, best_effort};
use agent_runtime::timefmt::format_iso_ms;
use axum::body::Bytes;
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode, header::AUTHORIZATION};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::auth::failures::Verdict;
use crate::auth::token_sha256;
use crate::http::ClientAddr;
use crate::response::json_response;
use crate::state::AppState;

/// Pages of listings are at most this long.
pub const MAX_PAGE: u32 = 1000;

/// Adds the admin routes under `{base}/admin`.
pub fn add_routes(router: Router<Arc<AppState>>, base: &str) -> Router<Arc<AppState>> {
    let at = |path: &str| format!("{base}/admin/{path}");
    router
        .route(&at("sessions"), get(sessions::list))
        .route(&at("sessions/close"), post(sessions::close))
        .route(&at("sessions/move"), post(executors::move_session))
        .route(&at("tenants/delete"), post(sessions::delete_tenant))
        .route(&at("commands"), get(commands::list))
        .route(&at("commands/resolve"), post(commands::resolve))
        .route(&at("executors"), get(executors::list))
        .route(&at("executors/drain"), post(executors::drain))
        .route(&at("webhooks"), get(webhooks::endpoints))
        .route(&at("webhooks/enable"), post(webhooks::enable))
        .route(&at("webhooks/disable"), post(webhooks::disable))
        .route(&at("webhooks/deliveries"), get(webhooks::deliveries))
        .route(&at("webhooks/redeliver"), post(webhooks::redeliver))
}

/// An authenticated operator.
pub struct Operator {
    /// `operator:` and the first 12 hex digits of the token's SHA-256: names it in the audit
    /// log without revealing it.
    pub subject: String,
}

/// A failed admin call: its status, a stable code and a message in the operator's words.
#[derive(Debug)]
pub struct AdminError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl AdminError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "CONFLICT", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", message)
    }

    /// A store failure: logged, answered without its cause.
    pub fn internal(error: impl std::fmt::Display) -> Self {
        tracing::error!(%error, "an admin call failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            "Internal server error",
        )
    }

    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
}

impl From<agent_runtime_store::StoreError> for AdminError {
    fn from(error: agent_runtime_store::StoreError) -> Self {
        AdminError::internal(error)
    }
}

pub type Reply = Result<Value, AdminError>;

/// The operator behind `headers`, or the answer refusing them. Without an operator token
/// configured the admin routes answer like any unknown route. A client that failed too often is
/// braked like on the command API (`crate::auth::failures`).
fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    client: Option<Extension<ClientAddr>>,
) -> Result<Operator, Box<Response>> {
    let hashes = &state.config.operator_token_sha256;
    if hashes.is_empty() {
        let unknown = crate::http::not_found(state, headers, ClientAddr::of(client));
        return Err(Box::new(unknown));
    }
    verify_operator(state, hashes, headers, client).map_err(|error| Box::new(failure(error)))
}

fn verify_operator(
    state: &AppState,
    hashes: &[String],
    headers: &HeaderMap,
    client: Option<Extension<ClientAddr>>,
) -> Result<Operator, AdminError> {
    let credential = headers
        .get(AUTHORIZATION)
        .map(|value| value.as_bytes())
        .unwrap_or_default();
    let brake = state.auth_failures.as_ref().zip(ClientAddr::of(client));
    let braked = |retry_after_ms: u64| {
        AdminError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "RATE_LIMITED",
            format!("Too many failed authentications; retry in {retry_after_ms} ms"),
        )
    };
    // An operator token is cheap to check: a spent budget refuses only a failure.
    let mut spent = None;
    if let Some((limiter, client)) = brake {
        match limiter.check(client, credential, true) {
            Verdict::Verify => {}
            Verdict::Refuse { retry_after_ms }
            | Verdict::VerifyThenRefuseFailure { retry_after_ms } => spent = Some(retry_after_ms),
        }
    }
    let token = std::str::from_utf8(credential)
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|token| !token.is_empty());
    let hash = token.map(token_sha256);
    match hash {
        Some(hash) if hashes.iter().any(|known| known.eq_ignore_ascii_case(&hash)) => {
            Ok(Operator {
                subject: format!("operator:{}", &hash[..12]),
            })
        }
        _ => {
            if let Some((limiter, client)) = brake {
                limiter.failed(client);
            }
            if let Some(retry_after_ms) = spent {
                return Err(braked(retry_after_ms));
            }
            Err(AdminError::new(
                StatusCode::UNAUTHORIZED,
                "UNAUTHENTICATED",
                "An operator token is required (a tenant's token is not one)",
            ))
        }
    }
}

fn failure(error: AdminError) -> Response {
    let body = json!({"ok": false, "error": {"code": error.code, "message": error.message}});
    json_response(error.status, &body, None)
}

fn respond(reply: Reply) -> Response {
    match reply {
        Ok(data) => json_response(StatusCode::OK, &json!({"ok": true, "data": data}), None),
        Err(error) => failure(error),
    }
}

/// A `POST` body as `T`, or the operator's error.
pub fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, AdminError> {
    serde_json::from_slice(bytes).map_err(|error| {
        AdminError::invalid(format!(
            "The request body is not what this action takes: {error}"
        ))
    })
}

/// What an admin action touched, for its audit record (`*` for no one tenant).
pub struct Target {
    pub tenant_id: String,
    pub session_id: Option<String>,
}

impl Target {
    pub fn tenant(tenant_id: &str) -> Self {
        Self {
            tenant_id: tenant_id.to_owned(),
            session_id: None,
        }
    }

    pub fn session(tenant_id: &str, session_id: &str) -> Self {
        Self {
            tenant_id: tenant_id.to_owned(),
            session_id: Some(session_id.to_owned()),
        }
    }
}

/// A tenant id the operator typed, checked.
pub fn tenant_id(value: &str) -> Result<&str, AdminError> {
    if agent_runtime::ids::is_valid_tenant_id(value) {
        Ok(value)
    } else {
        Err(AdminError::invalid(format!("{value:?} is not a tenant id")))
    }
}

/// Runs a read for an authenticated operator.
async fn read<F, Fut>(
    state: Arc<AppState>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    query: Query<HashMap<String, String>>,
    run: F,
) -> Response
where
    F: FnOnce(Arc<AppState>, HashMap<String, String>) -> Fut,
    Fut: Future<Output = Reply>,
{
    if let Err(refused) = authenticate(&state, &headers, client) {
        return *refused;
    }
    respond(run(state, query.0).await)
}

/// Runs an action for an authenticated operator on the body it takes (`T`), and audits it as
/// `action` against what `target` says it touches.
async fn act<T, F, Fut>(
    state: Arc<AppState>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    bytes: Bytes,
    action: &'static str,
    target: impl FnOnce(&T) -> Target,
    run: F,
) -> Response
where
    T: DeserializeOwned,
    F: FnOnce(Arc<AppState>, Operator, T) -> Fut,
    Fut: Future<Output = Reply>,
{
    let operator = match authenticate(&state, &headers, client) {
        Ok(operator) => operator,
        Err(refused) => return *refused,
    };
    let request: T = match body(&bytes) {
        Ok(request) => request,
        Err(error) => return failure(error),
    };
    let target = target(&request);
    let subject = operator.subject.clone();
    let reply = run(Arc::clone(&state), operator, request).await;
    let record = AuditRecord {
        occurred_at: format_iso_ms(state.clock.now_ms()),
        tenant_id: target.tenant_id,
        subject,
        command_id: format!("admin-{}", nanoid()),
        command_type: action,
        session_id: target.session_id,
        outcome: if reply.is_ok() {
            Outcome::Success
        } else {
            Outcome::Error
        },
        error_code: None,
    };
    best_effort(|| state.telemetry.write_audit(&record));
    respond(reply)
}

/// A required query parameter.
pub fn param<'a>(query: &'a HashMap<String, String>, name: &str) -> Result<&'a str, AdminError> {
    query
        .get(name)
        .map(String::as_str)
        .filter(|value| !value.is_empty())
        .ok_or_else(|| AdminError::invalid(format!("The query parameter {name} is required")))
}

/// The `after` query parameter of a listing in `(tenant, id)` order, written `shape`
/// (`tenant/session`, `tenant/command`).
pub fn key_after(
    query: &HashMap<String, String>,
    shape: &str,
) -> Result<Option<(String, String)>, AdminError> {
    let Some(after) = query.get("after") else {
        return Ok(None);
    };
    let (tenant, id) = after
        .split_once('/')
        .ok_or_else(|| AdminError::invalid(format!("after must be {shape}")))?;
    Ok(Some((tenant.to_owned(), id.to_owned())))
}

/// The `limit` query parameter: 1 ..= [`MAX_PAGE`], default 100.
pub fn limit(query: &HashMap<String, String>) -> Result<u32, AdminError> {
    match query.get("limit") {
        None => Ok(100),
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| AdminError::invalid(format!("limit must be 1 to {MAX_PAGE}"))),
    }
}
