//! The HTTP surface (docs/protocol.md §4): routes, authentication before routing, CORS before
//! authentication (decision P10), and the web console's static files.

pub(crate) mod commands;
pub mod console;
pub(crate) mod events;
mod health;
pub mod host;
mod metrics;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_runtime::protocol::error::pseudo_command_id;
use agent_runtime::protocol::{Principal, ProtocolError};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::routing::{any, get};
use axum::{Extension, Router};
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::TraceLayer;

use agent_runtime::telemetry::{LimitKind, LimitMetric, best_effort};
use axum::http::header::AUTHORIZATION;

use crate::auth::failures::Verdict;
use crate::response::failure_response;
use crate::state::AppState;

/// Builds the router for `state.config.base_path`.
pub fn router(state: Arc<AppState>) -> Router {
    let base = state.config.base_path.clone();
    let cors = cors_layer(&state.config.cors_allowed_origins);
    let mut router = Router::new();
    if state.metrics.is_some() {
        // Outside the base path and without a token, like any Prometheus target; operators who
        // do not want it on this listener turn it off or move it (README, Telemetry).
        router = router.route("/metrics", get(metrics::metrics));
    }
    let router = router
        .route(&format!("{base}/healthz"), any(health::healthz))
        .route(&format!("{base}/readyz"), any(health::readyz))
        .route(&format!("{base}/commands"), any(commands::commands))
        .route(
            &format!("{base}/sessions/{{session_id}}/events"),
            any(events::events),
        )
        .fallback(route_not_found);
    let router = crate::admin::add_routes(router, &base);
    let router = crate::agui::add_routes(router, &base);
    let router = crate::a2a::add_routes(router, &base);
    // The console's files are registered one by one, so every other path keeps the
    // authenticate-first fallback.
    let router = if state.config.console {
        console::add_routes(router, &base)
    } else {
        router
    };
    let trace = TraceLayer::new_for_http().on_failure(log_failure);
    let router = router.with_state(state).layer(trace);
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// Logs an answer the request trace classifies as failed (a 5xx, or a body that failed). ERROR is
/// for faults of the server; a `503` is a refusal the client caused or can wait out (its tenant
/// is over a cap, the server is overloaded or draining), so it is a WARN: a client must not be
/// able to fill the error log at will.
fn log_failure(class: ServerErrorsFailureClass, latency: Duration, _span: &tracing::Span) {
    let latency_ms = latency.as_millis();
    match class {
        ServerErrorsFailureClass::StatusCode(status)
            if status == StatusCode::SERVICE_UNAVAILABLE =>
        {
            tracing::warn!(classification = %class, latency_ms, "request refused");
        }
        _ => tracing::error!(classification = %class, latency_ms, "response failed"),
    }
}

/// The request headers a cross-origin page may send, listed: `*` would not cover
/// `authorization` (Fetch standard), so no browser could send a token. These are the headers the
/// browser client (clients/js), the console and AG-UI's `HttpAgent` send, A2A's service
/// parameters, and the W3C trace context the commands continue.
const CORS_REQUEST_HEADERS: [&str; 8] = [
    "a2a-extensions",
    "a2a-version",
    "accept",
    "authorization",
    "content-type",
    "last-event-id",
    "traceparent",
    "tracestate",
];

fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow_origin = if origins.iter().any(|origin| origin == "*") {
        AllowOrigin::any()
    } else {
        let values: Vec<HeaderValue> = origins
            .iter()
            .filter_map(|origin| HeaderValue::from_str(origin).ok())
            .collect();
        AllowOrigin::list(values)
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow_origin)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers(CORS_REQUEST_HEADERS.map(HeaderName::from_static))
            .expose_headers([
                axum::http::header::RETRY_AFTER,
                HeaderName::from_static("a2a-extensions"),
            ]),
    )
}

/// The address of the peer a request came from, set on every request by the connection that
/// accepted it (absent only for a router driven in-process).
#[derive(Clone, Copy, Debug)]
pub struct ClientAddr(pub IpAddr);

impl ClientAddr {
    pub(crate) fn of(extension: Option<Extension<ClientAddr>>) -> Option<IpAddr> {
        extension.map(|Extension(ClientAddr(address))| address)
    }
}

/// Which route a request authenticates for: `retry-after` goes only with answers of the command
/// route (docs/protocol.md §4.2), the brake's `429` included.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    Commands,
    Other,
}

/// Authenticates and validates the principal (docs/protocol.md §4.3); the error is the response. A
/// client that failed too often is braked first (see [`crate::auth::failures`]).
pub(crate) fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    client: Option<IpAddr>,
    route: Route,
) -> Result<Principal, Box<Response>> {
    let failure = |error: ProtocolError| {
        Box::new(failure_response(
            pseudo_command_id::AUTHENTICATION,
            &error,
            route == Route::Commands,
        ))
    };
    let brake = state.auth_failures.as_ref().zip(client);
    let credential = headers
        .get(AUTHORIZATION)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    let cheap = state.auth.cheap_to_verify();
    let mut spent = None;
    if let Some((limiter, client)) = brake {
        match limiter.check(client, credential, cheap) {
            Verdict::Verify => {}
            Verdict::Refuse { retry_after_ms } => {
                auth_failures_braked(state);
                return Err(failure(ProtocolError::authentication_rate_limited(
                    retry_after_ms,
                )));
            }
            Verdict::VerifyThenRefuseFailure { retry_after_ms } => spent = Some(retry_after_ms),
        }
    }
    let outcome = match state.auth.authenticate(headers) {
        Ok(Some(principal)) => principal.validate().map(|()| principal),
        Ok(None) => Err(ProtocolError::unauthenticated()),
        Err(error) => Err(error),
    };
    match (outcome, brake) {
        (Ok(principal), brake) => {
            // Only costly credentials need remembering (a cheap one is checked even when braked),
            // so a static token's request costs no hash and no lock here.
            if let Some((limiter, _)) = brake.filter(|_| !cheap) {
                limiter.succeeded(credential);
            }
            Ok(principal)
        }
        (Err(error), None) => Err(failure(error)),
        (Err(error), Some((limiter, client))) => {
            limiter.failed(client);
            match spent {
                Some(retry_after_ms) => {
                    auth_failures_braked(state);
                    Err(failure(ProtocolError::authentication_rate_limited(
                        retry_after_ms,
                    )))
                }
                None => Err(failure(error)),
            }
        }
    }
}

fn auth_failures_braked(state: &AppState) {
    best_effort(|| {
        state.telemetry.record_limit(&LimitMetric {
            limit: LimitKind::AuthFailures,
        })
    });
}

/// Anything that is not a route: authentication first, so an anonymous caller learns nothing.
async fn route_not_found(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
) -> Response {
    not_found(&state, &headers, ClientAddr::of(client))
}

pub(crate) fn not_found(state: &AppState, headers: &HeaderMap, client: Option<IpAddr>) -> Response {
    if let Err(response) = authenticate(state, headers, client, Route::Other) {
        return *response;
    }
    failure_response(
        pseudo_command_id::ROUTING,
        &ProtocolError::route_not_found(),
        false,
    )
}

/// The start of a route that takes a JSON body besides the command route (AG-UI, A2A): `POST`
/// only (anything else answers like an unknown route), authenticated, its body read whole within
/// `request_timeout`; the error is the answer.
pub(crate) async fn authenticated_body(
    state: &AppState,
    method: &Method,
    headers: &HeaderMap,
    client: Option<Extension<ClientAddr>>,
    body: axum::body::Body,
) -> Result<(Principal, bytes::Bytes), Box<Response>> {
    let client = ClientAddr::of(client);
    if method != Method::POST {
        return Err(Box::new(not_found(state, headers, client)));
    }
    let principal = authenticate(state, headers, client, Route::Other)?;
    let deadline = tokio::time::Instant::now() + state.config.request_timeout;
    let bytes = commands::read_request_body(state, headers, body, deadline).await?;
    Ok((principal, bytes))
}
